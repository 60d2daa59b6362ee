"""The event loop's lag while async submits and results run (issue 15, item 1).

A coroutine that asks to wake every 1 ms records how late each wake-up is:
that lateness is what every other coroutine on the loop (an HTTP server's
requests, say) waits on top of its own work. Measured, in one run:

- ``idle``: a started supervisor, nothing submitted (the floor of this machine);
- ``async``: N agent units submitted with ``agent_async`` and awaited with
  ``result_async``, ``IN_FLIGHT`` at a time;
- ``blocking``: the same with the blocking ``agent``/``result`` called on the
  loop (what an application without the twins does), for comparison;
- ``start``: ``async with wu.Supervisor(...)`` (start-up on a worker thread)
  against constructing one on the loop's thread.

Targets: with the twins, the p99 lag stays within 5 ms of the idle loop's p99
in the same run (the machine's own scheduling noise) and the worst within
50 ms; figures are p50 / p99 / max in milliseconds.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import cloudpickle
from harness import BenchResult, Series
from peer_benches import EVICT_SOON, HasQuick, scale, state_dir

import workunits as wu

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TICK = 0.001
IN_FLIGHT = 16


def trivial(x: int) -> int:
    return x


class LagMeter:
    """Wakes every ``TICK`` seconds on the loop; ``lags`` holds how late each wake-up was."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LagMeter:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)  # its first tick is scheduled before the load starts
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        await asyncio.sleep(5 * TICK)  # a tick held up by the last blocking call is recorded
        self._task.cancel()

    async def _tick(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(TICK)
            self.lags.append(max(0.0, time.perf_counter() - start - TICK))


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _report(result: BenchResult, name: str, lags: list[float]) -> tuple[float, float, float]:
    ms = [lag * 1000 for lag in lags]
    result.series.append(Series(f"{name} lag", ms, unit="ms"))
    p50, p99, worst = statistics.median(ms), _quantile(ms, 0.99), max(ms)
    result.info[name] = {"ticks": len(ms), "p50_ms": p50, "p99_ms": p99, "max_ms": worst}
    result.note(f"{name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms ({len(ms)} ticks)")
    return p50, p99, worst


async def _in_flight(n: int, one: Callable[[int], Awaitable[int]]) -> None:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def bounded(i: int) -> None:
        async with gate:
            assert await one(i) == i

    await asyncio.gather(*(bounded(i) for i in range(n)))


async def _measure(cfg: HasQuick, result: BenchResult, parent: Path) -> None:
    n = scale(cfg, 200, 1000)
    with state_dir("lag-start", parent) as blocking_state:
        async with LagMeter() as meter:
            # A blocking `with` starts it there and then, as a constructor did before.
            with wu.Supervisor(blocking_state, install_signal_handlers=False):
                pass
        _report(result, "start and close, blocking, on the loop", meter.lags)
    with state_dir("lag", parent) as state:
        async with LagMeter() as meter:
            sup = wu.Supervisor(state, eviction_grace=EVICT_SOON, install_signal_handlers=False)
            await sup.__aenter__()
        _report(result, "start, async with", meter.lags)
        try:
            async with LagMeter() as meter:
                await asyncio.sleep(0.5)
            _, idle_p99, _ = _report(result, "idle", meter.lags)

            async def twin(i: int) -> int:
                handle = await sup.agent_async(trivial, i)
                value: int = await handle.result_async(timeout=60)
                return value

            started = time.perf_counter()
            async with LagMeter() as meter:
                await _in_flight(n, twin)
            rate = n / (time.perf_counter() - started)
            result.info["async_units_per_s"] = rate
            result.note(f"async: {n} units, {IN_FLIGHT} in flight, {rate:.0f} units/s")
            _, p99, worst = _report(result, "async", meter.lags)
            over = p99 - idle_p99
            result.check("p99 lag over idle, async", "<= 5 ms", 5.0, over, f"{over:.2f} ms")
            result.check("max loop lag, async twins", "<= 50 ms", 50.0, worst, f"{worst:.2f} ms")

            async def blocking(i: int) -> int:
                value: int = sup.agent(trivial, i).result(timeout=60)
                return value

            async with LagMeter() as meter:
                await _in_flight(scale(cfg, 50, 200), blocking)
            _report(result, "blocking calls on the loop", meter.lags)
        finally:
            async with LagMeter() as meter:
                await sup.__aexit__(None, None, None)
            _report(result, "close, async with", meter.lags)


def bench_loop_lag(cfg: HasQuick) -> BenchResult:
    """Lag of a 1 ms ticking coroutine: idle, under async twins, under blocking calls."""
    result = BenchResult("loop_lag")
    with state_dir("lag-parent") as parent:
        asyncio.run(_measure(cfg, result, parent))
    return result


BENCHES: dict[str, Callable[[HasQuick], BenchResult]] = {"loop_lag": bench_loop_lag}
