"""Units started one at a time with pauses between them, against back to back.

    python bench/sparse_starts.py [--pause-ms 100] [--reps 40]

An agent runtime starts a command now and then, not in a tight loop, and some
costs only show then: with a cgroup per unit, the zygote moves itself into each
unit's cgroup for the start, and without cgroup2's ``favordynmods`` the kernel
makes a move that follows a pause wait for an RCU grace period (see
bench/RESULTS.md). Prints, per kind (shell ``true``; a trivial agent), the
median submit -> terminal back to back and after each pause, then a bare
cgroup move timed the same two ways (when this process may use cgroups), and
whether the mount has ``favordynmods``. No target: a measurement to compare
machines, mount options and containment mechanisms
(``WORKUNITS_CONTAINMENT=subreaper``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from peer_benches import state_dir, trivial

import workunits as wu
from workunits._zygote import containment

WARMUP = 5


def median_ms(call: Callable[[], object], reps: int, pause: float) -> float:
    """Median milliseconds of ``call``, each after ``pause`` seconds of nothing."""
    times = []
    for _ in range(reps):
        time.sleep(pause)
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause-ms", type=float, default=100.0)
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()
    pause = args.pause_ms / 1000
    found = containment.probe()
    mechanism = "cgroup per unit" if found.own is not None else f"subreaper ({found.reason})"
    print(f"containment: {mechanism}; cgroup2 favordynmods: {containment.favors_moves()}")
    with state_dir("sparse") as state, wu.Supervisor(state, eviction_grace=0.05) as sup:
        kinds: dict[str, Callable[[], object]] = {
            "shell true, submit -> terminal": lambda: sup.wait(sup.shell(["true"]).id, timeout=60),
            "agent, submit -> result": lambda: sup.result(sup.agent(trivial, 1).id, timeout=60),
        }
        for name, call in kinds.items():
            for _ in range(WARMUP):
                call()
            tight = median_ms(call, args.reps, 0.0)
            sparse = median_ms(call, args.reps, pause)
            print(
                f"{name}: back to back {tight:.2f} ms; "
                f"after {args.pause_ms:.0f} ms pauses {sparse:.2f} ms"
            )
    if found.own is not None:
        own = found.own
        tight = statistics.median(containment.time_a_move(own, 0.0) for _ in range(args.reps))
        sparse = statistics.median(containment.time_a_move(own, pause) for _ in range(args.reps))
        print(
            f"a bare move into a cgroup: back to back {tight * 1000:.3f} ms; "
            f"after {args.pause_ms:.0f} ms pauses {sparse * 1000:.3f} ms"
        )


if __name__ == "__main__":
    main()
