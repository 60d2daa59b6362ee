"""Remote units on a real local Ray: lifecycle, streaming, cancel and kill, loss, teammates.

One Ray for the whole session (``ray.init(num_cpus=2)``, dashboard off, files
under pytest's tmp dir); each test gets its own supervisor, which finds Ray
initialised and uses it. Ray's workers run on this machine, so a test and a
unit synchronise through FIFOs (``kinds_support``), never through sleeps.
Bodies travel by value (cloudpickle), so workers need not import this module.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import orjson
import pytest

import workunits as wu
from workunits._ray.worker import context as remote_context
from workunits._ray.worker.board import CancelBoard
from workunits._ray.worker.context import RemoteContext, board_named
from workunits._ray.worker.outbox import Outbox

from .conftest import alive
from .kinds_support import Fifo, read_line, supervisor, wait_until, write_line

ray = pytest.importorskip("ray", reason='the remote kind needs Ray: pip install "workunits[ray]"')

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    # Short: Ray's socket paths must fit AF_UNIX's 107 bytes, and pytest's own temp
    # dirs grow with every run (pytest-1029/popen-gw1/... did not fit).
    ray_dir = tempfile.mkdtemp(prefix="wu-ray-")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        configure_logging=False,
        _temp_dir=ray_dir,
    )
    yield
    ray.shutdown()
    shutil.rmtree(ray_dir, ignore_errors=True)


@pytest.fixture
def sup(ray_cluster: None, tmp_path: Path) -> Iterator[wu.Supervisor]:
    with supervisor(tmp_path) as s:
        yield s


@pytest.fixture
def fifos(tmp_path: Path) -> Iterator[tuple[Fifo, Fifo]]:
    """(entered, gate): a unit says it got somewhere; the test lets it go on."""
    entered, gate = Fifo(tmp_path / "entered"), Fifo(tmp_path / "gate")
    yield entered, gate
    entered.close()
    gate.close()


def events(sup: wu.Supervisor, work_id: str) -> list[dict[str, Any]]:
    """The unit's transcript (read from its file: the output offset stays where it is)."""
    path = sup.state_dir / "transcripts" / f"{work_id}.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def of_type(evs: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in evs if e["type"] == type_]


# -- bodies (run in Ray workers) ---------------------------------------------------------


def add(a: int, b: int) -> int:
    print(f"adding {a} and {b}")
    return a + b


def fail_twice(count: str) -> int:
    """Raise TimeoutError on the first two runs (counted in the file ``count``)."""
    runs = Path(count)
    with runs.open("a") as f:
        f.write("x")
    n = len(runs.read_text())
    print(f"run {n}")
    if n < 3:
        raise TimeoutError(f"run {n} timed out")
    return n


def raise_value_error() -> None:
    raise ValueError("bad input 42")


def return_set() -> set[int]:
    return {1, 2}


def try_children() -> list[str]:
    """What needs the supervisor's channel is refused inside a remote unit, saying why."""
    ctx = wu.current()
    refused = []
    for attempt in (
        lambda: ctx.agent(len, "abc"),
        lambda: ctx.shell("true"),
        lambda: ctx.tell("t00000000", "hi"),
        ctx.notifications,
        lambda: ctx.step("one", len, "abc"),
    ):
        try:
            attempt()
        except wu.SpecError as exc:
            refused.append(str(exc))
    return refused


def talk(gate: str) -> list[Any]:
    ctx = wu.current()
    print("first line")
    ctx.progress(0.5, "half way")
    ctx.checkpoint({"step": 1})
    ctx.emit({"note": "hello"})
    read_line(gate)
    print("second line", file=sys.stderr)
    return [ctx.id, ctx.attempt, ctx.kind, ctx.last_checkpoint, ctx.cancelled]


def hang(entered: str) -> None:
    write_line(entered, str(os.getpid()))
    threading.Event().wait()


def until_cancelled(entered: str) -> None:
    ctx = wu.current()
    write_line(entered, "in")
    pause = threading.Event()
    while True:
        ctx.checkpoint({"alive": True})  # raises wu.Cancelled once a cancel is requested
        pause.wait(0.005)


def ignore_cancel(entered: str) -> None:
    write_line(entered, "in")
    while True:
        time.sleep(0.05)  # never looks at wu.current(): only the escalation ends it


class Accumulator:
    def __init__(self, start: int) -> None:
        self.total = start

    def on_receive(self, message: Any) -> Any:
        if message == "fail":
            raise ValueError("asked to fail")
        if message == "where":
            return [wu.current().id, os.getpid()]
        if isinstance(message, tuple):  # ("block", entered, gate): hold the handler
            write_line(message[1], "in")
            return read_line(message[2])
        print(f"adding {message}")
        self.total += message
        return self.total

    def double(self) -> int:
        return self.total * 2

    def on_stop(self) -> str:
        return f"stopped at {self.total}"


# -- lifecycle ------------------------------------------------------------------------------


def test_result_record_transcript_and_one_notice(sup: wu.Supervisor) -> None:
    h = sup.remote(add, 2, 3, description="sum")
    assert h.id.startswith("r")
    assert sup.result(h.id, timeout=30) == 5
    record = sup.get(h.id)
    assert (record.status, record.kind, record.description) == (
        wu.Status.COMPLETED,
        "remote",
        "sum",
    )
    assert (record.result, record.result_format) == (b"5", "json")
    assert b"adding 2 and 3" in record.output_tail
    assert record.output_path is not None
    assert not os.path.lexists(record.output_path)  # the terminal transition removed it
    evs = events(sup, h.id)
    assert [e["type"] for e in evs] == ["start", "stdout", "result", "end"]
    assert [e["seq"] for e in evs] == [1, 2, 3, 4]
    assert evs[1]["data"] == "adding 2 and 3\n"  # one event, though Ray writes print's pieces apart
    notice = sup.notifications().get(timeout=5)
    assert isinstance(notice, wu.Notification)
    assert (notice.id, notice.status) == (h.id, wu.Status.COMPLETED)


def test_a_remote_unit_is_retried_with_its_transcript_running_on(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    policy = wu.Retry(max_attempts=4, initial=0.01, jitter=False, on=(TimeoutError,))
    unit = sup.remote(fail_twice, str(tmp_path / "count"), retry=policy)
    assert sup.result(unit.id, timeout=60) == 3
    record = sup.get(unit.id)
    assert (record.attempt, len(record.attempts)) == (3, 2)
    evs = events(sup, unit.id)
    assert [e["data"] for e in of_type(evs, "stdout")] == ["run 1\n", "run 2\n", "run 3\n"]
    seqs = [e["seq"] for e in evs]
    assert seqs == list(range(1, len(seqs) + 1))  # one transcript, numbered on


def test_a_keyed_remote_unit_is_submitted_once(sup: wu.Supervisor) -> None:
    first = sup.remote(add, 2, 3, key="sum-2-3")
    again = sup.remote(add, 2, 3, key="sum-2-3")  # a reconnecting caller: no second task
    assert again.id == first.id
    assert sup.result(first.id, timeout=30) == 5
    assert [r.id for r in sup.list(kind="remote")] == [first.id]
    with pytest.raises(wu.IdempotencyConflict):
        sup.remote(add, 2, 4, key="sum-2-3")


def test_a_keyed_remote_async_unit_is_submitted_once(sup: wu.Supervisor) -> None:
    async def twice() -> tuple[str, str, object]:
        first = await sup.remote_async(add, 1, 1, key="one-and-one")
        again = await sup.remote_async(add, 1, 1, key="one-and-one")
        return first.id, again.id, await sup.result_async(first.id, timeout=30)

    first, again, result = asyncio.run(twice())
    assert (again, result) == (first, 2)


def leave_children() -> list[int]:
    """Start a plain child and one in a session of its own; return their pids."""
    sleep = shutil.which("sleep") or "/bin/sleep"
    plain = subprocess.Popen([sleep, "301"])
    own_session = subprocess.Popen([sleep, "302"], start_new_session=True)
    return [plain.pid, own_session.pid]


def test_the_processes_a_remote_unit_started_end_with_it(sup: wu.Supervisor) -> None:
    """Ray reuses its workers: they ran on beside later tasks until Ray stopped."""
    pids = sup.result(sup.remote(leave_children).id, timeout=60)
    for pid in pids:
        wait_until(lambda p=pid: not alive(p), what=f"process {pid} to end")  # type: ignore[misc]


def test_pickled_result_and_remote_failure(sup: wu.Supervisor) -> None:
    assert sup.result(sup.remote(return_set).id, timeout=30) == {1, 2}
    h = sup.remote(raise_value_error)
    with pytest.raises(wu.WorkFailed) as failed:
        sup.result(h.id, timeout=30)
    cause = failed.value.__cause__
    assert isinstance(cause, ValueError)
    assert str(cause) == "bad input 42"
    error = sup.get(h.id).error or ""
    assert error.startswith("ValueError: bad input 42")
    assert "Traceback" in error  # the remote traceback...
    assert "raise_value_error" in error  # ...down to the body's own frame
    assert of_type(events(sup, h.id), "error")[0]["error_type"] == "ValueError"


def test_what_needs_the_channel_is_refused_inside(sup: wu.Supervisor) -> None:
    h = sup.remote(try_children)
    refused = sup.result(h.id, timeout=30)
    assert len(refused) == 5
    assert all("is a remote unit" in text for text in refused)
    assert [r.id for r in sup.list()] == [h.id]  # no child was registered


def test_bad_specs_register_nothing(sup: wu.Supervisor) -> None:
    with pytest.raises(wu.SpecError):
        sup.remote(42)  # type: ignore[arg-type]
    with pytest.raises(wu.SpecError, match="cannot pickle"):
        sup.remote(len, threading.Lock())
    with pytest.raises(wu.SpecError, match="resource"):
        sup.remote(len, "abc", resources={"CPU": -1})
    assert sup.list() == []


# -- what streams back while the unit runs -----------------------------------------------------


def test_output_progress_checkpoint_and_events_stream_while_running(
    sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]
) -> None:
    _, gate = fifos
    h = sup.remote(talk, gate.path)
    wait_until(lambda: sup.get(h.id).progress == 0.5, timeout=30, what="progress")
    assert sup.get(h.id).progress_message == "half way"
    seen = bytearray()

    def streamed(*needles: bytes) -> bool:
        seen.extend(sup.read_output(h.id))
        return all(needle in seen for needle in needles)

    wait_until(
        lambda: streamed(b'"first line\\n"', b'"state":{"step":1}', b'"data":{"note":"hello"}'),
        what="output, checkpoint and event in the transcript while the unit runs",
    )
    assert sup.get(h.id).status == wu.Status.RUNNING
    gate.send()
    assert sup.result(h.id, timeout=30) == [h.id, 1, "remote", {"step": 1}, False]
    for chunk in sup.stream(h.id):  # the rest, exactly once
        seen.extend(chunk)
    lines = [orjson.loads(line) for line in bytes(seen).splitlines()]
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    assert of_type(lines, "stderr") == [{**of_type(lines, "stderr")[0], "data": "second line\n"}]
    assert lines[-1]["type"] == "end"


# -- ending early ------------------------------------------------------------------------------


def test_kill_force_cancels_the_task(sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]) -> None:
    entered, _ = fifos
    h = sup.remote(hang, entered.path)
    pid = int(entered.wait(timeout=30))
    start = time.perf_counter()
    assert sup.kill(h.id) is True
    record = sup.wait(h.id, timeout=30)
    latency = time.perf_counter() - start
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)
    assert sup.kill(h.id) is False  # a second kill is a safe no-op
    wait_until(lambda: not alive(pid), what="the worker to be gone")
    print(f"remote kill -> terminal record: {latency * 1000:.1f} ms")
    assert latency < 10  # measured, not a target: Ray's force cancel takes milliseconds


def test_kill_before_ray_schedules_the_task(sup: wu.Supervisor) -> None:
    h = sup.remote(len, "abc", resources={"no-such-resource": 1})  # infeasible: never scheduled
    assert sup.kill(h.id) is True
    record = sup.wait(h.id, timeout=30)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)


def test_cancel_is_cooperative_first(sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]) -> None:
    entered, _ = fifos
    h = sup.remote(until_cancelled, entered.path)
    entered.wait(timeout=30)
    assert sup.cancel(h.id, grace=60) is True
    record = sup.wait(h.id, timeout=30)  # well inside the grace: the unit stopped itself
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)
    assert of_type(events(sup, h.id), "error")[0]["error_type"] == "Cancelled"


def test_a_unit_whose_cancel_board_is_gone_sees_no_cancel_and_runs_on(ray_cluster: None) -> None:
    # A task is given its board's name; a name no actor holds (its supervisor
    # closed) leaves the unit running, with only the forced end to stop it.
    gone = "workunits-cancel-board-of-no-one"
    assert board_named(gone) is None
    ctx = RemoteContext(
        work_id="r12345678",
        kind="remote",
        attempt=1,
        last_checkpoint=None,
        outbox=Outbox(),
        board=gone,
        board_key="r12345678.1",
    )
    assert ctx.cancelled is False
    ctx.progress(0.5)  # looks at the board again: no error, no cancel
    assert ctx.cancelled is False


def test_a_worker_keeps_the_boards_it_looked_up_and_drops_the_oldest(
    ray_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_context, "_boards", {})
    monkeypatch.setattr(remote_context, "_MAX_BOARDS", 1)
    names = [f"workunits-cancel-board-test-{n}-{os.getpid()}" for n in range(2)]
    boards = [ray.remote(CancelBoard).options(name=n, num_cpus=0).remote() for n in names]
    try:
        first = board_named(names[0])
        assert first is not None
        assert board_named(names[0]) is first  # kept: looked up once
        assert board_named(names[1]) is not None
        assert list(remote_context._boards) == [names[1]]  # the oldest went
    finally:
        for board in boards:
            ray.kill(board)


def test_cancel_escalates_to_a_kill_after_the_grace(
    sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]
) -> None:
    entered, _ = fifos
    h = sup.remote(ignore_cancel, entered.path)
    entered.wait(timeout=30)
    assert sup.cancel(h.id, grace=0.2) is True
    record = sup.wait(h.id, timeout=30)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)
    assert of_type(events(sup, h.id), "error") == []  # ended from outside, not by Cancelled


def test_worker_killed_from_outside_is_lost(sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]) -> None:
    entered, _ = fifos
    h = sup.remote(hang, entered.path)
    pid = int(entered.wait(timeout=30))
    # The start event says where the unit runs (it may come just after the FIFO line).
    wait_until(lambda: bool(of_type(events(sup, h.id), "start")), what="the start event")
    assert of_type(events(sup, h.id), "start")[0]["pid"] == pid
    os.kill(pid, signal.SIGKILL)
    record = sup.wait(h.id, timeout=30)
    assert (record.status, record.reason) == (wu.Status.FAILED, wu.Reason.LOST)
    assert "WorkerCrashedError" in (record.error or "")


def test_close_kills_running_remote_work_and_leaves_no_threads(
    ray_cluster: None, tmp_path: Path
) -> None:
    before = set(threading.enumerate())
    entered = Fifo(tmp_path / "entered")
    with supervisor(tmp_path) as s:
        assert s.result(s.remote(len, "abc").id, timeout=30) == 3  # leaves an idle follower
        s.remote(hang, entered.path)
        pid = int(entered.wait(timeout=30))
    wait_until(lambda: not alive(pid), what="the worker of a unit running at close")
    entered.close()
    ours = [t for t in set(threading.enumerate()) - before if t.name.startswith("workunits")]
    for thread in ours:
        thread.join(10)
    assert [t.name for t in ours if t.is_alive()] == []


# -- remote teammates ------------------------------------------------------------------------------


def test_remote_teammate_tell_ask_proxy_stop(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator, 10, remote=True)
    assert t.id.startswith("t")  # a teammate, wherever it runs
    assert sup.get(t.id).kind == "teammate"
    t.tell(5)  # may arrive while the Ray actor is still being created: held, then sent in order
    assert t.ask(1, timeout=30) == 16
    assert t.proxy().double().result(timeout=30) == 32
    where = t.ask("where", timeout=30)
    assert where[0] == t.id  # wu.current() in a handler
    assert where[1] != os.getpid()
    with pytest.raises(ValueError, match="asked to fail") as raised:
        t.ask("fail", timeout=30)
    assert any("teammate's process" in note for note in getattr(raised.value, "__notes__", []))
    assert t.stop(timeout=30) == "stopped at 16"
    record = sup.get(t.id)
    assert record.status == wu.Status.COMPLETED
    with pytest.raises(wu.TeammateEnded):
        t.tell(1)
    assert b"adding 5" in record.output_tail


def test_remote_teammate_kill_fails_open_asks(sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]) -> None:
    entered, gate = fifos
    t = sup.teammate(Accumulator, 0, remote=True)
    pid = t.ask("where", timeout=30)[1]
    stuck = t.ask_future(("block", entered.path, gate.path))
    entered.wait(timeout=30)  # the handler is busy with it: the ask stays open
    assert sup.kill(t.id) is True
    with pytest.raises(wu.TeammateEnded):
        stuck.result(timeout=30)
    record = sup.wait(t.id, timeout=30)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)
    wait_until(lambda: not alive(pid), what="the teammate's worker to be gone")


def test_remote_teammate_whose_actor_dies_is_lost(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator, 0, remote=True)
    pid = t.ask("where", timeout=30)[1]
    os.kill(pid, signal.SIGKILL)
    record = sup.wait(t.id, timeout=30)
    assert (record.status, record.reason) == (wu.Status.FAILED, wu.Reason.LOST)
    with pytest.raises(wu.TeammateEnded):
        t.ask(1, timeout=30)


# -- a local Ray started on demand ------------------------------------------------------------


def test_local_ray_is_started_on_demand_and_shut_down_at_close(tmp_path: Path) -> None:
    """In a fresh process: the default ``ray_address=None`` path, from start to shutdown.

    The second unit runs after the first unit's actor thread has ended: Ray's
    processes die with the thread that started them, which must not be a unit's.
    """
    ray_dir = Path(tempfile.mkdtemp(prefix="wu-t-"))  # short: Ray's socket paths must fit
    script = f"""
import os, sys
import workunits as wu
with wu.Supervisor({str(tmp_path / "state")!r}, install_signal_handlers=False,
                   ray_temp_dir={str(ray_dir)!r}) as sup:
    assert "ray" not in sys.modules
    first = sup.remote(os.getpid)
    print(sup.result(first.id, timeout=120))
    sup.wait(first.id)
    print(sup.result(sup.remote(os.getpid).id, timeout=60))
import ray
assert not ray.is_initialized(), "close() left the Ray it started running"
"""
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        pids = [int(line) for line in done.stdout.split()]
        assert len(pids) == 2
        assert any((ray_dir).glob("session_*")), "Ray's files are not under ray_temp_dir"
        assert "SIGTERM handler" not in done.stderr
        wait_until(lambda: not ray_processes(ray_dir), what="Ray's processes to exit")
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


def ray_processes(ray_dir: Path) -> list[int]:
    """Live processes whose command line names ``ray_dir`` (GCS, raylet, workers...)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if str(ray_dir).encode() in cmdline and alive(int(entry)):
                found.append(int(entry))
    return found
