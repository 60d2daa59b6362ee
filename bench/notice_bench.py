"""Notices through two competing consumers in two processes, acknowledgement included (issue 13).

    python bench/notice_bench.py [--notices N] [--dir DIR]

A ledger is pre-filled with N ended top-level units through the ledger API
(submit, start, end: each end writes its notice in the same transaction), then
two consumer processes, each a ``wu.connect`` client, loop on
``with client.notifications().take() as n:`` until nothing is left. Each
take claims under the write lock and acknowledges fully synced, so the figure
is what exactly-once delivery costs per notice when two consumers contend for
one outbox. The state dir is under DIR (default: bench/results), on the disk
the project lives on: a tmpfs would make every fsync free.

Prints notices/s (N over the time from "go" to the last acknowledgement) and
checks that every notice was taken exactly once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import operator
import subprocess
import sys
import time
from pathlib import Path

from harness import BenchResult, Series
from peer_benches import HasQuick, scale, state_dir

import workunits as wu
from workunits._core import ids as _ids
from workunits._core.status import Status
from workunits._ledger import Call, Ledger, NewUnit

CONSUMERS = 2
IDLE = 1.0  # a consumer that finds nothing for this long is done
RESULTS = Path(__file__).resolve().parent / "results"


def prefill(state: Path, count: int) -> list[str]:
    """``count`` top-level units, each submitted, started and completed: one notice each."""
    ids: list[str] = []
    with Ledger(state) as ledger:
        for n in range(count):
            work_id = _ids.mint("a")
            spec = ledger.units.encode_spec(Call(operator.add, (n, n)), work_id)
            row, _ = ledger.units.submit(NewUnit(work_id, "agent", spec, time.time()))
            running = dataclasses.replace(row.to_record(), status=Status.RUNNING, started_at=1.0)
            ledger.attempts.write(running, attempt=1)
            ledger.attempts.write(work_id, attempt=1, status="completed")
            ids.append(work_id)
    return ids


def consume(state: Path) -> None:
    """One consumer: say ready, wait for go, take until idle; report what it took, and when."""
    client = wu.connect(state)
    notices = client.notifications()
    print("ready", flush=True)
    sys.stdin.readline()
    taken: list[str] = []
    last = time.time()
    while True:
        try:
            with notices.take(timeout=IDLE) as notice:
                taken.append(notice.id)
        except wu.NoNotification:
            break
        last = time.time()
    client.close()
    print(json.dumps({"taken": taken, "last": last}), flush=True)


def measure(state: Path, count: int) -> tuple[float, list[int]]:
    """Pre-fill, race the consumers; (notices/s, notices per consumer)."""
    ids = prefill(state, count)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--consume", str(state)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(CONSUMERS)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        go = time.time()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    taken = [work_id for report in reports for work_id in report["taken"]]
    if sorted(taken) != sorted(ids):
        raise AssertionError(
            f"{len(taken)} notices taken for {len(ids)} units, {len(set(taken))} distinct"
        )
    seconds = max(report["last"] for report in reports) - go
    return count / seconds, [len(report["taken"]) for report in reports]


def bench_notices(cfg: HasQuick) -> BenchResult:
    result = BenchResult("notices_two_consumers")
    count = scale(cfg, 500, 2000)
    RESULTS.mkdir(parents=True, exist_ok=True)
    with state_dir("notices", RESULTS) as base:
        rate, split = measure(base / "state", count)
    result.series.append(Series("notices taken and acknowledged, 2 processes", [rate], "/s"))
    result.info.update({"notices": count, "per_consumer": split, "rate": rate})
    result.note(f"{count} notices, {rate:,.0f}/s through 2 consumer processes; split {split}")
    return result


BENCHES = {"notices": bench_notices}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notices", type=int, default=2000)
    parser.add_argument("--dir", type=Path, default=RESULTS)
    parser.add_argument("--consume", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consume is not None:
        consume(args.consume)
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    with state_dir("notices", args.dir) as base:
        rate, split = measure(base / "state", args.notices)
    print(f"| notices taken and acknowledged, {CONSUMERS} consumer processes | {rate:,.0f}/s |")
    print(f"({args.notices} notices; per consumer: {split})")


if __name__ == "__main__":
    main()
