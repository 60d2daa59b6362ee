"""Pooled units (``agent(..., reuse=True)``) against ProcessPoolExecutor (DESIGN section 8).

Targets: per call <= 2x ``ProcessPoolExecutor(2)`` (pairwise, same run), and
>= 2,000 units/s with 2 in flight on the default fully synced ledger. Every
unit costs at least one fsync'd commit (its submit) before it may start
(DESIGN section 6), so the physical floor for the rate is measured beside it
in the same run: bare SQLite WAL ``synchronous=FULL`` commits, one per
transaction, on the disk the state dir is on.
"""

from __future__ import annotations

import concurrent.futures
import statistics
import time
from collections.abc import Callable
from typing import Any

import harness
from harness import BenchResult, Pair, Series
from peer_benches import (
    EVICT_SOON,
    HasQuick,
    check_floor_ratio,
    durable_floor_note,
    durable_pair,
    pair_of,
    scale,
    state_dir,
    synced_commit_rates,
    trivial,
    two_in_flight,
)

import workunits as wu


def bench_pooled_units(cfg: HasQuick) -> BenchResult:
    """``sup.agent(trivial, reuse=True)`` -> result vs ``ProcessPoolExecutor(2)``."""
    result = BenchResult("pooled_units")
    reps = scale(cfg, 100, 600)
    warm = scale(cfg, 20, 50)
    batch = scale(cfg, 400, 2000)
    windows = scale(cfg, 3, 5)
    with (
        state_dir("pooled") as state,
        wu.Supervisor(state, eviction_grace=EVICT_SOON, pool_size=2) as sup,
        concurrent.futures.ProcessPoolExecutor(2) as ppe,
    ):

        def pooled_call() -> Any:
            return sup.result(sup.agent(trivial, 1, reuse=True).id, timeout=60)

        def ppe_call() -> Any:
            return ppe.submit(trivial, 1).result(60)

        per_call = pair_of(
            result,
            "pooled submit -> result vs ProcessPoolExecutor",
            ("sup.agent(trivial, reuse=True) -> sup.result", []),
            ("ProcessPoolExecutor(2) submit -> result", []),
        )
        per_call.a.samples, per_call.b.samples = harness.alternate(
            _timed(pooled_call), _timed(ppe_call), reps, warm
        )
        durable = durable_pair(
            result,
            state,
            ("sup.agent(trivial, reuse=True) -> sup.result", _timed(pooled_call)),
            ("a ProcessPoolExecutor(2) call", ppe_call),
            reps=reps,
            warm=warm,
        )
        xs, ys = harness.alternate(
            lambda: two_in_flight(pooled_call, batch),
            lambda: two_in_flight(ppe_call, batch),
            windows,
            1,
        )
        fsyncs = synced_commit_rates(state, windows, scale(cfg, 500, 2000))
    rates = Pair(
        "pooled throughput, 2 in flight",
        Series(f"pooled units, 2 in flight ({batch} per window)", xs, "units/s"),
        Series(f"ProcessPoolExecutor(2), 2 in flight ({batch} per window)", ys, "units/s"),
    )
    commits = Series("floor: bare SQLite WAL FULL commits, one per transaction", fsyncs, "/s")
    result.pairs.append(rates)
    result.series += [rates.a, rates.b, commits]
    rate = rates.a.median
    # Peers, no target: DESIGN §8 sets the pooled unit's against its floor, and
    # pool().map's rate against ProcessPoolExecutor.map (batch_bench.py).
    result.note(
        f"pooled submit -> result / ProcessPoolExecutor: {per_call.median_pair_ratio:.2f}x "
        f"({harness.fmt(per_call.a.median, 's')} vs {harness.fmt(per_call.b.median, 's')}); "
        f"2 in flight {rate:,.0f} units/s (ProcessPoolExecutor {rates.b.median:,.0f}/s)"
    )
    check_floor_ratio(result, durable, "pooled")
    fsync_rate = statistics.median(fsyncs)
    result.note(
        durable_floor_note(
            durable, "a ProcessPoolExecutor call", ("the pool's call", per_call.b.median)
        )
    )
    result.note(
        f"each unit's submit is a fully synced commit before it may start; bare SQLite "
        f"FULL commits run {fsync_rate:,.0f}/s on this disk in this run, and pooled units "
        f"with 2 in flight reach {rate / fsync_rate:.2f}x of that"
    )
    return result


def _timed(call: Callable[[], Any]) -> Callable[[], float]:
    def timed() -> float:
        start = time.perf_counter()
        value = call()
        elapsed = time.perf_counter() - start
        assert value == 2
        return elapsed

    return timed


BENCHES: dict[str, Callable[[Any], BenchResult]] = {"pooled_units": bench_pooled_units}
