"""workunits benchmarks (DESIGN section 8): each figure is a ratio or a budget, measured in one run.

    python bench/run.py [--quick] [--only NAME[,NAME...]] [--strict] [--markdown PATH]

Each bench runs in a fresh child process (so memory figures start from a clean
heap and one bench's threads cannot colour the next); ``--in-process`` runs
them here instead, which is what a profiler wants. Every sample goes to
``bench/results/<time>-<mode>.json``, a plot of the latency distributions to the
PNG next to it; a Markdown summary goes to stdout (and to ``--markdown PATH``).
Exit status: 0 when every bench ran (misses are reported, not fatal unless
``--strict``), 1 on a miss with ``--strict``, 2 when a bench could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import batch_bench
import harness
import isolation_bench
import ledger_bench
import listing_bench
import loop_lag
import notice_bench
import peer_benches
import pooled_bench
import procstat
import submit_bench
import value_benches
from confined_floor import CONFINED_TRUE, ConfinedStarter
from harness import BenchResult, Pair, Series

import workunits as wu

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MIB = 1 << 20
KIB = 1 << 10
# Finished records leave memory soon, but not before our wait() reads them: with a
# grace of 0 a tick can evict a unit that ended while this (possibly descheduled)
# thread was between submit and wait, and wait() would raise UnknownWork.
EVICT_SOON = 1.0


@dataclass(frozen=True, slots=True)
class Config:
    quick: bool
    shell_reps: int
    shell_warmup: int
    shell_cpu_reps: int
    kill_reps: int
    kill_warmup: int
    idle_units: int
    idle_window: float
    idle_windows: int
    output_bytes: int
    output_reps: int

    @classmethod
    def make(cls, quick: bool) -> Config:
        if quick:
            return cls(
                quick=True,
                shell_reps=150,
                shell_warmup=20,
                shell_cpu_reps=400,
                kill_reps=40,
                kill_warmup=5,
                idle_units=1000,
                idle_window=2.0,
                idle_windows=1,
                output_bytes=256 * MIB,
                output_reps=2,
            )
        return cls(
            quick=False,
            shell_reps=1000,
            shell_warmup=50,
            shell_cpu_reps=1500,
            kill_reps=200,
            kill_warmup=10,
            idle_units=1000,
            idle_window=5.0,
            idle_windows=3,
            output_bytes=1024 * MIB,
            output_reps=3,
        )


@contextlib.contextmanager
def state_dir(name: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"workunits-bench-{name}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def wait_started(sup: wu.Supervisor, work_id: str, timeout: float = 10.0) -> wu.WorkRecord:
    """Poll until the unit's process exists (its record has a pid)."""
    deadline = time.monotonic() + timeout
    while True:
        record = sup.get(work_id)
        if record.pid is not None or wu.is_terminal(record.status):
            return record
        if time.monotonic() > deadline:
            raise TimeoutError(f"{work_id} has no pid after {timeout} s")
        time.sleep(0.0002)


# -- shell_true ---------------------------------------------------------------


def bench_shell_true(cfg: Config) -> BenchResult:
    """Submit -> terminal record of ``true`` vs ``Popen(["true"]).wait()``, alternately."""
    result = BenchResult("shell_true")
    bad: list[str] = []

    def unit_on(sup: wu.Supervisor) -> Callable[[], float]:
        def unit() -> float:
            start = time.perf_counter()
            handle = sup.shell(["true"])
            record = sup.wait(handle.id, timeout=30)
            elapsed = time.perf_counter() - start
            if record.status is not wu.Status.COMPLETED:
                bad.append(f"{record.id}: {record.describe_end()}")
            return elapsed

        return unit

    with state_dir("shell") as state, wu.Supervisor(state, eviction_grace=EVICT_SOON) as sup:
        unit = unit_on(sup)

        def popen() -> float:
            start = time.perf_counter()
            code = subprocess.Popen(["true"]).wait()  # noqa: S607 - as the unit runs it
            elapsed = time.perf_counter() - start
            if code != 0:
                bad.append(f"Popen(true) exited {code}")
            return elapsed

        a, b = harness.alternate(unit, popen, cfg.shell_reps, cfg.shell_warmup)
        durable = peer_benches.durable_pair(
            result,
            state,
            ("sup.shell(['true']) + wait", unit),
            ("Popen(['true']).wait()", popen),
            reps=cfg.shell_reps,
            warm=cfg.shell_warmup,
        )
        # Issue 41: the floor includes the default protection, which no posix_spawn can
        # apply: a process confined ahead (as the supervisor's spares are) execs `true`.
        with ConfinedStarter(str(state)) as confined:
            protected = peer_benches.durable_pair(
                result,
                state,
                ("sup.shell(['true']) + wait", unit),
                (CONFINED_TRUE, confined.run_true),
                reps=cfg.shell_reps,
                warm=cfg.shell_warmup,
                tag="with the default protection",
            )
            unenforced = confined.missing
        _explain_cpu(result, unit, popen, cfg.shell_cpu_reps)
        peer_benches.check_cpu_per_unit(
            result,
            state,
            "shell",
            unit,
            ("Popen(['true']).wait()", popen),
            reps=cfg.shell_cpu_reps,
        )
    # What the two fully synced commits per unit cost: the same units on a ledger
    # that does not fsync (ledger_sync="normal"), against Popen in the same run.
    with (
        state_dir("shell-normal") as state,
        wu.Supervisor(state, eviction_grace=EVICT_SOON, ledger_sync="normal") as unsynced_sup,
    ):
        c, d = harness.alternate(unit_on(unsynced_sup), popen, cfg.shell_reps, cfg.shell_warmup)
        commits = [1 / ledger_bench.raw_commits(state / f"floor-{n}.db", 500) for n in range(3)]
    pair = Pair(
        "submit -> terminal",
        Series("sup.shell(['true']) + wait", a),
        Series("Popen(['true']).wait()", b),
    )
    unsynced = Pair(
        "submit -> terminal, ledger_sync='normal' (no fsync)",
        Series("sup.shell(['true']) + wait, ledger_sync='normal'", c),
        Series("Popen(['true']).wait() [vs normal]", d),
    )
    result.pairs += [pair, unsynced]
    result.series += [pair.a, pair.b, unsynced.a, unsynced.b]
    result.note(
        f"without the two fsyncs per unit (ledger_sync='normal', durable against any "
        f"process crash, not a power cut): {unsynced.median_pair_ratio:.2f}x Popen "
        f"({harness.fmt(unsynced.a.median, 's')} vs {harness.fmt(unsynced.b.median, 's')})"
    )
    commit = Series("one bare SQLite WAL FULL commit", commits)
    result.series.append(commit)
    popen_run = "Popen(['true']).wait()"
    result.note(peer_benches.durable_floor_note(durable, popen_run, ("Popen", pair.b.median)))
    result.info["ratio_of_medians"] = pair.ratio_of_medians
    if bad:
        result.error = f"{len(bad)} runs did not complete: {bad[:3]}"
    peer_benches.check_floor_ratio(result, protected, "shell")
    result.note(peer_benches.durable_floor_note(protected, CONFINED_TRUE, ("Popen", pair.b.median)))
    if unenforced:
        result.note(f"left out of the protected floor, as this machine cannot: {unenforced}")
    result.note(
        f"peer, no target: {pair.median_pair_ratio:.2f}x Popen (ratio of medians "
        f"{pair.ratio_of_medians:.2f}x; {harness.fmt(pair.a.median, 's')} vs "
        f"{harness.fmt(pair.b.median, 's')})"
    )
    return result


def _explain_cpu(
    result: BenchResult, unit: Callable[[], object], popen: Callable[[], object], reps: int
) -> None:
    """Where the supervisor's CPU goes per unit, by thread, and how often its threads switch.

    Unit actor threads live only as long as their unit, so their share is the
    process total minus the threads still alive at the end.
    """
    per_thread, total, switches = _cpu_by_thread(unit, reps)
    _, base_total, base_switches = _cpu_by_thread(popen, reps)
    us = {name: round(sec / reps * 1e6, 1) for name, sec in per_thread.items()}
    result.info["cpu_us_per_unit_by_thread"] = us
    result.info["cpu_us_per_unit"] = total / reps * 1e6
    result.info["cpu_us_per_popen"] = base_total / reps * 1e6
    result.info["context_switches_per_unit"] = [x / reps for x in switches]
    result.info["context_switches_per_popen"] = [x / reps for x in base_switches]
    shown = ", ".join(f"{k} {v:.0f}" for k, v in sorted(us.items(), key=lambda kv: -kv[1]))
    result.note(
        f"supervisor CPU per unit {total / reps * 1e6:.0f} us ({shown}) vs "
        f"{base_total / reps * 1e6:.0f} us per bare Popen; context switches per unit "
        f"{switches[0] / reps:.1f} voluntary + {switches[1] / reps:.1f} involuntary "
        f"(bare Popen {base_switches[0] / reps:.1f} + {base_switches[1] / reps:.1f})"
    )


def _cpu_by_thread(
    fn: Callable[[], object], reps: int
) -> tuple[dict[str, float], float, tuple[int, int]]:
    names = procstat.thread_families()
    before, total0, cs0 = (
        procstat.thread_cpu_seconds(),
        procstat.cpu_seconds(),
        procstat.context_switches(),
    )
    for _ in range(reps):
        fn()
    after, total1, cs1 = (
        procstat.thread_cpu_seconds(),
        procstat.cpu_seconds(),
        procstat.context_switches(),
    )
    per = procstat.cpu_by_family(names, before, after)
    total = total1 - total0
    per["unit actor threads (ended)"] = max(0.0, total - sum(per.values()))
    return per, total, (cs1[0] - cs0[0], cs1[1] - cs0[1])


# -- kill_latency ---------------------------------------------------------------


def bench_kill_latency(cfg: Config) -> BenchResult:
    """``sup.kill`` -> terminal record of a live shell and of a live agent, vs killpg + waitpid.

    Both kinds have the same target (DESIGN section 8): the shell runs ``sleep 60``, the
    agent a small body that says it runs and then blocks. Each has its bare peer killed
    and reaped by hand: a ``sleep 60`` in its own session, and a Python process like an
    agent's; the agent's floor adds one fully synced commit (its terminal record).
    """
    result = BenchResult("kill_latency")
    bad: list[str] = []
    with state_dir("kill") as state, wu.Supervisor(state, eviction_grace=EVICT_SOON) as sup:

        def unit() -> float:
            handle = sup.shell(["sleep", "60"])
            wait_started(sup, handle.id)
            return peer_benches.timed_kill(sup, handle.id, bad)

        def bare() -> float:
            proc = subprocess.Popen(
                ["sleep", "60"],  # noqa: S607 - as the unit runs it
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            elapsed, status = peer_benches.timed_killpg(proc.pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return elapsed

        a, b = harness.alternate(unit, bare, cfg.kill_reps, cfg.kill_warmup)
        c, d = harness.alternate(
            lambda: _kill_an_agent(sup, bad), _kill_bare_python, cfg.kill_reps, cfg.kill_warmup
        )
        commits_one = ledger_bench.BareInserts(state / "floor-paused.db", 200)
        try:
            e, f = harness.alternate(
                lambda: _kill_an_agent(sup, bad, pause=KILL_PAUSE),
                lambda: _kill_bare_python(pause=KILL_PAUSE, then=commits_one.insert),
                cfg.kill_reps,
                cfg.kill_warmup,
            )
        finally:
            commits_one.close()
        commits = [1 / ledger_bench.raw_commits(state / f"floor-{n}.db", 500) for n in range(3)]
    shells = Pair(
        "kill -> terminal",
        Series("sup.kill + wait (sleep 60 unit)", a),
        Series("killpg + waitpid (bare sleep 60)", b),
    )
    agents = Pair(
        "agent kill -> terminal",
        Series("sup.kill + wait (blocked agent unit)", c),
        Series("killpg + waitpid (bare Python process with the unit runtime loaded)", d),
    )
    paused = Pair(
        "agent kill after a pause -> terminal",
        Series(f"sup.kill + wait (blocked agent unit, {KILL_PAUSE * 1e3:.0f} ms after it runs)", e),
        Series(
            f"floor: killpg + waitpid (bare Python process) + one fully synced SQLite commit, "
            f"{KILL_PAUSE * 1e3:.0f} ms after it runs",
            f,
        ),
    )
    commit = Series("one bare SQLite WAL FULL commit (the terminal record's)", commits)
    result.pairs += [shells, agents, paused]
    result.series += [shells.a, shells.b, agents.a, agents.b, paused.a, paused.b, commit]
    if bad:
        result.error = f"{len(bad)} kills did not end killed: {bad[:3]}"
    for what, pair in (("shell", shells), ("agent", agents)):
        result.check(
            f"kill -> terminal record, {what}, median",
            "<= 2.000 ms",
            2e-3,
            pair.a.median,
            f"{harness.fmt(pair.a.median, 's')} (bare {harness.fmt(pair.b.median, 's')}, "
            f"{pair.median_pair_ratio:.1f}x)",
        )
    floor = agents.b.median + commit.median
    result.note(
        f"floor for an agent's kill, measured in this run: the kernel's SIGKILL + reap of a "
        f"bare Python process ({harness.fmt(agents.b.median, 's')}) + one fully synced commit "
        f"({harness.fmt(commit.median, 's')}) = {harness.fmt(floor, 's')}; the agent's kill "
        f"takes {agents.a.median / floor:.2f}x that"
    )
    result.note(
        f"a kill that comes {KILL_PAUSE * 1e3:.0f} ms after the unit runs (the machine idle "
        f"meanwhile, as when a user kills a unit): agent {harness.fmt(paused.a.median, 's')}, "
        f"its floor timed the same way (a bare Python process killed and reaped, then one "
        f"fully synced commit) {harness.fmt(paused.b.median, 's')}, "
        f"{paused.median_pair_ratio:.2f}x pair by pair; on a VM a disk and CPUs that idled "
        f"answer slower than the back-to-back commits above"
    )
    return result


# A user's kill comes when the machine has idled for a while, not back to back with
# other work: the paused pair measures the unit and its floor after the same pause.
KILL_PAUSE = 0.02


def _kill_an_agent(sup: wu.Supervisor, bad: list[str], pause: float = 0.0) -> float:
    """``sup.kill`` -> terminal record of an agent whose body runs (blocked), ``pause``
    seconds after it said so."""
    handle = sup.agent(peer_benches.hold_memory, peer_benches.PAGE)
    peer_benches.wait_until_holding(sup, handle.id)
    if pause:
        time.sleep(pause)
    return peer_benches.timed_kill(sup, handle.id, bad)


def _kill_bare_python(pause: float = 0.0, then: Callable[[], None] | None = None) -> float:
    """killpg + waitpid of a Python process like an agent's: the unit runtime loaded, and a
    second thread; its teardown costs the kernel more than a ``sleep``'s does.

    ``pause``: seconds between its start and the kill; ``then``: timed after the reap
    (a floor's synced commit).
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _BARE_PYTHON_UNIT],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    proc.stdout.read(1)  # it runs
    if pause:
        time.sleep(pause)
    start = time.perf_counter()
    _, status = peer_benches.timed_killpg(proc.pid)
    if then is not None:
        then()
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    return elapsed


# A stand-in for an agent's process: the unit runtime imported, a second thread (the
# capture's pump), then blocked until killed.
_BARE_PYTHON_UNIT = (
    "import signal, sys, threading\n"
    "import workunits._unit.child\n"
    "threading.Thread(target=signal.pause, daemon=True).start()\n"
    "sys.stdout.write('r'); sys.stdout.flush()\n"
    "signal.pause()\n"
)


# -- idle_1000 --------------------------------------------------------------------


def feasible_units(wanted: int, result: BenchResult) -> int:
    """How many idle units this machine allows: each holds a pidfd, a thread and a process."""
    soft, hard = procstat.raise_nofile()
    result.info["nofile"] = [soft, hard]
    fd_room = soft - procstat.open_fds() - 64  # a margin for the supervisor's own files
    limits = procstat.task_limits()
    result.info["task_limits"] = limits
    bounds = {"RLIMIT_NOFILE (one pidfd per unit)": fd_room}
    for name, value in limits.items():
        # Every unit costs one actor thread and one process, both count as tasks.
        bounds[f"{name} (a thread + a process per unit)"] = (value - 256) // 2
    limit_name, room = min(bounds.items(), key=lambda kv: kv[1])
    if room < wanted:
        result.note(
            f"{wanted} units are infeasible here: {limit_name} allows about {room}; "
            f"measuring {room}"
        )
        return max(room, 1)
    return wanted


def bench_idle_1000(cfg: Config) -> BenchResult:
    """Supervisor CPU and RSS per unit with ~1,000 running ``sleep 600`` units."""
    result = BenchResult("idle_1000")
    wanted = feasible_units(cfg.idle_units, result)
    with state_dir("idle") as state:
        sup = wu.Supervisor(state)
        try:
            for _ in range(5):  # warm: lazy imports, first actor threads, allocator pools
                sup.wait(sup.shell(["true"]).id, timeout=30)
            gc.collect()
            time.sleep(0.5)
            base_cpu = _cpu_windows(cfg.idle_window, 1)
            before = procstat.memory()
            fds_before = procstat.open_fds()

            ids: list[str] = []
            t0 = time.perf_counter()
            try:
                for _ in range(wanted):
                    ids.append(sup.shell(["sleep", "600"]).id)
            except wu.WorkunitsError as exc:
                result.note(f"submit #{len(ids) + 1} failed: {exc!r}; measuring {len(ids)}")
            running = _wait_all_running(sup, ids, result)
            result.info["start_seconds"] = time.perf_counter() - t0
            n = len(running)
            if n == 0:
                result.error = "no unit reached running"
                return result
            gc.collect()
            time.sleep(1.0)  # let every actor thread settle into its blocking inbox read
            after = procstat.memory()
            result.info.update(
                units=n,
                rss_before=before.rss,
                rss_after=after.rss,
                threads_before=before.threads,
                threads_after=after.threads,
                fds_per_unit=(procstat.open_fds() - fds_before) / n,
            )
            cpu = _cpu_windows(cfg.idle_window, cfg.idle_windows)
            still = sum(1 for r in sup.list(status="running") if r.pid is not None)
            if still != n:
                result.error = f"{n - still} of {n} units stopped during the idle window"
        finally:
            t1 = time.perf_counter()
            # Ends the units one by one before close(): close() kills 1,000 at once and
            # can deadlock in ZygoteClient (a send blocked on a full socket while holding
            # the lock its only reader needs; see bench/RESULTS.md).
            with contextlib.suppress(wu.WorkunitsError):
                for work_id in ids:
                    if sup.kill(work_id):
                        sup.wait(work_id, timeout=30)
            result.info["kill_all_seconds"] = time.perf_counter() - t1
            t1 = time.perf_counter()
            sup.close()
            result.info["close_seconds"] = time.perf_counter() - t1
    result.info["children_left_after_close"] = _reap_leftovers()
    per_unit = (after.rss - before.rss) / n
    result.series += [
        Series("supervisor CPU, no units", base_cpu, "%"),
        Series(f"supervisor CPU, {n} idle units", cpu, "%"),
    ]
    result.info["rss_per_unit"] = per_unit
    cpu_median = Series("", cpu).median
    result.check(
        f"CPU with {n} idle units (% of one core, {cfg.idle_window:g} s window)",
        "<= 2.00 %",
        2.0,
        cpu_median,
        f"{cpu_median:.2f} % (no units: {Series('', base_cpu).median:.2f} %)",
    )
    result.check(
        f"RSS growth per unit ({n} units)",
        "<= 64 KiB",
        64 * KIB,
        per_unit,
        f"{per_unit / KIB:.1f} KiB ({harness.fmt(before.rss, 'B')} -> "
        f"{harness.fmt(after.rss, 'B')}; {after.threads} threads)",
    )
    return result


def _cpu_windows(window: float, count: int) -> list[float]:
    """This process's CPU over ``count`` windows, each as % of one core."""
    out: list[float] = []
    for _ in range(count):
        c0, t0 = procstat.cpu_seconds(), time.monotonic()
        time.sleep(window)
        c1, t1 = procstat.cpu_seconds(), time.monotonic()
        out.append(100.0 * (c1 - c0) / (t1 - t0))
    return out


def _wait_all_running(sup: wu.Supervisor, ids: list[str], result: BenchResult) -> list[str]:
    """Wait until every unit is running with a pid, or has ended; return the running ones."""
    deadline = time.monotonic() + 120
    wanted = set(ids)
    while True:
        records = [r for r in sup.list() if r.id in wanted]
        running = [r.id for r in records if r.status is wu.Status.RUNNING and r.pid is not None]
        ended = [r for r in records if wu.is_terminal(r.status)]
        if len(running) + len(ended) == len(ids) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if ended:
        result.note(
            f"{len(ended)} units could not start (first: {ended[0].describe_end()}); "
            f"measuring the {len(running)} that run"
        )
    return running


def _reap_leftovers() -> int:
    """Children still unreaped after close() (there should be none)."""
    left = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return left
        if pid == 0:
            return left + 1  # alive and unreaped: close() left it running
        left += 1


# -- output_1gib ----------------------------------------------------------------


def bench_output_1gib(cfg: Config) -> BenchResult:
    """Supervisor RSS while a unit writes ``output_bytes`` and a reader streams them.

    The first run is cold: nothing was streamed in this process before, so the
    stream's buffers count as growth. Later runs are warm and show whether
    memory stays flat run after run (it must not grow with the output).
    """
    result = BenchResult("output_1gib")
    size = cfg.output_bytes
    label = harness.fmt(size, "B")
    growth: list[float] = []
    growth_end: list[float] = []
    seconds: list[float] = []
    with state_dir("output") as state, wu.Supervisor(state, eviction_grace=0.0) as sup:
        sup.wait(sup.shell(["true"]).id, timeout=30)  # warm the actors, not the stream path
        can_reset = procstat.reset_peak()
        if not can_reset:
            result.note("VmHWM cannot be reset here; the peak is the 5 ms sampler's")
        for _ in range(cfg.output_reps):
            gc.collect()
            procstat.reset_peak()
            before = procstat.memory()
            with procstat.PeakSampler() as sampler:
                start = time.perf_counter()
                got, record = _stream_unit(sup, size)
                seconds.append(time.perf_counter() - start)
            after = procstat.memory()
            peak = max(sampler.peak, after.hwm if can_reset else 0)
            growth.append(peak - before.rss)
            growth_end.append(after.rss - before.rss)
            if got != size or record.output_bytes != size:
                result.error = (
                    f"byte count mismatch: streamed {got}, record says {record.output_bytes}, "
                    f"expected {size}"
                )
            if record.status is not wu.Status.COMPLETED:
                result.error = f"the writer ended {record.describe_end()}"
            result.info.setdefault("runs", []).append(
                {
                    "rss_before": before.rss,
                    "rss_after": after.rss,
                    "peak": peak,
                    "sampler_peak": sampler.peak,
                    "sampler_samples": sampler.samples,
                    "hwm_after": after.hwm,
                    "bytes_streamed": got,
                }
            )
    result.series += [
        Series(f"RSS peak growth, {label} streamed, cold", growth[:1], "B"),
        Series(f"RSS peak growth, {label} streamed, warm", growth[1:], "B"),
        Series(f"RSS growth at the end, {label} streamed", growth_end, "B"),
        Series(f"write + stream {label}", seconds),
    ]
    result.info["throughput_MiB_s"] = [size / MIB / s for s in seconds]
    worst = max(growth)
    warm = f"; warm {harness.fmt(max(growth[1:]), 'B')}" if growth[1:] else ""
    result.check(
        f"supervisor RSS growth while {label} is written and streamed (worst peak of "
        f"{len(growth)} runs)",
        "<= 2.00 MiB",
        2.0 * MIB,
        worst,
        f"{harness.fmt(worst, 'B')} (cold {harness.fmt(growth[0], 'B')}{warm}; "
        f"bytes ok: {result.error is None})",
    )
    return result


def _stream_unit(sup: wu.Supervisor, size: int) -> tuple[int, wu.WorkRecord]:
    handle = sup.shell(["head", "-c", str(size), "/dev/zero"])
    # Hold the record past the stream's end: with eviction_grace=0 the stream's own
    # release would let a tick evict it before we read how it ended.
    with sup.retain(handle.id):
        got = 0
        for chunk in sup.stream(handle.id):
            got += len(chunk)
        return got, sup.wait(handle.id, timeout=60)


# -- driver ------------------------------------------------------------------------

BENCHES: dict[str, Callable[[Config], BenchResult]] = {
    "shell_true": bench_shell_true,
    "kill_latency": bench_kill_latency,
    "idle_1000": bench_idle_1000,
    "output_1gib": bench_output_1gib,
    **peer_benches.BENCHES,
    **pooled_bench.BENCHES,
    **batch_bench.BENCHES,
    **value_benches.BENCHES,
    **loop_lag.BENCHES,
    **notice_bench.BENCHES,
    **submit_bench.BENCHES,
    **listing_bench.BENCHES,
    **isolation_bench.BENCHES,
}


def run_here(name: str, cfg: Config) -> BenchResult:
    print(f"== {name}", flush=True)
    start = time.perf_counter()
    load = os.getloadavg()[0]
    try:
        result = BENCHES[name](cfg)
    except Exception as exc:  # noqa: BLE001 - one broken bench must not hide the others
        result = BenchResult(name, error=f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
    result.seconds = time.perf_counter() - start
    # The machine is shared: other work competes for the same cores and shows here.
    result.info["loadavg_1min"] = [load, os.getloadavg()[0]]
    if result.error is not None:
        print(f"  [ERROR] {name}: {result.error}", flush=True)
    return result


def run_child(name: str, cfg: Config, timeout: float) -> BenchResult:
    """Run one bench in a fresh interpreter; it writes its result as JSON to a file."""
    fd, out = tempfile.mkstemp(prefix=f"workunits-bench-{name}-", suffix=".json")
    os.close(fd)
    argv = [sys.executable, __file__, "--child", name, "--result-file", out]
    if cfg.quick:
        argv.append("--quick")
    try:
        proc = subprocess.Popen(argv)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # its supervisor's cleanup handler kills its units
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return BenchResult(name, error=f"timed out after {timeout:g} s")
        text = Path(out).read_text(encoding="utf-8")
        if not text:
            return BenchResult(name, error=f"the bench process exited {code} without a result")
        return harness.result_from_json(json.loads(text))
    finally:
        Path(out).unlink(missing_ok=True)


def plot(results: list[BenchResult], path: Path) -> bool:
    """Latency distributions (series in seconds), one panel per bench, log scale; False if none."""
    import matplotlib  # noqa: PLC0415 - optional: the [bench] extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = [(r.name, [s for s in r.series if s.unit == "s" and s.samples]) for r in results]
    panels = [(name, series) for name, series in panels if series]
    if not panels:
        return False
    # Long series names wrap instead of running off the figure's left edge; each
    # wrapped line takes room of its own.
    wrapped = {s.name: textwrap.fill(s.name, width=52) for _, series in panels for s in series}
    height = sum(
        0.9 + sum(0.35 + 0.15 * wrapped[s.name].count("\n") for s in series) for _, series in panels
    )
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, height), squeeze=False)
    for ax, (name, series) in zip(axes[:, 0], panels, strict=True):
        samples = [[x * 1e3 for x in s.samples] for s in series]
        ax.boxplot(samples, orientation="horizontal", whis=(0, 100), widths=0.6)
        ax.set_yticks(range(1, len(series) + 1), [wrapped[s.name] for s in series], fontsize=7)
        low = min(min(x) for x in samples)
        high = max(max(x) for x in samples)
        if low > 0 and high / low > 3:
            ax.set_xscale("log")  # a narrower span on a log axis labels its minor ticks
        ax.set_title(name, fontsize=9, loc="left")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[-1, 0].set_xlabel(
        "ms (log scale where a panel spans more than 3x; box: quartiles, whiskers: min and max)",
        fontsize=8,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer reps, smaller sizes (< 2 min)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these benches (repeat or comma-separate): {', '.join(BENCHES)}",
    )
    parser.add_argument("--in-process", action="store_true", help="no child processes (profiling)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--out", type=Path, help="JSON file for every sample")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the tables here too")
    parser.add_argument("--no-plot", action="store_true", help="no PNG of the distributions")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="PATH",
        help="run nothing: print the tables (and plot) of an earlier run's JSON",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cfg = Config.make(args.quick)

    if args.child is not None:
        result = run_here(args.child, cfg)
        args.result_file.write_text(json.dumps(asdict(result)), encoding="utf-8")
        return 0

    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text(encoding="utf-8"))
        earlier = [harness.result_from_json(entry) for entry in saved["benches"]]
        return report(earlier, args.from_json, args.markdown, not args.no_plot)

    names = [n for item in args.only for n in item.split(",") if n] or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown bench {unknown}; choose from {list(BENCHES)}")
    mode = "quick" if cfg.quick else "full"
    env = harness.environment(sys.argv)
    env["mode"] = mode
    env["config"] = asdict(cfg)
    out = args.out or RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{mode}.json"
    print(f"workunits bench ({mode}): {', '.join(names)}", flush=True)
    results: list[BenchResult] = []
    timeout = 120.0 if cfg.quick else 300.0
    for name in names:
        # The listing bench fills ledgers of 100,000 units and watches a browser tab.
        limit = timeout * 4 if name == "listing" else timeout
        results.append(run_here(name, cfg) if args.in_process else run_child(name, cfg, limit))
        harness.write_json(out, env, results)  # keep what we have if a later bench hangs
    code = report(results, out, args.markdown, not args.no_plot)
    if code == 0 and args.strict and any(not c.passed for r in results for c in r.checks):
        return 1
    return code


def report(results: list[BenchResult], out: Path, md: Path | None, with_plot: bool) -> int:
    """Tables on stdout (and to ``md``), the plot next to ``out``; 2 if a bench failed."""
    tables = harness.markdown(results)
    print()
    print(tables)
    print(f"\nsamples: {out}")
    if md is not None:
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(tables + "\n", encoding="utf-8")
        print(f"tables: {md}")
    if with_plot:
        png = out.with_suffix(".png")
        try:
            if plot(results, png):
                print(f"plot: {png}")
        except ImportError as exc:
            print(f"no plot ({exc}): pip install matplotlib", file=sys.stderr)
    return 2 if any(r.error is not None for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
