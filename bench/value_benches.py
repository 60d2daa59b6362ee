"""Large values (issue 15): a 64 MiB argument to a trivial agent vs a process pool.

Targets: submit -> result within 3x ``ProcessPoolExecutor`` in the same run,
and the ledger (``ledger.db`` + WAL) growing by at most 1 MiB over all the
runs: the argument of an agent that cannot resume is not stored, and the
payload reaches the unit in a memfd, not through the ledger or a socket.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle
import harness
from harness import BenchResult
from peer_benches import EVICT_SOON, MIB, HasQuick, pair_of, scale, state_dir

import workunits as wu

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def size_of(data: bytes) -> int:
    return len(data)


def _ledger_bytes(state: Path) -> int:
    """The ledger's own file once the WAL's pages are in it (a passive checkpoint, which
    waits for no one): what the rows take. The WAL file's size is not: every
    transaction appends whole pages to it until a checkpoint, so it grew by about
    80 KiB per unit whatever the unit's argument, and the figure moved with where
    the run fell in the WAL's cycle (0.66 MiB in one run, 1.16 MiB in another)."""
    with contextlib.closing(sqlite3.connect(state / "ledger.db", timeout=10)) as conn:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    return (state / "ledger.db").stat().st_size


def bench_large_argument(cfg: HasQuick) -> BenchResult:
    """``sup.agent(size_of, 64 MiB)`` -> result vs ``ProcessPoolExecutor(1)``, alternately."""
    result = BenchResult("large_argument")
    reps = scale(cfg, 4, 12)
    size = 64 * MIB
    data = os.urandom(size)
    with (
        state_dir("large") as state,
        wu.Supervisor(state, eviction_grace=EVICT_SOON) as sup,
        concurrent.futures.ProcessPoolExecutor(1) as ppe,
    ):

        def timed(call: Callable[[], Any]) -> float:
            start = time.perf_counter()
            value = call()
            elapsed = time.perf_counter() - start
            assert value == size
            return elapsed

        def unit() -> float:
            return timed(lambda: sup.result(sup.agent(size_of, data).id, timeout=120))

        def pool() -> float:
            return timed(lambda: ppe.submit(size_of, data).result(120))

        sup.result(sup.agent(size_of, b"").id, timeout=60)  # the zygote is up
        ppe.submit(size_of, b"").result(60)
        before = _ledger_bytes(state)
        pair = pair_of(
            result,
            "64 MiB argument, submit -> result",
            ("sup.agent(size_of, 64 MiB) -> sup.result", []),
            ("ProcessPoolExecutor(1) submit -> result, 64 MiB", []),
        )
        pair.a.samples, pair.b.samples = harness.alternate(unit, pool, reps, 1)
        grown = _ledger_bytes(state) - before
    result.info["ledger_growth_bytes"] = grown
    result.check(
        "64 MiB argument: agent / ProcessPoolExecutor (median of pair ratios)",
        "<= 3.00x",
        3.0,
        pair.median_pair_ratio,
        f"{pair.median_pair_ratio:.2f}x ({harness.fmt(pair.a.median, 's')} vs "
        f"{harness.fmt(pair.b.median, 's')})",
    )
    result.check(
        f"ledger growth over {reps + 1} units with a 64 MiB argument",
        "<= 1 MiB",
        float(MIB),
        float(grown),
        f"{grown / MIB:.3f} MiB",
    )
    return result


BENCHES: dict[str, Callable[[Any], BenchResult]] = {"large_argument": bench_large_argument}
