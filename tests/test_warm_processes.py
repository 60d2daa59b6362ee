"""Warm single-use processes: a Python unit on one behaves as on a fresh fork.

The zygote keeps spares forked ahead of demand (``WORKUNITS_WARM_PROCESSES``,
0 turns them off) and hands each Python unit to one, which runs exactly that
unit and exits. These tests run real supervisors with and without spares:
no process runs two units, crashes, kills, timeouts and limits end a unit as
they would on a fork, an unused spare ages out, and spares die with the zygote.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import cloudpickle
import orjson
import pytest

import workunits as wu
from workunits._core.errors import InvalidArgument
from workunits._unit import child, context, descendants
from workunits._zygote import containment, payload, spare, warm

from .conftest import alive, eventually, parent_of

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- bodies (run in unit processes) ------------------------------------------------


def my_pid() -> int:
    return os.getpid()


def exit_with(code: int) -> None:
    os._exit(code)


def segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def wait_forever() -> None:
    threading.Event().wait()


def allocate(size: int) -> int:
    return len(bytearray(size))


# -- helpers ----------------------------------------------------------------------


def zygote_pid(sup: wu.Supervisor) -> int:
    sup.result(sup.agent(my_pid).id, timeout=30)  # the zygote is up once a unit ran
    pid = sup._machinery.zygote.pid
    assert pid is not None
    return pid


def spares(zygote: int) -> set[int]:
    """The zygote's children that wait for a unit."""
    found = set()
    for pid in descendants.children(zygote):
        try:
            with open(f"/proc/{pid}/comm", "rb") as f:
                if f.read().rstrip(b"\n") == spare.NAME:
                    found.add(pid)
        except FileNotFoundError:
            continue
    return found


def full(zygote: int, size: int) -> set[int] | None:
    """The zygote's spares if it holds ``size`` of them, else None."""
    found = spares(zygote)
    return found if len(found) == size else None


def a_spare(zygote: int) -> set[int]:
    """Wait until the zygote holds at least one spare; all it holds then."""
    return eventually(lambda: spares(zygote), timeout=20, what="a warm process")


def settle(sup: wu.Supervisor, warm_processes: int) -> None:
    """With spares on, wait for one: the next unit then runs on a warm process."""
    if warm_processes:
        a_spare(zygote_pid(sup))


@pytest.fixture(params=[0, 2], ids=["forked", "warm"])
def warm_processes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv(warm.PROCESSES_ENV, str(request.param))
    return int(request.param)


@pytest.fixture
def wsup(tmp_path: Path, warm_processes: int) -> Iterator[wu.Supervisor]:
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        yield sup


# -- one process, one unit ----------------------------------------------------------


@pytest.mark.timeout(120)
def test_no_process_runs_two_units(wsup: wu.Supervisor) -> None:
    sequential = [wsup.result(wsup.agent(my_pid).id, timeout=30) for _ in range(50)]
    handles = [wsup.agent(my_pid) for _ in range(20)]  # several in flight at once
    concurrent = [wsup.result(h.id, timeout=30) for h in handles]
    pids = sequential + concurrent
    assert len(set(pids)) == len(pids)
    assert os.getpid() not in pids


@pytest.mark.timeout(60)
def test_a_unit_runs_on_a_process_forked_before_it_was_submitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warm.PROCESSES_ENV, "2")
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        zygote = zygote_pid(sup)
        for _ in range(3):
            # Two is the most it keeps: no spare is forked between this look and the submit.
            ready = eventually(lambda: full(zygote, 2), timeout=20, what="two warm processes")
            pid = sup.result(sup.agent(my_pid).id, timeout=30)
            assert pid in ready
            assert not alive(pid)  # it ran its one unit and is gone


def cgroup_mode() -> None:
    found = containment.probe()
    if found.own is None:
        pytest.skip(f"a command takes a spare in cgroup mode only: {found.reason}")


@pytest.mark.timeout(60)
def test_a_confined_command_is_execd_by_a_spare_as_by_a_fresh_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the default protection a shell unit's command is exec'd by a warm process,
    confined ahead: the same pid, only fds 0-2, default signal actions, its exit code."""
    cgroup_mode()
    monkeypatch.setenv(warm.PROCESSES_ENV, "2")
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        zygote = zygote_pid(sup)
        ready = eventually(lambda: full(zygote, 2), timeout=20, what="two warm processes")
        unit = sup.shell("echo $$; ls /proc/$$/fd; exit 3")
        record = sup.wait(unit.id, timeout=30)
        pid, *fds = record.output_tail.split()
        assert int(pid) in ready  # the spare became the command
        assert record.pid == int(pid)
        assert fds == [b"0", b"1", b"2"]  # nothing of the spare's: no capture pipe
        assert (record.status, record.exit_code) == (wu.Status.FAILED, 3)
        # Ignored in neither the spare nor the command: SIGPIPE's default action ends it.
        eventually(lambda: full(zygote, 2), timeout=20, what="two warm processes again")
        piped = sup.wait(sup.shell("kill -s PIPE $$; echo survived").id, timeout=30)
        assert piped.signal == signal.SIGPIPE, piped.describe_end()
        # Its protection is the default one: the state dir is hidden from it.
        eventually(lambda: full(zygote, 2), timeout=20, what="two warm processes again")
        ledger = sup.state_dir / "ledger.db"
        assert ledger.exists()
        looked = sup.wait(sup.shell(f"test -e {ledger}").id, timeout=30)
        assert looked.exit_code == 1, looked.describe_end()


@pytest.mark.timeout(60)
def test_a_command_a_spare_cannot_start_fails_its_unit_and_leaves_no_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cgroup_mode()
    monkeypatch.setenv(warm.PROCESSES_ENV, "2")
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        zygote = zygote_pid(sup)
        ready = eventually(lambda: full(zygote, 2), timeout=20, what="two warm processes")
        cgroups = {pid: descendants.cgroup_of(pid) for pid in ready}
        # Found on PATH by the zygote, refused by the exec (ENOEXEC): no ELF, no "#!".
        program = tmp_path / "bin" / "not-a-program"
        program.parent.mkdir()
        program.write_bytes(b"\x00\x01 not a program")
        program.chmod(0o755)
        env = {"PATH": str(program.parent)}
        record = sup.wait(sup.shell(["not-a-program"], env=env).id, timeout=30)
        assert record.status is wu.Status.FAILED
        assert "could not start" in record.describe_end(), record.describe_end()
        taken = ready - spares(zygote)
        assert len(taken) == 1
        assert not any(alive(pid) for pid in taken), "the spare it took lives on"
        (path,) = (cgroups[pid] for pid in taken)
        assert path is not None
        eventually(lambda: not os.path.exists(path), timeout=20, what="its cgroup to go")
        # The zygote carries on: the next command runs.
        assert sup.wait(sup.shell("true").id, timeout=30).status is wu.Status.COMPLETED


@pytest.mark.timeout(60)
def test_a_stopped_spare_given_a_command_is_killed_and_the_command_runs_anyway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zygote waits for a spare's exec only up to the hand-over timeout: a stopped
    spare must not hold the zygote's one thread (and every other unit) for good."""
    cgroup_mode()
    monkeypatch.setenv(warm.PROCESSES_ENV, "1")
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        zygote = zygote_pid(sup)
        (stopped,) = eventually(lambda: full(zygote, 1), timeout=20, what="a warm process")
        os.kill(stopped, signal.SIGSTOP)
        record = sup.wait(sup.shell("echo $$").id, timeout=30)
        assert record.status is wu.Status.COMPLETED, record.describe_end()
        assert int(record.output_tail) != stopped
        eventually(lambda: not alive(stopped), timeout=20, what="the stopped spare to be killed")


@pytest.mark.timeout(60)
def test_with_warm_processes_off_no_spare_is_forked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warm.PROCESSES_ENV, "0")
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        zygote = zygote_pid(sup)
        for _ in range(5):
            assert sup.result(sup.agent(my_pid).id, timeout=30) > 0
            assert spares(zygote) == set()


# -- ends, as on a fresh fork -----------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_crash_fails_the_unit_with_its_cause(wsup: wu.Supervisor, warm_processes: int) -> None:
    settle(wsup, warm_processes)
    exited = wsup.wait(wsup.agent(exit_with, 3).id, timeout=30)
    assert (exited.status, exited.exit_code) == (wu.Status.FAILED, 3)
    settle(wsup, warm_processes)
    crashed = wsup.wait(wsup.agent(segfault).id, timeout=30)
    assert (crashed.status, crashed.signal) == (wu.Status.FAILED, signal.SIGSEGV)
    assert wsup.result(wsup.agent(my_pid).id, timeout=30) > 0  # and the next one runs


@pytest.mark.timeout(60)
def test_kill_and_timeout_end_the_unit(wsup: wu.Supervisor, warm_processes: int) -> None:
    settle(wsup, warm_processes)
    killed = wsup.agent(wait_forever)
    eventually(lambda: wsup.get(killed.id).pid, what="the unit to start")
    assert wsup.kill(killed.id) is True
    record = wsup.wait(killed.id, timeout=30)
    assert (record.status, record.signal) == (wu.Status.KILLED, signal.SIGKILL)
    settle(wsup, warm_processes)
    timed_out = wsup.wait(wsup.agent(wait_forever, timeout=0.5).id, timeout=30)
    assert (timed_out.status, timed_out.reason) == (wu.Status.KILLED, wu.Reason.TIMEOUT)


@pytest.mark.timeout(60)
def test_a_memory_limit_holds(wsup: wu.Supervisor, warm_processes: int) -> None:
    settle(wsup, warm_processes)
    record = wsup.wait(wsup.agent(allocate, 1 << 30, memory_limit=256 << 20).id, timeout=30)
    assert record.reason is wu.Reason.MEMORY_LIMIT  # a cgroup's OOM kill, or RLIMIT_AS
    assert wsup.result(wsup.agent(allocate, 1 << 20).id, timeout=30) == 1 << 20


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.timeout(60)
def test_an_argument_too_large_for_the_request_reaches_the_unit_whole(
    wsup: wu.Supervisor, warm_processes: int
) -> None:
    # Past payload.FD_PAYLOAD the call travels in a memfd beside the request, which
    # the zygote passes on unopened: to a spare, or into the child it forks.
    settle(wsup, warm_processes)
    data = os.urandom(payload.FD_PAYLOAD + 12345)
    assert wsup.result(wsup.agent(digest, data).id, timeout=30) == digest(data)
    assert wsup.result(wsup.agent(digest, b"small").id, timeout=30) == digest(b"small")


# -- the rehearsal -------------------------------------------------------------------


def kind_of_fd(fd: str) -> str:
    """What descriptor ``fd`` of this process is: ``pipe``, ``socket``, ``file``..."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return "gone"  # the directory listing's own descriptor
    if target.startswith("/") and target != os.devnull:
        return "file"  # the transcript: its path names the unit
    return target.split(":")[0]


def talk_and_describe() -> dict[str, object]:
    """Write to both streams and report progress; say what the process holds."""
    ctx = wu.current()
    print("to stdout")
    print("to stderr", file=sys.stderr)
    ctx.progress(0.5, "half way")
    return {
        "id": ctx.id,
        "fds": sorted(kind_of_fd(fd) for fd in os.listdir("/proc/self/fd")),
        "threads": sorted(t.name for t in threading.enumerate()),
        "stdout": type(sys.stdout).__name__,
    }


def run_on_a_spare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rehearse_after: str
) -> tuple[dict[str, object], list[tuple[int, str]]]:
    """One ``talk_and_describe`` unit on a spare; its result and its transcript's events."""
    monkeypatch.setenv(warm.PROCESSES_ENV, "2")
    monkeypatch.setenv(warm.REHEARSE_ENV, rehearse_after)
    state = tmp_path / rehearse_after
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        zygote = zygote_pid(sup)
        ready = eventually(lambda: full(zygote, 2), timeout=20, what="two warm processes")
        h = sup.agent(talk_and_describe)
        result = sup.result(h.id, timeout=30)
        assert sup.get(h.id).pid in ready  # it ran on a spare
        assert result["id"] == h.id
    transcript = state / "transcripts" / f"{h.id}.jsonl"
    events = [orjson.loads(line) for line in transcript.read_bytes().splitlines()]
    return result, [(e["seq"], e["type"]) for e in events]


@pytest.mark.timeout(90)
def test_a_spare_that_rehearsed_runs_its_unit_as_one_that_did_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0: every spare rehearses before it waits; 3600: none does within this test.
    rehearsed, rehearsed_events = run_on_a_spare(tmp_path, monkeypatch, "0")
    plain, plain_events = run_on_a_spare(tmp_path, monkeypatch, "3600")
    for described in (rehearsed, plain):
        described.pop("id")
    assert rehearsed == plain  # the same descriptors, threads and streams
    assert rehearsed_events == plain_events  # numbered from 1, nothing of the rehearsal in it
    assert rehearsed_events[0] == (1, "start")
    assert {"stdout", "stderr", "progress", "result"} <= {kind for _, kind in rehearsed_events}


@pytest.mark.timeout(30)
def test_a_rehearsal_leaves_nothing_behind() -> None:
    fds = sorted(os.listdir("/proc/self/fd"))
    threads = threading.enumerate()
    streams = (sys.stdout, sys.stderr)
    current = context._current
    child.rehearse()
    assert sorted(os.listdir("/proc/self/fd")) == fds
    assert threading.enumerate() == threads
    assert (sys.stdout, sys.stderr) == streams
    assert context._current is current


# -- the pool's life ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_an_unused_spare_ages_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warm.PROCESSES_ENV, "2")
    monkeypatch.setenv(warm.IDLE_ENV, "0.5")
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        zygote = zygote_pid(sup)
        ready = a_spare(zygote)
        eventually(lambda: not spares(zygote), timeout=20, what="the spares to age out")
        assert not any(alive(pid) for pid in ready)
        # Demand brings them back.
        assert sup.result(sup.agent(my_pid).id, timeout=30) > 0
        a_spare(zygote)


@pytest.mark.timeout(60)
def test_a_killed_zygote_takes_its_spares_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warm.PROCESSES_ENV, "2")
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        zygote = zygote_pid(sup)
        ready = a_spare(zygote)
        # The zygote's guard would sweep what it leaves: held stopped, the spares'
        # own parent-death signal is all that can end them.
        guard = parent_of(zygote)
        os.kill(guard, signal.SIGSTOP)
        try:
            os.kill(zygote, signal.SIGKILL)
            for pid in ready:
                eventually(lambda p=pid: not alive(p), timeout=20, what=f"spare {pid} to die")  # type: ignore[misc]
        finally:
            os.kill(guard, signal.SIGCONT)
        # The next unit gets a new zygote.
        assert sup.result(sup.agent(my_pid).id, timeout=30) > 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (warm.PROCESSES_ENV, "-1"),
        (warm.PROCESSES_ENV, "many"),
        (warm.IDLE_ENV, "0"),
        (warm.IDLE_ENV, "soon"),
        (warm.IDLE_ENV, "inf"),
        (warm.REHEARSE_ENV, "-0.1"),
        (warm.REHEARSE_ENV, "later"),
        (warm.REHEARSE_ENV, "nan"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidArgument, match=f"{name}={value!r}"):
        wu.Supervisor(tmp_path / "state", install_signal_handlers=False)


# -- the sizing policy, on an injected clock --------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pool(processes: int, idle: float = 10.0) -> tuple[warm.WarmPool, Clock]:
    clock = Clock()
    return warm.WarmPool(warm.WarmSettings(processes, idle), clock), clock


Fill = Callable[..., list[int]]


@pytest.fixture
def fill() -> Iterator[Fill]:
    """Add spares (no process behind them) until a pool has what it aims at; their pids."""
    made: list[socket.socket] = []

    def add(p: warm.WarmPool, first_pid: int = 1000) -> list[int]:
        pids: list[int] = []
        while p.short():
            pid = first_pid + len(pids)
            ours, theirs = socket.socketpair()
            made.extend((ours, theirs))
            p.add(pid, ours)
            pids.append(pid)
        return pids

    yield add
    for sock in made:
        sock.close()


def test_the_pool_starts_with_one_spare_and_aims_one_past_the_peak_in_flight(fill: Fill) -> None:
    p, _ = pool(3)
    assert fill(p) == [1000]
    p.demand(1)  # one in flight: one spare for the next unit, one being replaced
    assert len(fill(p, 2000)) == 1
    p.demand(9)  # more in flight than the cap
    assert len(fill(p, 3000)) == 1
    assert len(p) == 3
    assert pool(0)[0].short() is False  # 0: never a spare


def test_spares_are_handed_out_newest_first_and_the_oldest_ages_out(fill: Fill) -> None:
    p, clock = pool(2, idle=10.0)
    p.demand(2)
    old, new = fill(p)
    clock.now += 5
    assert p.next_ageing() == 5.0
    taken = p.take()
    assert taken is not None
    assert taken.pid == new
    assert p.aged() == []
    clock.now += 5
    assert [s.pid for s in p.aged()] == [old]
    assert p.next_ageing() is None
    assert p.short() is True  # the aim dropped by one, to the one handed out's
    assert fill(p, 2000) == [2000]
    assert p.short() is False


def test_with_no_demand_every_spare_ages_out_and_none_comes_back(fill: Fill) -> None:
    p, clock = pool(2, idle=1.0)
    p.demand(2)
    fill(p)
    clock.now += 1
    assert len(p.aged()) == 2
    assert not p.short()


def test_a_spare_that_cannot_be_made_stops_the_tries_until_demand_grows(fill: Fill) -> None:
    p, _ = pool(4)
    p.demand(3)
    fill(p)  # four
    p.take()
    p.give_up()
    assert not p.short()
    p.demand(4)
    assert p.short()
    died = p.remove(1000)
    assert died is not None
    assert died.pid == 1000
    assert p.remove(1000) is None
