"""Ledger throughput: fully synced submits and grouped transitions (DESIGN §8).

    python bench/ledger_bench.py [--units N] [--group G] [--dir DIR] [--ledger URL]

The state dir is made under DIR (default: the current directory), so the
figures are those of the disk the project lives on; a tmpfs would make every
fsync free. Prints a Markdown table. ``--ledger postgresql://...`` measures a
PostgreSQL ledger instead (an empty database; the peer stays bare SQLite).
"""

from __future__ import annotations

import argparse
import dataclasses
import operator
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from workunits._core import ids
from workunits._core.record import WorkRecord
from workunits._core.status import Status
from workunits._ledger import Call, Ledger, NewUnit, Write, WriteOutcome

SUBMIT_TARGET = 3_000
GROUPED_TARGET = 20_000


def timed(fn: Callable[[], int]) -> tuple[int, float]:
    start = time.perf_counter()
    count = fn()
    return count, time.perf_counter() - start


def in_groups(items: Sequence[Write], size: int) -> list[Sequence[Write]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def raw_commits(path: Path, count: int) -> float:
    """The peer figure: bare SQLite, WAL, synchronous=FULL, one small insert per commit."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT UNIQUE, v BLOB)")
    start = time.perf_counter()
    for n in range(count):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"k{n}", b"x" * 200))
        conn.execute("COMMIT")
    rate = count / (time.perf_counter() - start)
    conn.close()
    return rate


class BareInserts:
    """The peer: one connection, WAL, FULL; one insert of ``size`` bytes per transaction."""

    def __init__(self, path: Path, size: int) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT UNIQUE, v BLOB)")
        self._value = b"x" * max(1, size - 16)  # the key below is ~16 bytes
        self._n = 0

    def rate(self, count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            self.insert()
        return count / (time.perf_counter() - start)

    def insert(self) -> None:
        """One row, one fully synced transaction."""
        self._n += 1
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute(
            "INSERT INTO t (k, v) VALUES (?, ?)", (f"key-{self._n:012d}", self._value)
        )
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


def run(
    state_dir: Path, units: int, group: int, url: str | None = None
) -> list[tuple[str, float, int | None]]:
    results: list[tuple[str, float, int | None]] = []
    with Ledger(state_dir, ledger=url) as ledger:
        records: list[WorkRecord] = []

        def submit_all() -> int:
            for n in range(units):
                work_id = ids.mint("a")
                spec = ledger.units.encode_spec(Call(operator.add, (n, n)), work_id)
                row, _ = ledger.units.submit(
                    NewUnit(work_id, "agent", spec, time.time(), key=f"bench-{n}")
                )
                records.append(row.to_record())
            return units

        count, seconds = timed(submit_all)
        results.append(
            (
                "submits, one fully synced transaction each (spec encoded too)",
                count / seconds,
                SUBMIT_TARGET,
            )
        )

        def submit_grouped() -> int:
            news = []
            for n in range(units):
                work_id = ids.mint("a")
                spec = ledger.units.encode_spec(Call(operator.add, (n, -n)), work_id)
                news.append(NewUnit(work_id, "agent", spec, time.time(), key=f"group-{n}"))
            for i in range(0, units, group):
                answers = ledger.units.submit_many(news[i : i + group])
                assert all(isinstance(a, tuple) and a[1] for a in answers)
            return units

        count, seconds = timed(submit_grouped)
        results.append(
            (f"submits, {group} per fully synced transaction", count / seconds, SUBMIT_TARGET)
        )

        now = time.time()
        running = [
            dataclasses.replace(r, status=Status.RUNNING, started_at=now, pid=1000) for r in records
        ]

        def start_all() -> int:
            for batch in in_groups([Write(r, 1) for r in running], group):
                outcomes = ledger.attempts.write_many(batch)
                assert all(o is WriteOutcome.WRITTEN for o in outcomes)
            return units

        count, seconds = timed(start_all)
        results.append(
            (
                f"pending -> running, grouped {group} per transaction",
                count / seconds,
                GROUPED_TARGET,
            )
        )

        def progress_all() -> int:
            items = [(r.id, 1, 0.5, "half way") for r in running]
            written = 0
            for i in range(0, len(items), group):
                written += ledger.attempts.write_progress_batch(items[i : i + group])
            assert written == units
            return units

        count, seconds = timed(progress_all)
        results.append(
            (f"progress, grouped {group} per transaction", count / seconds, GROUPED_TARGET)
        )

        ended = [
            dataclasses.replace(
                r, status=Status.COMPLETED, ended_at=now, exit_code=0, output_tail=b"ok\n"
            )
            for r in running
        ]

        def end_all() -> int:
            for batch in in_groups([Write(r, 1, result={"n": 1}) for r in ended], group):
                outcomes = ledger.attempts.write_many(batch)
                assert all(o is WriteOutcome.WRITTEN for o in outcomes)
            return units

        count, seconds = timed(end_all)
        results.append(
            (
                f"running -> completed + result + outbox row, {group} per synced transaction",
                count / seconds,
                None,
            )
        )
        assert len(ledger.outbox.undelivered(None, limit=units + 1)) == units

        one_by_one = records[: min(units, 1000)]

        def write_one_by_one() -> int:
            for r in one_by_one:
                ledger.attempts.write(r.id, attempt=1, output_offset=1)
            return len(one_by_one)

        count, seconds = timed(write_one_by_one)
        results.append(
            (
                "one field write per transaction (NORMAL), ungrouped, for comparison",
                count / seconds,
                None,
            )
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=5_000)
    parser.add_argument("--group", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=Path())
    parser.add_argument("--ledger", default=None, help="a postgresql:// URL (default: SQLite)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ledger-bench-", dir=args.dir))
    try:
        peer = raw_commits(base / "raw.db", args.units)
        results = run(base / "state", args.units, args.group, args.ledger)
        peer_after = raw_commits(base / "raw-after.db", args.units)
    finally:
        shutil.rmtree(base)
    where = "PostgreSQL" if args.ledger else f"state dir under {args.dir.resolve()}"
    print(f"ledger, {args.units} units, {where}\n")
    print("| what | per second | target | |")
    print("|---|---:|---:|---|")
    for what, rate, target in results:
        verdict = "" if target is None else ("ok" if rate >= target else "BELOW TARGET")
        shown_target = "" if target is None else f"≥ {target:,}"
        print(f"| {what} | {rate:,.0f} | {shown_target} | {verdict} |")
    print(
        f"| peer: bare SQLite, one synced insert per commit (before / after) | "
        f"{peer:,.0f} / {peer_after:,.0f} | | |"
    )
    print(
        "\nSynced submits one at a time are bound by the disk's fsync rate: compare "
        "them with the bare SQLite peer, measured in the same run."
    )


if __name__ == "__main__":
    main()
