"""Supervisor CPU and context switches per unit (DESIGN section 8: <= 0.5 ms, <= 8).

    python bench/unit_cpu.py [--kinds shell,agent,pooled] [--reps N] [--rate]
                             [--profile PATH]

Runs units one at a time in this process (so py-spy can attach, and cProfile
can wrap the supervisor actor's thread with ``--profile``) and prints, per
kind: the process's CPU per unit (every supervisor thread and this calling
thread; the unit processes and the zygote are other processes and do not
count), its voluntary and involuntary context switches per unit, and the CPU
by thread family (threads that ended during the run, the unit actors', are
the remainder). ``--rate`` adds pooled units per second with 2 in flight.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import procstat
from peer_benches import state_dir, trivial, two_in_flight

import workunits as wu
from workunits.supervisor.actor.supervisor_actor import SupervisorActor

EVICT_SOON = 1.0


@contextmanager
def profiled_supervisor(path: str | None) -> Iterator[None]:
    """cProfile the supervisor actor's thread (its whole loop) into ``path``."""
    if path is None:
        yield
        return
    profile = cProfile.Profile(time.thread_time)  # CPU, not wall time
    original = SupervisorActor._actor_loop

    def loop(self: SupervisorActor) -> None:
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    SupervisorActor._actor_loop = loop  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        SupervisorActor._actor_loop = original  # type: ignore[method-assign]
        profile.dump_stats(path)


def _user_system(tid: int) -> tuple[float, float]:
    with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) / procstat._CLK_TCK, int(fields[12]) / procstat._CLK_TCK


def _switches_by_thread() -> dict[int, int]:
    """Voluntary context switches of each live thread, by native thread ID."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{name}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        out[int(name)] = int(line.split()[1])
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return out


def measure(fn: Callable[[], object], reps: int) -> dict[str, Any]:
    names = procstat.thread_families()
    sup_tid = next(tid for tid, name in names.items() if name == "SupervisorActor")
    sup0 = _user_system(sup_tid)
    vcs0 = _switches_by_thread()
    before, cpu0, cs0 = (
        procstat.thread_cpu_seconds(),
        procstat.cpu_seconds(),
        procstat.context_switches(),
    )
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    wall = time.perf_counter() - start
    sup1 = _user_system(sup_tid)
    vcs1 = _switches_by_thread()
    after, cpu1, cs1 = (
        procstat.thread_cpu_seconds(),
        procstat.cpu_seconds(),
        procstat.context_switches(),
    )
    per = procstat.cpu_by_family(names, before, after)
    total = cpu1 - cpu0
    switches: dict[str, float] = {}
    for tid, name in names.items():
        if tid in vcs0 and tid in vcs1:
            switches[name] = switches.get(name, 0.0) + (vcs1[tid] - vcs0[tid]) / reps
    switches["ended threads"] = (cs1[0] - cs0[0]) / reps - sum(switches.values())
    per["ended threads"] = max(0.0, total - sum(per.values()))
    return {
        "cpu_us": total / reps * 1e6,
        "vcsw": (cs1[0] - cs0[0]) / reps,
        "ivcsw": (cs1[1] - cs0[1]) / reps,
        "wall_ms": wall / reps * 1e3,
        "supervisor_thread_user_system_us": [
            round((sup1[i] - sup0[i]) / reps * 1e6) for i in (0, 1)
        ],
        "vcsw_by_thread": {k: round(v, 2) for k, v in switches.items() if v},
        "by_thread_us": {k: round(v / reps * 1e6) for k, v in per.items() if v},
    }


def _summary(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The windows' figures, and their minimum and median (the least disturbed by other load)."""
    out: dict[str, Any] = {"windows": windows}
    for key in ("cpu_us", "vcsw", "ivcsw", "wall_ms"):
        values = sorted(w[key] for w in windows)
        out[key] = statistics.median(values)
        out[f"{key}_min"] = values[0]
    for key in ("supervisor_thread_user_system_us",):
        out[key] = [statistics.median(w[key][i] for w in windows) for i in (0, 1)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default="shell,agent,pooled")
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--windows", type=int, default=1, help="split the reps in windows")
    parser.add_argument("--rate", action="store_true")
    parser.add_argument("--profile")
    parser.add_argument("--sync", default="full", help="ledger_sync: full (the default) or normal")
    args = parser.parse_args()
    out: dict[str, Any] = {"load": os.getloadavg()[0]}
    with (
        state_dir("unit-cpu") as state,
        profiled_supervisor(args.profile),
        wu.Supervisor(state, eviction_grace=EVICT_SOON, pool_size=2, ledger_sync=args.sync) as sup,
    ):
        calls: dict[str, Callable[[], object]] = {
            "shell": lambda: sup.wait(sup.shell(["true"]).id, timeout=30),
            "agent": lambda: sup.result(sup.agent(trivial, 1).id, timeout=30),
            "pooled": lambda: sup.result(sup.agent(trivial, 1, reuse=True).id, timeout=30),
        }
        for kind in args.kinds.split(","):
            call = calls[kind]
            for _ in range(args.warmup):
                call()
            windows = [measure(call, args.reps // args.windows) for _ in range(args.windows)]
            out[kind] = windows[0] if args.windows == 1 else _summary(windows)
        if args.rate:
            pooled = calls["pooled"]
            out["pooled_rate_2_in_flight"] = [two_in_flight(pooled, 400) for _ in range(3)]
    out["load_after"] = os.getloadavg()[0]
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
