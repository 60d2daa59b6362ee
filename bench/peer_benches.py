"""Benches against peers (DESIGN section 8): agents, teammates, the ledger, workflows, Ray.

Imported by run.py, which runs each one in a fresh child process like its own
benches. The bodies the units run are module-level functions here; this module
is registered with cloudpickle *by value*, so a zygote or Ray worker that
cannot import ``bench/`` still gets them whole.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import cloudpickle
import harness
import ledger_bench
import procstat
import pykka
from harness import BenchResult, Pair, Series

import workunits as wu

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MIB = 1 << 20
GIB = 1 << 30
PAGE = 4096
EVICT_SOON = 1.0


class HasQuick(Protocol):
    @property
    def quick(self) -> bool: ...


def scale(cfg: HasQuick, quick: int, full: int) -> int:
    return quick if cfg.quick else full


@contextlib.contextmanager
def state_dir(name: str, parent: Path | None = None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"workunits-bench-{name}-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def pair_of(
    result: BenchResult, name: str, a: tuple[str, list[float]], b: tuple[str, list[float]]
) -> Pair:
    pair = Pair(name, Series(a[0], a[1]), Series(b[0], b[1]))
    result.pairs.append(pair)
    result.series += [pair.a, pair.b]
    return pair


# -- bodies the units and peers run ---------------------------------------------


def trivial(x: int = 1) -> int:
    """The trivial module-level function every side runs."""
    return x + 1


def hold_memory(size: int) -> None:
    """Allocate and touch ``size`` bytes, say so through progress, then sleep until killed."""
    block = bytearray(size)
    block[::PAGE] = b"\x01" * len(range(0, size, PAGE))
    wu.current().progress(1.0, "holding")
    threading.Event().wait()


def workflow_three_steps(x: int) -> int:
    ctx = wu.current()
    a = ctx.step("one", trivial, x)
    b = ctx.step("two", trivial, a)
    return int(ctx.step("three", trivial, b))


class Echo:
    """A teammate (and pykka actor body) answering every message with itself."""

    def on_receive(self, message: Any) -> Any:
        return message


class PykkaEcho(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


# -- raw fork + pipe + cloudpickle ------------------------------------------------


def fork_call(fn: Callable[..., Any], *args: Any) -> Any:
    """The floor for an isolated call: fork, run the pickled call, pickle back the value."""
    payload = cloudpickle.dumps((fn, args))
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads alive
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            f, a = cloudpickle.loads(payload)
            data = cloudpickle.dumps(f(*a))
            view = memoryview(data)
            while view:
                view = view[os.write(w, view) :]
        finally:
            os._exit(0)
    os.close(w)
    chunks: list[bytes] = []
    with os.fdopen(r, "rb", buffering=0) as reader:
        while chunk := reader.read(65536):
            chunks.append(chunk)
    os.waitpid(pid, 0)
    return cloudpickle.loads(b"".join(chunks))


# The peer of a durable unit: its work between two fully synced commits, timed as one.
FLOOR_SEQUENCE = (
    "a fully synced SQLite commit, a bare pykka actor started, {work}, a fully synced "
    "commit, the actor stopped, timed as one"
)
FLOOR_ROW = 400  # bytes per bare insert: about a unit's row


def floor_sequence(
    inserts: ledger_bench.BareInserts, work: Callable[[], object]
) -> Callable[[], None]:
    """A unit's durable floor as one call: a fully synced commit (its submit), a bare
    pykka actor's start (every unit is an actor: DESIGN §8 counts it in the floor), the
    bare peer's ``work``, a fully synced commit (its end), the actor's stop."""

    def sequence() -> None:
        inserts.insert()
        actor = BareActor.start()
        work()
        inserts.insert()
        actor.stop()

    return sequence


class BareActor(pykka.ThreadingActor):
    """An actor that does nothing: what a pykka actor's start and stop cost alone."""


def durable_pair(
    result: BenchResult,
    state: Path,
    unit: tuple[str, Callable[[], float]],
    work: tuple[str, Callable[[], Any]],
    *,
    reps: int,
    warm: int,
    tag: str = "",
) -> Pair:
    """A unit against its floor, pair by pair: a fully synced commit (its submit), the bare
    peer's run of the work, a fully synced commit (its end), timed as one. ``tag`` tells
    a second floor of the same unit apart in the tables.

    Timed as a sequence, not summed from commits timed back to back: on a VM a
    disk that idled while the work ran answers slower, and a unit's commits
    always come on either side of its work.
    """
    database = "floor-sequence" + (f"-{tag}".replace(" ", "-") if tag else "") + ".db"
    inserts = ledger_bench.BareInserts(state / database, FLOOR_ROW)
    sequence = floor_sequence(inserts, work[1])

    def floor() -> float:
        start = time.perf_counter()
        sequence()
        return time.perf_counter() - start

    suffix = f", {tag}" if tag else ""
    pair = pair_of(
        result,
        f"vs its durable floor{suffix}",
        (f"{unit[0]} [vs floor{suffix}]", []),
        (f"floor: {FLOOR_SEQUENCE.format(work=work[0])}", []),
    )
    try:
        pair.a.samples, pair.b.samples = harness.alternate(unit[1], floor, reps, warm)
    finally:
        inserts.close()
    return pair


def durable_floor_note(durable: Pair, work: str, peer: tuple[str, float] | None = None) -> str:
    """The note beside a per-call target: ``durable_pair``'s floor, and the unit's ratio to
    it; ``peer``: the bare peer's name and median, to say how far the floor is above it."""
    above = "" if peer is None else f", {durable.b.median / peer[1]:.2f}x {peer[0]}"
    return (
        f"floor per call, measured in this run: {FLOOR_SEQUENCE.format(work=work)} (nothing "
        f"starts before its submit is durable, nobody learns of its end before it is) = "
        f"{harness.fmt(durable.b.median, 's')}{above}; the unit takes "
        f"{durable.median_pair_ratio:.2f}x of it, pair by pair"
    )


# DESIGN §8: one unit at a time, its time against its durable floor in the same run.
FLOOR_RATIO = {"shell": 1.4, "agent": 1.25, "pooled": 1.6}


# The supervisor's thread that makes units' output files ahead of their launches
# (actors/warm_files.py); it does nothing else, so its CPU is what those files cost.
FILES_THREAD = "workunits-warm-files"


class Cost(NamedTuple):
    """Per call: this process's CPU seconds (every thread), voluntary context switches,
    and the part of that CPU spent by its thread that makes output files."""

    cpu: float
    switches: float
    files: float


def process_cost(fn: Callable[[], object], reps: int) -> Cost:
    """What ``reps`` calls of ``fn`` cost this process, per call."""
    files = procstat.thread_cpu_reader(FILES_THREAD)
    cpu0, (switches0, _), files0 = procstat.cpu_seconds(), procstat.context_switches(), files()
    for _ in range(reps):
        fn()
    cpu1, (switches1, _), files1 = procstat.cpu_seconds(), procstat.context_switches(), files()
    return Cost((cpu1 - cpu0) / reps, (switches1 - switches0) / reps, (files1 - files0) / reps)


def check_cpu_per_unit(
    result: BenchResult,
    state: Path,
    what: str,
    unit: Callable[[], object],
    work: tuple[str, Callable[[], object]],
    *,
    reps: int,
) -> None:
    """The supervisor process's CPU and voluntary context switches per ``what`` unit against
    their targets, beside the same counts for the unit's durable floor run in this process:
    a fully synced commit, ``work`` (the bare peer), a fully synced commit.

    Windows alternate (unit, floor, unit, ...) and each figure is the median of its
    windows, so that a busy moment of the machine does not land on one side only.
    """
    inserts = ledger_bench.BareInserts(state / "cpu-floor.db", FLOOR_ROW)
    floor = floor_sequence(inserts, work[1])
    windows = 3
    each = max(1, reps // windows)
    units: list[Cost] = []
    floors: list[Cost] = []
    try:
        for _ in range(windows):
            units.append(process_cost(unit, each))
            floors.append(process_cost(floor, each))
    finally:
        inserts.close()
    cpu = statistics.median(c.cpu for c in units)
    files = statistics.median(c.files for c in units)
    switches = statistics.median(c.switches for c in units)
    floor_cpu = statistics.median(c.cpu for c in floors)
    floor_switches = statistics.median(c.switches for c in floors)
    floor_text = FLOOR_SEQUENCE.format(work=work[0])
    result.info[f"cpu_us_per_{what}_unit"] = cpu * 1e6
    result.info[f"file_cpu_us_per_{what}_unit"] = files * 1e6
    result.info[f"voluntary_switches_per_{what}_unit"] = switches
    result.info[f"cpu_floor_us_per_{what}_unit"] = floor_cpu * 1e6
    # No target one at a time since DESIGN §8's batch target (<= 0.8 ms, batch_bench.py).
    result.note(
        f"supervisor process CPU per {what} unit, one at a time: {cpu * 1e6:,.0f} us, of "
        f"which its output file made ahead {files * 1e6:,.0f} us (floor, {floor_text}: "
        f"{floor_cpu * 1e6:,.0f} us); voluntary context switches {switches:.1f} (floor "
        f"{floor_switches:.1f})"
    )


def check_floor_ratio(result: BenchResult, durable: Pair, what: str) -> None:
    """DESIGN §8's per-unit target: a ``what`` unit, one at a time, against its durable
    floor (``durable_pair``) measured in the same run, pair by pair."""
    limit = FLOOR_RATIO[what]
    result.check(
        f"{what} unit, one at a time / its durable floor (median of pair ratios)",
        f"<= {limit:.2f}x",
        limit,
        durable.median_pair_ratio,
        f"{durable.median_pair_ratio:.2f}x ({harness.fmt(durable.a.median, 's')} vs "
        f"{harness.fmt(durable.b.median, 's')})",
    )


def synced_commit_rates(state: Path, windows: int, count: int) -> list[float]:
    """Bare SQLite WAL ``synchronous=FULL`` commits per second, once per window, on the
    disk of ``state``: the cost of the synced commits a unit waits for, in this run."""
    return [ledger_bench.raw_commits(state / f"floor-{n}.db", count) for n in range(windows)]


def two_in_flight(call: Callable[[], Any], batch: int) -> float:
    """Units per second with two submitters, each keeping one call in flight."""

    def worker() -> None:
        for _ in range(batch // 2):
            call()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return batch / (time.perf_counter() - start)


# -- agent_trivial ------------------------------------------------------------------


def bench_agent_trivial(cfg: HasQuick) -> BenchResult:
    """``sup.agent(trivial)`` -> ``sup.result`` vs fork+pipe+cloudpickle, a process pool, pebble."""
    import pebble  # noqa: PLC0415 - a peer, in the [bench] extra

    result = BenchResult("agent_trivial")
    reps = scale(cfg, 60, 400)
    warm = scale(cfg, 10, 30)
    with (
        state_dir("agent") as state,
        wu.Supervisor(state, eviction_grace=EVICT_SOON) as sup,
        concurrent.futures.ProcessPoolExecutor(2) as ppe,
        pebble.ProcessPool(2) as peb,
    ):

        def unit() -> float:
            start = time.perf_counter()
            value = sup.result(sup.agent(trivial, 1).id, timeout=60)
            elapsed = time.perf_counter() - start
            assert value == 2
            return elapsed

        def raw() -> float:
            start = time.perf_counter()
            value = fork_call(trivial, 1)
            elapsed = time.perf_counter() - start
            assert value == 2
            return elapsed

        def pool() -> float:
            start = time.perf_counter()
            value = ppe.submit(trivial, 1).result(60)
            elapsed = time.perf_counter() - start
            assert value == 2
            return elapsed

        def pebble_pool() -> float:
            start = time.perf_counter()
            value = peb.schedule(trivial, args=(1,)).result(60)
            elapsed = time.perf_counter() - start
            assert value == 2
            return elapsed

        label = "sup.agent(trivial) -> sup.result"
        floor = pair_of(
            result,
            "submit -> result vs raw fork",
            (label + " [vs fork]", []),
            ("os.fork + pipe + cloudpickle", []),
        )
        floor.a.samples, floor.b.samples = harness.alternate(unit, raw, reps, warm)
        p1 = pair_of(
            result,
            "submit -> result vs ProcessPoolExecutor",
            (label + " [vs PPE]", []),
            ("ProcessPoolExecutor(2) submit -> result", []),
        )
        p1.a.samples, p1.b.samples = harness.alternate(unit, pool, reps, warm)
        p2 = pair_of(
            result,
            "submit -> result vs pebble",
            (label + " [vs pebble]", []),
            ("pebble.ProcessPool(2) schedule -> result", []),
        )
        p2.a.samples, p2.b.samples = harness.alternate(unit, pebble_pool, reps, warm)
        durable = durable_pair(
            result,
            state,
            (label, unit),
            ("os.fork + pipe + cloudpickle", raw),
            reps=reps,
            warm=warm,
        )
        check_cpu_per_unit(
            result,
            state,
            "agent",
            unit,
            ("os.fork + pipe + cloudpickle", raw),
            reps=scale(cfg, 150, 600),
        )

        batch = scale(cfg, 200, 1000)
        windows = scale(cfg, 3, 5)

        def wu_rate() -> float:
            return two_in_flight(lambda: sup.result(sup.agent(trivial, 1).id, timeout=60), batch)

        def ppe_rate() -> float:
            return two_in_flight(lambda: ppe.submit(trivial, 1).result(60), batch)

        def fork_rate() -> float:
            return two_in_flight(lambda: fork_call(trivial, 1), batch)

        xs, ys = harness.alternate(wu_rate, ppe_rate, windows, 1)
        fs, gs = harness.alternate(wu_rate, fork_rate, windows, 1)
    rates = Pair(
        "throughput, 2 in flight",
        Series(f"workunits agents, 2 in flight ({batch} per window)", xs, "units/s"),
        Series(f"ProcessPoolExecutor(2), 2 in flight ({batch} per window)", ys, "units/s"),
    )
    forks = Pair(
        "throughput vs raw fork, 2 in flight",
        Series(f"workunits agents, 2 in flight [vs fork] ({batch} per window)", fs, "units/s"),
        Series(f"os.fork + pipe + cloudpickle, 2 in flight ({batch} per window)", gs, "units/s"),
    )
    result.pairs += [rates, forks]
    result.series += [rates.a, rates.b, forks.a, forks.b]
    _agent_checks(result, floor, rates, forks)
    _agent_floors(result, durable, forks)
    _agent_peers(result, p1, p2)
    return result


def _agent_checks(result: BenchResult, floor: Pair, rates: Pair, forks: Pair) -> None:
    # Peers, no target: DESIGN §8 sets the agent's against its floor (check_floor_ratio)
    # and the rate at the machine's parallelism against raw forks for sup.map (batches).
    result.note(
        f"agent submit -> result / raw fork round trip: {floor.median_pair_ratio:.2f}x "
        f"({harness.fmt(floor.a.median, 's')} vs {harness.fmt(floor.b.median, 's')}); "
        f"agents with 2 in flight {rates.a.median:,.0f} units/s (ProcessPoolExecutor "
        f"{rates.b.median:,.0f}/s), {forks.median_pair_ratio:.2f}x a raw fork round trip "
        f"with 2 in flight ({forks.a.median:,.0f}/s vs {forks.b.median:,.0f}/s)"
    )


def _agent_floors(result: BenchResult, durable: Pair, forks: Pair) -> None:
    """The physical floors beside the agents' targets, measured in the same run."""
    result.note(durable_floor_note(durable, "the fork round trip"))
    check_floor_ratio(result, durable, "agent")
    result.note(
        f"a raw fork round trip with 2 in flight runs {forks.b.median:,.0f}/s on this "
        f"machine; workunits agents reach {forks.median_pair_ratio:.2f}x of it (pairwise)"
    )


def _agent_peers(result: BenchResult, p1: Pair, p2: Pair) -> None:
    """The process pools beside the agents: no target, for the reader."""
    result.note(
        f"peers (no target): ProcessPoolExecutor {p1.median_pair_ratio:.1f}x faster per call "
        f"({harness.fmt(p1.b.median, 's')}), pebble {p2.median_pair_ratio:.1f}x "
        f"({harness.fmt(p2.b.median, 's')}); neither isolates tasks from one another "
        "nor kills one task"
    )


# -- kills, timed -------------------------------------------------------------------


def wait_until_holding(sup: wu.Supervisor, work_id: str, timeout: float = 30.0) -> None:
    """Until ``hold_memory``'s unit says it runs (progress 1.0); TimeoutError if it never does."""
    deadline = time.monotonic() + timeout
    while (record := sup.get(work_id)).progress != 1.0:
        if wu.is_terminal(record.status) or time.monotonic() > deadline:
            raise TimeoutError(f"{work_id} never said it runs: {record.describe_end()}")
        time.sleep(0.0002)


def timed_kill(sup: wu.Supervisor, work_id: str, bad: list[str], timeout: float = 30.0) -> float:
    """Seconds from ``sup.kill`` to the terminal record; a unit not ended killed goes to ``bad``."""
    start = time.perf_counter()
    killed = sup.kill(work_id)
    record = sup.wait(work_id, timeout=timeout)
    elapsed = time.perf_counter() - start
    if not killed or record.status is not wu.Status.KILLED:
        bad.append(f"{record.id}: kill={killed}, {record.describe_end()}")
    return elapsed


def timed_killpg(pid: int) -> tuple[float, int]:
    """Seconds from ``killpg(pid, SIGKILL)`` to its reap by ``waitpid``, and the wait status."""
    start = time.perf_counter()
    os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return time.perf_counter() - start, status


# -- agent_kill_1gib ----------------------------------------------------------------


def bench_agent_kill_1gib(cfg: HasQuick) -> BenchResult:
    """Kill -> terminal record of an agent holding 1 GiB vs killpg + waitpid of a bare one."""
    result = BenchResult("agent_kill_1gib")
    reps = scale(cfg, 3, 20)
    size = GIB
    bad: list[str] = []
    with state_dir("kill1g") as state, wu.Supervisor(state, eviction_grace=EVICT_SOON) as sup:

        def unit() -> float:
            handle = sup.agent(hold_memory, size)
            wait_until_holding(sup, handle.id, timeout=60)
            return timed_kill(sup, handle.id, bad, timeout=60)

        def bare() -> float:
            r, w = os.pipe()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                try:
                    os.setsid()
                    block = bytearray(size)
                    block[::PAGE] = b"\x01" * len(range(0, size, PAGE))
                    os.write(w, b"!")
                    threading.Event().wait()
                finally:
                    os._exit(0)
            os.close(w)
            os.read(r, 1)
            os.close(r)
            return timed_killpg(pid)[0]

        a, b = harness.alternate(unit, bare, reps, 1)
    pair = pair_of(
        result,
        "kill -> terminal, 1 GiB held",
        ("sup.kill -> terminal record (agent holding 1 GiB)", a),
        ("killpg + waitpid (bare fork holding 1 GiB)", b),
    )
    if bad:
        result.error = f"{len(bad)} kills did not end killed: {bad[:3]}"
    result.note(
        f"kill -> terminal with 1 GiB resident: {harness.fmt(pair.a.median, 's')} vs bare "
        f"{harness.fmt(pair.b.median, 's')} ({pair.median_pair_ratio:.2f}x); the kernel's "
        "teardown of the address space is in both"
    )
    return result


# -- teammate_ask -------------------------------------------------------------------


def bench_teammate_ask(cfg: HasQuick) -> BenchResult:
    """``handle.ask(msg)`` round trip to a teammate process vs an in-process pykka ask."""
    result = BenchResult("teammate_ask")
    reps = scale(cfg, 300, 2000)
    with state_dir("ask") as state, wu.Supervisor(state, eviction_grace=EVICT_SOON) as sup:
        mate = sup.teammate(Echo)
        ref = PykkaEcho.start()
        try:

            def unit() -> float:
                start = time.perf_counter()
                value = mate.ask("ping", timeout=30)
                elapsed = time.perf_counter() - start
                assert value == "ping"
                return elapsed

            def local() -> float:
                start = time.perf_counter()
                value = ref.ask("ping", timeout=30)
                elapsed = time.perf_counter() - start
                assert value == "ping"
                return elapsed

            a, b = harness.alternate(unit, local, reps, 20)
        finally:
            ref.stop()
            sup.kill(mate.id)
    pair = pair_of(
        result,
        "ask round trip",
        ("teammate handle.ask (its own process)", a),
        ("pykka ActorRef.ask (same process)", b),
    )
    result.note(
        f"teammate ask {harness.fmt(pair.a.median, 's')} vs in-process pykka ask "
        f"{harness.fmt(pair.b.median, 's')} ({pair.median_pair_ratio:.1f}x; no target: "
        "the teammate crosses two processes and the supervisor actor)"
    )
    return result


# -- ledger -----------------------------------------------------------------------


def bench_ledger(cfg: HasQuick) -> BenchResult:
    """ledger_bench.py's figures, each run ``rounds`` times, on the disk bench/ lives on."""
    import ledger_bench  # noqa: PLC0415 - the existing ledger bench, reused

    result = BenchResult("ledger")
    units = scale(cfg, 1000, 5000)
    rounds = scale(cfg, 2, 3)
    group = 256
    rates: dict[str, list[float]] = {}
    targets: dict[str, int | None] = {}
    peer: list[float] = []
    where = Path(__file__).resolve().parent / "results"
    where.mkdir(parents=True, exist_ok=True)
    for _ in range(rounds):
        with state_dir("ledger", where) as base:
            peer.append(ledger_bench.raw_commits(base / "raw.db", units))
            for what, rate, target in ledger_bench.run(base / "state", units, group):
                rates.setdefault(what, []).append(rate)
                targets[what] = target
    for what, xs in rates.items():
        result.series.append(Series(what, xs, "/s"))
    result.series.append(Series("peer: bare SQLite WAL FULL, one insert per commit", peer, "/s"))
    for what, target in targets.items():
        if target is None:
            continue
        rate = statistics.median(rates[what])
        result.check(
            what + " (time per item)",
            f"<= {1e6 / target:.1f} us (>= {target:,}/s)",
            1 / target,
            1 / rate,
            f"{rate:,.0f}/s",
        )
    result.note(
        f"ledger state dir on the disk bench/ lives on; {units} units per round, "
        f"{rounds} rounds; bare SQLite FULL peer {statistics.median(peer):,.0f} commits/s"
    )
    return result


# -- durable_workflow ----------------------------------------------------------------


def bench_durable_workflow(cfg: HasQuick) -> BenchResult:
    """A 3-step workflow, submit -> result: workunits vs DBOS Transact on SQLite."""
    result = BenchResult("durable_workflow")
    reps = scale(cfg, 40, 200)
    try:
        from dbos import DBOS  # noqa: PLC0415 - a peer, in the [bench] extra
    except ImportError as exc:
        result.note(f"DBOS is not installed ({exc}); measuring workunits alone")
        has_dbos = False
    else:
        has_dbos = True
    with state_dir("wf") as state, wu.Supervisor(state, eviction_grace=EVICT_SOON) as sup:

        def unit() -> float:
            start = time.perf_counter()
            value = sup.result(sup.workflow(workflow_three_steps, 1).id, timeout=60)
            elapsed = time.perf_counter() - start
            assert value == 4
            return elapsed

        if not has_dbos:
            result.series.append(
                Series("sup.workflow (3 steps) -> result", harness.repeat(unit, reps, 5))
            )
            return result
        for name in ("dbos", "sqlalchemy"):
            logging.getLogger(name).setLevel(logging.WARNING)

        @DBOS.step()
        def dbos_step(x: int) -> int:
            return x + 1

        @DBOS.workflow()
        def dbos_workflow(x: int) -> int:
            return dbos_step(dbos_step(dbos_step(x)))

        DBOS(
            config={
                "name": "workunits-bench",
                "system_database_url": f"sqlite:///{state / 'dbos.sqlite'}",
                "log_level": "WARNING",
            }
        )
        DBOS.launch()
        try:

            def peer() -> float:
                start = time.perf_counter()
                value = DBOS.start_workflow(dbos_workflow, 1).get_result()
                elapsed = time.perf_counter() - start
                assert value == 4
                return elapsed

            a, b = harness.alternate(unit, peer, reps, 5)
        finally:
            DBOS.destroy()
    pair = pair_of(
        result,
        "3-step workflow submit -> result",
        ("sup.workflow (3 ctx.steps, own process) -> result", a),
        ("DBOS.start_workflow (3 steps, SQLite, in-process) -> result", b),
    )
    result.note(
        f"workflow {harness.fmt(pair.a.median, 's')} vs DBOS on SQLite "
        f"{harness.fmt(pair.b.median, 's')} ({pair.median_pair_ratio:.2f}x; no target: DBOS "
        "runs the steps in the caller's process, workunits in a forked one)"
    )
    return result


# -- ray_peers ----------------------------------------------------------------------


def bench_ray_peers(cfg: HasQuick) -> BenchResult:
    """Ray task round trip vs ``sup.remote``; Ray actor creation and call vs teammates."""
    result = BenchResult("ray_peers")
    try:
        import ray  # noqa: PLC0415 - optional: needs the [ray] extra
        import remote_bench  # noqa: PLC0415 - reuse its local Ray set-up
    except ImportError:
        result.note("Ray is not installed: no Ray peers")
        return result
    cloudpickle.register_pickle_by_value(remote_bench)  # Ray workers cannot import bench/
    reps = scale(cfg, 40, 200)
    creations = scale(cfg, 3, 20)
    with tempfile.TemporaryDirectory(prefix="wu-rp-") as tmp:
        scratch = Path(tmp)
        t0 = time.perf_counter()
        with (
            remote_bench.local_ray(ray, scratch / "ray"),
            wu.Supervisor(
                scratch / "state", install_signal_handlers=False, eviction_grace=EVICT_SOON
            ) as sup,
        ):
            result.info["ray_init_seconds"] = time.perf_counter() - t0
            over = remote_bench.bench_overhead(sup, ray, 0, reps, 10, floor_in=scratch)
            result.pairs += over.pairs
            result.series += over.series
            result.checks += over.checks
            result.notes += over.notes

            ray_echo = ray.remote(Echo)
            actor = ray_echo.remote()
            mate = sup.teammate(Echo)
            mate.ask("warm", timeout=60)
            ray.get(actor.on_receive.remote("warm"), timeout=60)

            def unit_call() -> float:
                start = time.perf_counter()
                mate.ask("ping", timeout=30)
                return time.perf_counter() - start

            def ray_call() -> float:
                start = time.perf_counter()
                ray.get(actor.on_receive.remote("ping"), timeout=30)
                return time.perf_counter() - start

            a, b = harness.alternate(unit_call, ray_call, reps, 10)
            calls = pair_of(
                result,
                "actor call round trip",
                ("teammate handle.ask", a),
                ("Ray actor method call + ray.get", b),
            )
            sup.kill(mate.id)
            ray.kill(actor)

            create = _creation_pair(result, sup, ray, ray_echo, creations)
            result.info["ray_version"] = ray.__version__
    result.note(
        f"Ray {result.info.get('ray_version')}: init {result.info['ray_init_seconds']:.2f} s; "
        f"actor call {harness.fmt(calls.b.median, 's')} vs teammate ask "
        f"{harness.fmt(calls.a.median, 's')}; actor creation {harness.fmt(create.b.median, 's')} "
        f"vs teammate creation {harness.fmt(create.a.median, 's')}"
    )
    return result


def _creation_pair(
    result: BenchResult, sup: wu.Supervisor, ray: Any, ray_echo: Any, reps: int
) -> Pair:
    def unit_create() -> float:
        start = time.perf_counter()
        h = sup.teammate(Echo)
        h.ask("first", timeout=60)
        elapsed = time.perf_counter() - start
        sup.kill(h.id)
        return elapsed

    def ray_create() -> float:
        start = time.perf_counter()
        act = ray_echo.remote()
        ray.get(act.on_receive.remote("first"), timeout=60)
        elapsed = time.perf_counter() - start
        ray.kill(act)
        return elapsed

    a, b = harness.alternate(unit_create, ray_create, reps, 1)
    return pair_of(
        result,
        "actor creation + first call",
        ("sup.teammate(Echo) + first ask", a),
        ("Ray actor creation + first call", b),
    )


BENCHES: dict[str, Callable[[Any], BenchResult]] = {
    "agent_trivial": bench_agent_trivial,
    "agent_kill_1gib": bench_agent_kill_1gib,
    "teammate_ask": bench_teammate_ask,
    "ledger": bench_ledger,
    "durable_workflow": bench_durable_workflow,
    "ray_peers": bench_ray_peers,
}
