"""What an agent's capture costs: a trivial agent (submit -> result) and 100 MB of output.

    PYTHONPATH=src python bench/capture_bench.py trivial|lines|chunks [--units N] [--mb M]

One scenario per run, in a fresh supervisor; prints one JSON line: wall time per
unit and CPU per unit of everything involved (this process, the zygote and the
units, counted once the supervisor has closed and reaped them). CPU is the
steadier figure on a shared machine: compare it between two versions by
alternating runs of each.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import workunits as wu


def trivial() -> int:
    return 1


def lines(total: int) -> int:
    """``total`` bytes as 100-byte lines, one print each (line-buffered stdout)."""
    line = "x" * 99
    for _ in range(total // 100):
        print(line)
    return total


def chunks(total: int) -> int:
    """``total`` bytes in 64 KiB writes to sys.stdout."""
    chunk = "x" * 65535 + "\n"
    write = sys.stdout.write
    for _ in range(total // len(chunk)):
        write(chunk)
    return total


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["trivial", "lines", "chunks"])
    parser.add_argument("--units", type=int, default=200, help="trivial agents to run")
    parser.add_argument("--mb", type=int, default=100, help="output per unit, in MB")
    args = parser.parse_args()
    count = args.units if args.scenario == "trivial" else 1
    call = {"trivial": (trivial,), "lines": (lines, args.mb * 10**6)}.get(
        args.scenario, (chunks, args.mb * 10**6)
    )
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        with wu.Supervisor(Path(tmp) / "state") as sup:
            sup.result(sup.agent(trivial).id, timeout=30)  # the zygote is up and warm
            cpu0 = _cpu()
            for _ in range(count):
                t0 = time.perf_counter()
                sup.result(sup.agent(*call).id, timeout=600)
                walls.append(time.perf_counter() - t0)
            size = sum(f.stat().st_size for f in (Path(tmp) / "state" / "transcripts").iterdir())
        cpu = _cpu() - cpu0  # includes closing the supervisor: the same in both versions
    print(
        json.dumps(
            {
                "scenario": args.scenario,
                "units": count,
                "wall_ms_median": round(statistics.median(walls) * 1e3, 3),
                "cpu_ms_per_unit": round(cpu / count * 1e3, 3),
                "transcripts_mb": round(size / 1e6, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
