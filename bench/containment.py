"""Cost and speed of unit containment (cgroup per unit vs the subreaper chain).

Usage: python bench/containment.py [--runs N]   (set WORKUNITS_CONTAINMENT=subreaper
to measure the weaker mechanism). Prints medians, in ms:

- agent / shell: submit -> terminal record of a trivial unit (the per-unit cost);
- end -> last death: a shell unit starts an escaped `setsid sleep`, is killed,
  and the escaped process's death is timed through a pidfd from the moment the
  unit's terminal record is seen (negative: it died before the record landed).
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import tempfile
import time
from pathlib import Path

import workunits as wu
from workunits._zygote import containment


def trivial() -> int:
    return 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    with (
        tempfile.TemporaryDirectory() as tmp,
        wu.Supervisor(Path(tmp) / "state", install_signal_handlers=False) as sup,
    ):
        for _ in range(20):  # warm-up
            sup.result(sup.agent(trivial).id, timeout=30)
        agent, shell, death = [], [], []
        for _ in range(runs):
            start = time.perf_counter()
            sup.result(sup.agent(trivial).id, timeout=30)
            agent.append(time.perf_counter() - start)
            start = time.perf_counter()
            sup.wait(sup.shell(["true"]).id, timeout=30)
            shell.append(time.perf_counter() - start)
        pidfile = Path(tmp) / "pid"
        for _ in range(max(runs // 10, 10)):
            pidfile.unlink(missing_ok=True)
            unit = sup.shell(f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 700' & sleep 700")
            while not pidfile.exists() or not pidfile.read_text().strip():
                time.sleep(0.001)
            pidfd = os.pidfd_open(int(pidfile.read_text()))
            sup.kill(unit.id)
            sup.wait(unit.id, timeout=30)
            ended = time.perf_counter()
            select.select([pidfd], [], [], 10)
            death.append(time.perf_counter() - ended)
            os.close(pidfd)
    found = containment.probe()
    mechanism = "cgroup" if found.own is not None else f"subreaper ({found.reason})"
    print(f"mechanism: {mechanism}")
    for name, values in (("agent", agent), ("shell", shell), ("end -> last death", death)):
        print(
            f"{name:>18}: median {statistics.median(values) * 1000:.3f} ms "
            f"(p90 {sorted(values)[int(len(values) * 0.9)] * 1000:.3f}, n={len(values)})"
        )


if __name__ == "__main__":
    main()
