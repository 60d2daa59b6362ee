"""Where the supervisor actor's CPU goes per unit, by stage and by SQL statement.

    python bench/supervisor_stages.py [--kind shell|agent|pooled|later|pool-map|map]
                                      [--reps N] [--batch N]

Runs units one at a time, like ``unit_cpu.py`` (``later``: a shell that waits
pending for a day, so only its submit runs, as in ``submit_bench.py``), or in
batches of ``--batch`` (``pool-map``: ``sup.pool().map``; ``map``: ``sup.map``
of isolated agents; figures stay per unit), with two
instruments that add well under a microsecond per call instead of a profiler's
several-fold inflation of Python calls:

- each stage below is wrapped to add up ``time.thread_time_ns`` (the CPU of the
  thread that runs it, user and system, so a commit's syscalls count and its
  wait for the disk does not). Stages nest: a line's figure includes the
  lines that run inside it;
- the ledger's connection is wrapped to add up the same clock per SQL
  statement (its text, first 70 characters).

Printed beside them: one bare synced insert transaction's CPU (BEGIN
IMMEDIATE, INSERT, COMMIT on a WAL database, ``synchronous=FULL``) on the same
disk, and the garbage collector's runs and time per unit.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import importlib
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ledger_bench
from peer_benches import EVICT_SOON, FLOOR_ROW, state_dir, trivial

import workunits as wu

ACTOR = "workunits.supervisor.actor."
# (module, qualified name): the steps of a unit's way through the supervisor actor.
STAGES = [
    (ACTOR + "supervisor_actor", "SupervisorActor.on_receive"),
    (ACTOR + "submits", "GroupedSubmits.add"),
    (ACTOR + "starts", "Starts.prepare"),
    (ACTOR + "ledger_mirror", "LedgerMirror.new_unit"),
    (ACTOR + "submits", "GroupedSubmits.commit"),
    (ACTOR + "submits", "GroupedSubmits.submit_many"),
    ("workunits._ledger.units", "Units.submit_many"),
    (ACTOR + "starts", "Starts.enter"),
    (ACTOR + "starts", "Starts.launch"),
    (ACTOR + "pids", "Pids.apply"),
    (ACTOR + "endings", "TerminalTransition.report"),
    (ACTOR + "endings", "TerminalTransition._make_terminal"),
    ("workunits._ledger.attempts", "Attempts.write_many"),
    (ACTOR + "endings", "TerminalTransition._after_end"),
    (ACTOR + "starts", "Starts.ended"),
    (ACTOR + "batches", "Batches.ended"),
    (ACTOR + "failed_writes", "FailedWrites.land_held"),
    (ACTOR + "registry", "Registry.update"),
    (ACTOR + "supervisor_actor", "SupervisorActor._tick"),
    (ACTOR + "control", "UnitControl.run_deadlines"),
    (ACTOR + "control", "UnitControl._check_output_caps"),
    (ACTOR + "starts", "Starts.start_due"),
    (ACTOR + "activity", "Activity.tick"),
    (ACTOR + "ledger_mirror", "LedgerMirror.flush_grouped"),
    (ACTOR + "ledger_mirror", "LedgerMirror.retry"),
    (ACTOR + "ledger_mirror", "LedgerMirror.periodic"),
    (ACTOR + "recovery", "Recovery.tick"),
    (ACTOR + "recovery", "Recovery.apply_requests"),
    (ACTOR + "signals", "Signals.tick"),
    (ACTOR + "schedules", "Schedules.tick"),
    (ACTOR + "supervisor_actor", "SupervisorActor._check_ledger_in_place"),
    (ACTOR + "units", "Units.running_of"),
]


class Tally:
    """CPU nanoseconds and calls per key, from any thread."""

    def __init__(self) -> None:
        self.cpu: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, key: str, nanoseconds: int) -> None:
        with self._lock:
            self.cpu[key] += nanoseconds
            self.calls[key] += 1

    def clear(self) -> None:
        with self._lock:
            self.cpu.clear()
            self.calls.clear()

    def snapshot(self) -> Tally:
        """A copy that later calls do not add to."""
        copy = Tally()
        with self._lock:
            copy.cpu, copy.calls = self.cpu.copy(), self.calls.copy()
        return copy

    def lines(self, reps: int, limit: int | None = None) -> list[str]:
        return [
            f"{ns / reps / 1e3:8.1f} us/unit {self.calls[key] / reps:6.2f} calls/unit  {key}"
            for key, ns in self.cpu.most_common(limit)
        ]


def time_stage(tally: Tally, module: str, qualname: str) -> None:
    """Wrap ``module.qualname`` (a function or method) to add its thread CPU to ``tally``."""
    owner: Any = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time_ns()
        try:
            return original(*args, **kwargs)
        finally:
            tally.add(qualname, time.thread_time_ns() - start)

    setattr(owner, name, timed)


class TimedConnection:
    """An sqlite3 connection whose ``execute`` adds its thread CPU to a tally by statement."""

    def __init__(self, conn: sqlite3.Connection, tally: Tally) -> None:
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_tally", tally)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._conn, name, value)

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        start = time.thread_time_ns()
        conn: sqlite3.Connection = self._conn
        try:
            return conn.execute(sql, *args)
        finally:
            self._tally.add(" ".join(sql.split())[:70], time.thread_time_ns() - start)


class GcClock:
    """The garbage collector's runs and wall time, by generation."""

    def __init__(self) -> None:
        self.runs: collections.Counter[int] = collections.Counter()
        self.seconds: collections.defaultdict[int, float] = collections.defaultdict(float)
        self._started: dict[int, float] = {}
        gc.callbacks.append(self.callback)

    def callback(self, phase: str, info: dict[str, int]) -> None:
        thread = threading.get_ident()
        if phase == "start":
            self._started[thread] = time.perf_counter()
        elif thread in self._started:
            generation = info["generation"]
            self.runs[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started.pop(thread)

    def clear(self) -> None:
        self.runs.clear()
        self.seconds.clear()


def bare_insert_cpu_us(state: Path, reps: int) -> float:
    """One bare synced insert transaction's thread CPU, in µs, on the disk of ``state``."""
    inserts = ledger_bench.BareInserts(state / "bare-inserts.db", FLOOR_ROW)
    try:
        start = time.thread_time_ns()
        for _ in range(reps):
            inserts.insert()
        return (time.thread_time_ns() - start) / reps / 1e3
    finally:
        inserts.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--kind",
        choices=("shell", "agent", "pooled", "later", "pool-map", "map"),
        default="shell",
    )
    parser.add_argument("--reps", type=int, default=800, help="units in all")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--batch", type=int, default=200, help="units per batch (pool-map, map)")
    args = parser.parse_args()
    per_call = args.batch if args.kind in ("pool-map", "map") else 1
    stages, statements, collections_ = Tally(), Tally(), GcClock()
    for module, qualname in STAGES:
        time_stage(stages, module, qualname)
    with (
        state_dir("stages") as state,
        wu.Supervisor(state, eviction_grace=EVICT_SOON, pool_size=2) as sup,
    ):
        calls: dict[str, Callable[[], object]] = {
            "shell": lambda: sup.wait(sup.shell(["true"]).id, timeout=30),
            "agent": lambda: sup.result(sup.agent(trivial, 1).id, timeout=30),
            "pooled": lambda: sup.result(sup.agent(trivial, 1, reuse=True).id, timeout=30),
            # The submit path alone: the unit waits pending for a day (submit_bench.py's).
            "later": lambda: sup.shell(["true"], not_before=time.time() + 24 * 3600.0),
            # Batches: one call is --batch units; the figures below stay per unit.
            "pool-map": lambda: list(sup.pool().map(trivial, range(args.batch))),
            "map": lambda: list(sup.map(trivial, range(args.batch))),
        }
        call = calls[args.kind]
        for _ in range(max(1, args.warmup // per_call)):
            call()
        db: Any = sup._machinery.ledger._db  # the database itself, under the session fence
        with db._lock:
            db.conn = TimedConnection(db.conn, statements)
        stages.clear()
        collections_.clear()
        for _ in range(max(1, args.reps // per_call)):
            call()
        # Before the supervisor stops: its stop ends every unit still pending.
        stages, statements = stages.snapshot(), statements.snapshot()
        gc.callbacks.remove(collections_.callback)
        bare = bare_insert_cpu_us(state, args.reps)
    reps = max(1, args.reps // per_call) * per_call
    how = "one at a time" if per_call == 1 else f"in batches of {per_call}"
    print(f"{args.kind}: {reps} units, {how}")
    print("\nsupervisor actor's thread CPU by stage (nested):")
    print("\n".join(stages.lines(reps)))
    total_sql = sum(statements.cpu.values()) / reps / 1e3
    print(f"\nSQL statements' thread CPU: {total_sql:.0f} us per unit")
    print("\n".join(statements.lines(reps, limit=15)))
    print(f"\none bare synced insert transaction: {bare:.0f} us of CPU")
    print("\ngarbage collections:")
    for generation in sorted(collections_.runs):
        runs, seconds = collections_.runs[generation], collections_.seconds[generation]
        print(
            f"  generation {generation}: {runs / reps:.3f} per unit, {seconds / reps * 1e6:.0f} us "
            f"per unit, {seconds / runs * 1e3:.2f} ms each"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
