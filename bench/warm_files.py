"""Units with their files made ahead of launch (warm files) against made at launch.

    python bench/warm_files.py [--kinds pooled,shell,agent] [--pairs 300] [--windows 4]

One supervisor, so the state dir, its disk and its history of deleted files
are the same for both sides. Per kind, calls alternate (A B, then B A) between
the supervisor's warm files and a stock that gives none, which makes each
file at launch as before; prints the median submit -> result of each side
and, as the launch sees it, how long its file took to make. ``--windows``
adds pooled units with 2 in flight, 400 per window, the two sides
alternating by window, with the process's CPU per unit (every supervisor
thread). No target: a measurement of what making files ahead of launches
moves on this disk (see bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from peer_benches import state_dir, trivial, two_in_flight

import workunits as wu
from workunits.actors.warm_files import WarmFiles

WARMUP = 30
WINDOW = 400

_take = WarmFiles._take
_create = WarmFiles.create


class _Sides:
    """Which side runs now, and how long each side's file creations took."""

    def __init__(self) -> None:
        self.warm = True
        self.create_times: dict[bool, list[float]] = {True: [], False: []}

    def install(self) -> None:
        sides = self

        def take(files: WarmFiles, append: bool) -> Any:
            return _take(files, append) if sides.warm else None

        def create(files: WarmFiles, path: str, *, append: bool = False) -> int:
            start = time.perf_counter()
            fd = _create(files, path, append=append)
            sides.create_times[sides.warm].append(time.perf_counter() - start)
            return fd

        WarmFiles._take = take  # type: ignore[method-assign,assignment]
        WarmFiles.create = create  # type: ignore[method-assign,assignment]


def alternate(sides: _Sides, call: Callable[[], object], pairs: int) -> dict[bool, list[float]]:
    times: dict[bool, list[float]] = {True: [], False: []}
    for n in range(pairs):
        for warm in (False, True) if n % 2 == 0 else (True, False):
            sides.warm = warm
            start = time.perf_counter()
            call()
            times[warm].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default="pooled,shell,agent")
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--windows", type=int, default=0)
    args = parser.parse_args()
    sides = _Sides()
    sides.install()
    with (
        state_dir("warm-files") as state,
        wu.Supervisor(state, eviction_grace=1.0, pool_size=2) as sup,
    ):
        calls: dict[str, Callable[[], object]] = {
            "shell": lambda: sup.wait(sup.shell(["true"]).id, timeout=30),
            "agent": lambda: sup.result(sup.agent(trivial, 1).id, timeout=30),
            "pooled": lambda: sup.result(sup.agent(trivial, 1, reuse=True).id, timeout=30),
        }
        for kind in args.kinds.split(","):
            call = calls[kind]
            for _ in range(WARMUP):
                call()
            for side in sides.create_times.values():
                side.clear()
            times = alternate(sides, call, args.pairs)
            made, warm = (statistics.median(times[w]) * 1e3 for w in (False, True))
            file_made, file_warm = (
                statistics.median(sides.create_times[w]) * 1e6 for w in (False, True)
            )
            print(
                f"{kind}: made at launch {made:.3f} ms, warm {warm:.3f} ms ({warm / made:.2f}x); "
                f"its file as the launch sees it: {file_made:.0f} us vs {file_warm:.0f} us"
            )
        if args.windows:
            pooled = calls["pooled"]
            rates: dict[bool, list[float]] = {True: [], False: []}
            cpu: dict[bool, list[float]] = {True: [], False: []}
            for n in range(args.windows):
                for warm in (False, True) if n % 2 == 0 else (True, False):
                    sides.warm = warm
                    start = time.process_time()
                    rates[warm].append(two_in_flight(pooled, WINDOW))
                    cpu[warm].append((time.process_time() - start) / WINDOW * 1e3)
            for warm in (False, True):
                print(
                    f"pooled, 2 in flight, {'warm' if warm else 'made at launch'}: "
                    f"{statistics.median(rates[warm]):.0f} units/s, process CPU per unit "
                    f"{statistics.median(cpu[warm]):.2f} ms"
                )


if __name__ == "__main__":
    main()
