"""Fully synced submits through the supervisor against bare SQLite FULL inserts (DESIGN §8).

    python bench/submit_bench.py [--quick]      (also: bench/run.py --only submits)

Target: 8 threads submitting at once >= 5,000/s; one caller's rate is reported
against bare SQLite (WAL, ``synchronous=FULL``, one row of the same size per
transaction) measured alternately in the same run. Windows alternate (bare, one caller, eight
callers, ...) so that drift on a shared machine hits all three alike; each
ratio is the median of the per-window ratios.

The one caller's floor, in the same windows: the bare insert made by a thread
of its own that the caller asks through a queue and waits on, as every submit
asks the supervisor's thread (DESIGN §3: one actor owns the registry and the
ledger's writes). A ratio to that floor says what the submit's own work costs.

The units are ``sup.shell(["true"], not_before=<a day from now>)``: each submit
takes the same durable path as any other (validated, its row inserted in one
fully synced transaction, then admitted), but the unit waits ``pending``
instead of starting, so the figure is the submit path's and not the process
starts'. Its row keeps its spec (a unit that starts at once and cannot resume
does not), a few dozen bytes more than most submits write. The state dir is on
the disk bench/ lives on: a tmpfs would make every fsync free.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import ledger_bench
import procstat
from harness import BenchResult, Pair, Series
from peer_benches import EVICT_SOON, HasQuick, scale, state_dir

import workunits as wu

CALLERS = 8
MANY_CALLERS_RATE = 5_000  # submits/s from CALLERS threads at once, at least (DESIGN §8)
LATER = 24 * 3600.0  # not_before: the units never start during the bench


def row_bytes(db: Path) -> int:
    """The bytes of one ``units`` row's values (text, blobs; 8 per number), the largest."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT * FROM units").fetchall()
    finally:
        conn.close()
    sizes = [
        sum(len(v) if isinstance(v, str | bytes) else 8 for v in row if v is not None)
        for row in rows
    ]
    return max(sizes)


@contextlib.contextmanager
def _deploy_on_exit(sup: wu.Supervisor) -> Iterator[None]:
    try:
        yield
    finally:
        sup.close(deploy=True)


class InsertsOnAThread:
    """Bare inserts made by a thread of their own, each asked for and waited on."""

    def __init__(self, inserts: ledger_bench.BareInserts) -> None:
        self._inserts = inserts
        self._asks: queue.SimpleQueue[queue.SimpleQueue[None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="bare-inserts", daemon=True)
        self._thread.start()

    def insert(self) -> None:
        answer: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._asks.put(answer)
        answer.get(timeout=60)

    def close(self) -> None:
        self._asks.put(None)
        self._thread.join(60)

    def _serve(self) -> None:
        while (answer := self._asks.get()) is not None:
            self._inserts.insert()
            answer.put(None)


def one_caller(submit: Callable[[], object], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        submit()
    return count / (time.perf_counter() - start)


def many_callers(pool: ThreadPoolExecutor, submit: Callable[[], object], count: int) -> float:
    """Submits per second from CALLERS threads that start together, ``count`` in all."""
    each = count // CALLERS
    ready = threading.Barrier(CALLERS + 1)

    def caller() -> None:
        ready.wait(30)
        for _ in range(each):
            submit()

    futures = [pool.submit(caller) for _ in range(CALLERS)]
    ready.wait(30)
    start = time.perf_counter()
    for f in futures:
        f.result(300)
    return each * CALLERS / (time.perf_counter() - start)


@dataclass(frozen=True, slots=True)
class Window:
    """One window of CALLERS threads submitting at once."""

    rate: float  # submits per second
    commits: float  # ledger commits per submit
    cpu: float  # this process's CPU seconds per submit (every thread)
    cpu_supervisor: float  # of it, the supervisor actor's thread


def eight_callers(
    pool: ThreadPoolExecutor, submit: Callable[[], object], count: int, ledger: Any
) -> Window:
    ledger.drain_commit_seconds()
    families = procstat.thread_families()
    threads0, cpu0 = procstat.thread_cpu_seconds(), procstat.cpu_seconds()
    rate = many_callers(pool, submit, count)
    threads1, cpu1 = procstat.thread_cpu_seconds(), procstat.cpu_seconds()
    by_family = procstat.cpu_by_family(families, threads0, threads1)
    return Window(
        rate=rate,
        commits=len(ledger.drain_commit_seconds()) / count,
        cpu=(cpu1 - cpu0) / count,
        cpu_supervisor=by_family.get("SupervisorActor", 0.0) / count,
    )


def bench_submits(cfg: HasQuick) -> BenchResult:
    result = BenchResult("submits")
    count = scale(cfg, 400, 2000)
    windows = scale(cfg, 3, 5)
    where = Path(__file__).resolve().parent / "results"
    where.mkdir(parents=True, exist_ok=True)
    bare: list[float] = []
    hopped: list[float] = []  # the bare insert through a thread: the one caller's floor
    single: list[float] = []
    crowded: list[Window] = []  # CALLERS threads at once
    clients: list[float] = []  # a wu.connect client's threads (no target)
    with (
        state_dir("submits", where) as base,
        wu.Supervisor(base / "state", eviction_grace=EVICT_SOON) as sup,
        ThreadPoolExecutor(CALLERS) as pool,
        # Its own state dir, no supervisor: the client's own path, nothing adopting.
        wu.Client(base / "client-state") as client,
        # Pending units are left to a next session (no terminal write each): a plain
        # close kills them one synced commit at a time, minutes for this many.
        _deploy_on_exit(sup),
    ):
        ledger = sup._machinery.ledger  # its commit count, for the note

        def submit() -> object:
            return sup.shell(["true"], not_before=LATER)

        for _ in range(50):  # warm-up, and rows to size the peer's by
            submit()
        size = row_bytes(base / "state" / "ledger.db")
        peer = ledger_bench.BareInserts(base / "bare.db", size)
        served = InsertsOnAThread(ledger_bench.BareInserts(base / "served.db", size))
        try:
            peer.rate(200)
            one_caller(served.insert, 200)
            for _ in range(windows):
                bare.append(peer.rate(count))
                hopped.append(one_caller(served.insert, count))
                single.append(one_caller(submit, count))
                crowded.append(eight_callers(pool, submit, count, ledger))
                clients.append(
                    many_callers(pool, lambda: client.shell(["true"], not_before=LATER), count)
                )
        finally:
            peer.close()
            served.close()
    one = Pair(
        "one caller vs bare SQLite FULL",
        Series("sup.shell(not_before=later), one caller", single, "/s"),
        Series(f"bare SQLite WAL FULL insert, one {size}-byte row per commit", bare, "/s"),
    )
    floor = Pair(
        "one caller vs its floor",
        Series("sup.shell(not_before=later), one caller [vs floor]", single, "/s"),
        Series("floor: a bare insert made by a thread the caller asks", hopped, "/s"),
    )
    result.pairs += [one, floor]
    eight = [w.rate for w in crowded]
    many = Series(f"sup.shell(not_before=later), {CALLERS} threads", eight, "/s")
    result.series += [one.a, one.b, floor.b, many]
    ratio = statistics.median(one.pair_ratios)
    # No target since DESIGN §8 set the many callers' rate (below) in its place.
    result.note(
        f"one caller's synced submits / bare SQLite FULL inserts (median of window "
        f"ratios): {ratio:.2f}x ({one.a.median:,.0f}/s vs {one.b.median:,.0f}/s)"
    )
    result.note(
        f"one caller's floor, in the same windows: the bare insert made by a thread the "
        f"caller asks through a queue and waits on = {floor.b.median:,.0f}/s "
        f"({floor.b.median / one.b.median:.2f}x the bare insert); one caller's submits reach "
        f"{floor.median_pair_ratio:.2f}x of it, window by window"
    )
    rate = statistics.median(eight)
    result.check(
        f"synced submits from {CALLERS} threads at once (time per submit)",
        f"<= {1e6 / MANY_CALLERS_RATE:.1f} us (>= {MANY_CALLERS_RATE:,}/s)",
        1 / MANY_CALLERS_RATE,
        1 / rate,
        f"{rate:,.0f}/s ({rate / one.b.median:.2f}x bare SQLite FULL)",
    )
    result.series.append(
        Series(f"wu.connect client's shell(not_before=later), {CALLERS} threads", clients, "/s")
    )
    per_submit = statistics.median(w.cpu for w in crowded)
    on_supervisor = statistics.median(w.cpu_supervisor for w in crowded)
    result.info["cpu_us_per_submit_8_threads"] = per_submit * 1e6
    result.note(
        f"what bounds {CALLERS} threads: the process's CPU, "
        f"{per_submit * 1e6:.0f} us per submit (the supervisor's thread "
        f"{on_supervisor * 1e6:.0f} us of it), taken under one GIL: "
        f"{1 / per_submit:,.0f}/s at most, where {MANY_CALLERS_RATE:,}/s needs "
        f"<= {1e6 / MANY_CALLERS_RATE:.0f} us; the synced commits are shared (below)"
    )
    result.note(
        f"{count} submits per window, {windows} windows; {CALLERS} threads: "
        f"{statistics.median(w.commits for w in crowded):.2f} ledger commits per submit; "
        f"bare peer row {size} bytes"
    )
    return result


BENCHES: dict[str, Callable[[Any], BenchResult]] = {"submits": bench_submits}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()

    class Cfg:
        quick = args.quick

    print(harness.markdown([bench_submits(Cfg())]))


if __name__ == "__main__":
    main()
