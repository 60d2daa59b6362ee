"""Agent units: results, every failure cause, cancel and kill, transcripts, hierarchies."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import struct
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pykka
import pytest

import workunits as wu
from workunits._sandbox.probe import Machine
from workunits._util import framing
from workunits.actors.agent import AgentActor

from .conftest import alive, eventually, running_pid

# -- bodies run in unit processes (module-level so they pickle by reference) ---


def add(a: int, b: int) -> int:
    print(f"adding {a} and {b}")
    return a + b


def raise_value_error() -> None:
    raise ValueError("bad input 42")


class Unpicklable(Exception):
    def __reduce__(self) -> Any:
        raise TypeError("no")


def raise_unpicklable() -> None:
    raise Unpicklable("cannot travel")


class RebuildFails:
    """Pickles, but unpickling it raises: its rebuild runs code that fails."""

    def __reduce__(self) -> Any:
        return (_fail_to_rebuild, ())


def _fail_to_rebuild() -> None:
    raise RuntimeError("cannot rebuild here")


def return_rebuild_fails() -> RebuildFails:
    return RebuildFails()


def exit_with(code: int) -> None:
    sys.exit(code)


def hard_exit(code: int) -> None:
    os._exit(code)


def segfault() -> None:
    ctypes.string_at(0)


def allocate(nbytes: int) -> int:
    return len(bytearray(nbytes))


def return_lock() -> object:
    return threading.Lock()


def sleep_forever() -> None:
    wu.current().progress(0.0, "sleeping")
    while True:
        time.sleep(1)


def checkpoint_loop() -> None:
    ctx = wu.current()
    i = 0
    while True:
        i += 1
        ctx.checkpoint({"i": i})
        time.sleep(0.005)


def checkpoint_tuple() -> None:
    wu.current().checkpoint({"pair": (1, 2)})


def talkative() -> str:
    ctx = wu.current()
    print("to stdout")
    print("to stderr", file=sys.stderr)
    ctx.progress(0.5, "half")
    ctx.checkpoint({"step": 1})
    ctx.emit({"custom": True})
    return "done"


def emits_what_json_cannot_hold() -> str:
    ctx = wu.current()
    ctx.emit({1: "an int key"})  # type: ignore[dict-item]
    ctx.emit({"big": 1 << 70})
    ctx.emit({"path": os.fsdecode(b"report-\xff.csv")})
    return "emitted"


def parent_with_children() -> list[Any]:
    ctx = wu.current()
    good = ctx.agent(add, 2, 3)
    bad = ctx.agent(raise_value_error)
    sh = ctx.shell("echo from-child-shell")
    out: list[Any] = [good.result(timeout=30)]
    with pytest.raises(wu.WorkFailed):
        bad.result(timeout=30)
    out.append(sh.wait(timeout=30).output_tail.decode())
    inbox = ctx.notifications()
    out.append(sorted(inbox.get(timeout=5).id for _ in range(3)))
    out.append(sorted([good.id, bad.id, sh.id]))
    return out


def parent_then_hang() -> None:
    ctx = wu.current()
    ctx.agent(sleep_forever)
    ctx.shell("sleep 600")
    ctx.progress(1.0, "children started")
    while True:
        time.sleep(1)


# -- results and failures -----------------------------------------------------


@pytest.mark.timeout(30)
def test_result_is_the_return_value(sup: wu.Supervisor) -> None:
    h = sup.agent(add, 2, 3)
    assert sup.result(h.id, timeout=20) == 5
    record = sup.get(h.id)
    assert record.status == wu.Status.COMPLETED
    assert record.kind == "agent"
    assert h.id.startswith("a")


@pytest.mark.timeout(30)
def test_pickled_result_for_non_json_values(sup: wu.Supervisor) -> None:
    h = sup.agent(tuple, [1, 2])
    assert sup.result(h.id, timeout=20) == (1, 2)
    assert sup.get(h.id).result_format == "pickle"


@pytest.mark.timeout(30)
def test_a_result_that_pickles_but_does_not_unpickle_is_unloadable_not_its_own_error(
    sup: wu.Supervisor,
) -> None:
    """The unit completed: its value's own exception would read as the unit's failure.
    Every reader says the value cannot be loaded here, and why."""
    h = sup.agent(return_rebuild_fails)
    assert sup.wait(h.id, timeout=20).status == wu.Status.COMPLETED
    with pytest.raises(wu.UnloadableValue) as from_supervisor:
        sup.result(h.id, timeout=20)
    with wu.connect(sup.state_dir) as client, pytest.raises(wu.UnloadableValue) as from_client:
        client.result(h.id)
    for info in (from_supervisor, from_client):
        message = str(info.value)
        assert f"unit {h.id}: its result cannot be loaded in this process" in message
        assert "RuntimeError: cannot rebuild here" in message
        assert info.value.name == f"{__name__}._fail_to_rebuild"
        assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.timeout(30)
def test_exception_fails_with_type_message_traceback_and_cause(sup: wu.Supervisor) -> None:
    h = sup.agent(raise_value_error)
    with pytest.raises(wu.WorkFailed) as info:
        sup.result(h.id, timeout=20)
    record = info.value.record
    assert record.status == wu.Status.FAILED
    assert record.error is not None
    assert record.error.startswith("ValueError: bad input 42")
    assert "raise_value_error" in record.error  # the traceback from the unit process
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "bad input 42"


@pytest.mark.timeout(30)
def test_unpicklable_exception_still_reports_its_text(sup: wu.Supervisor) -> None:
    h = sup.agent(raise_unpicklable)
    with pytest.raises(wu.WorkFailed) as info:
        sup.result(h.id, timeout=20)
    assert info.value.__cause__ is None
    assert "Unpicklable: cannot travel" in (info.value.record.error or "")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("body", "args", "exit_code", "signum"),
    [
        (exit_with, (3,), 3, None),
        (hard_exit, (4,), 4, None),
        (segfault, (), None, signal.SIGSEGV),
    ],
)
def test_process_deaths_are_failed_with_their_cause(
    sup: wu.Supervisor, body: Any, args: tuple[Any, ...], exit_code: int | None, signum: int | None
) -> None:
    record = sup.wait(sup.agent(body, *args).id, timeout=20)
    assert record.status == wu.Status.FAILED
    assert record.exit_code == exit_code
    assert record.signal == signum
    assert record.error


@pytest.mark.timeout(30)
def test_sys_exit_zero_completes_with_none(sup: wu.Supervisor) -> None:
    assert sup.result(sup.agent(exit_with, 0).id, timeout=20) is None


@pytest.mark.timeout(30)
def test_sigkill_from_outside_is_failed_with_signal(sup: wu.Supervisor) -> None:
    h = sup.agent(sleep_forever)
    os.kill(running_pid(sup, h.id), signal.SIGKILL)
    record = sup.wait(h.id, timeout=20)
    assert record.status == wu.Status.FAILED
    assert record.signal == signal.SIGKILL
    assert record.reason is None


@pytest.mark.timeout(30)
def test_memory_limit_ends_the_unit_naming_it(sup: wu.Supervisor) -> None:
    """``memory_limit=`` is ``Sandbox(memory=)``: a memory cgroup kills the unit where
    this user may make one, else RLIMIT_AS makes its allocation raise MemoryError."""
    h = sup.agent(allocate, 1 << 30, memory_limit=256 << 20)
    record = sup.wait(h.id, timeout=20)
    assert record.reason == wu.Reason.MEMORY_LIMIT
    assert record.sandbox == wu.Sandbox(memory=256 << 20)
    if Machine.probe().cgroup_memory:
        assert record.status == wu.Status.KILLED
        assert record.signal == signal.SIGKILL
    else:
        assert record.status == wu.Status.FAILED
        assert "MemoryError" in (record.error or "")


@pytest.mark.timeout(30)
def test_unpicklable_result_fails_saying_so(sup: wu.Supervisor) -> None:
    record = sup.wait(sup.agent(return_lock).id, timeout=20)
    assert record.status == wu.Status.FAILED
    assert "cannot be pickled" in (record.error or "")


def return_past_the_frame_limit(as_json: bool) -> object:
    """Lower the channel's frame limit in this unit's process only, then return more."""
    framing.MAX_FRAME = 1 << 16
    return "x" * (1 << 17) if as_json else b"x" * (1 << 17)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "pickle"])
def test_a_result_too_large_for_the_channel_fails_naming_its_size(
    sup: wu.Supervisor, as_json: bool
) -> None:
    """Before, a result past the limit reached the supervisor as bytes that are not a frame."""
    record = sup.wait(sup.agent(return_past_the_frame_limit, as_json).id, timeout=20)
    assert record.status == wu.Status.FAILED
    assert (record.error or "").startswith("ResultTooLarge: the return value (")
    assert "bytes encoded, more than the 65536 bytes" in (record.error or "")
    assert "write it to a file" in (record.error or "")


@pytest.mark.timeout(30)
def test_non_json_checkpoint_is_refused_in_the_unit(sup: wu.Supervisor) -> None:
    record = sup.wait(sup.agent(checkpoint_tuple).id, timeout=20)
    assert record.status == wu.Status.FAILED
    assert "is a tuple" in (record.error or "")


@pytest.mark.timeout(30)
def test_unpicklable_callable_or_argument_is_a_spec_error_and_registers_nothing(
    sup: wu.Supervisor,
) -> None:
    lock = threading.Lock()
    with pytest.raises(wu.SpecError, match="cannot pickle"):
        sup.agent(add, lock, 1)
    with pytest.raises(wu.SpecError, match="callable"):
        sup.agent(42)  # type: ignore[arg-type]
    assert sup.list() == []


def write_on_every_socket(junk: bytes) -> None:
    """In a unit: write ``junk`` on each socket this process holds (its channel)."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                os.write(int(name), junk)


def write_junk_and_wait(junk: bytes) -> str:
    write_on_every_socket(junk)
    threading.Event().wait()  # until it is killed
    return "never returned"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "junk",
    [b"\x00\x00\x00\x10" + b"not a pickle, no", b"\xff\xff\xff\xff" + b"too long"],
    ids=["not-a-pickle", "too-long"],
)
def test_a_unit_that_writes_on_its_channel_fails_saying_so(sup: wu.Supervisor, junk: bytes) -> None:
    # Its channel can carry nothing readable after the junk, its result included:
    # it used to run on and end "completed" with None.
    other = sup.agent(sleep_forever)
    record = sup.wait(sup.agent(write_junk_and_wait, junk).id, timeout=20)
    assert (record.status, record.signal) == (wu.Status.FAILED, signal.SIGKILL)
    assert "BrokenChannel: the unit's channel to the supervisor carried bytes" in (
        record.error or ""
    )
    assert sup.get(other.id).status is wu.Status.RUNNING
    assert sup.result(sup.agent(add, 1, 1).id, timeout=20) == 2


def begin_a_frame_and_return(value: str) -> str:
    """Junk that claims a longer frame: the result's own frame is taken into it."""
    write_on_every_socket(struct.pack(">I", 1 << 20) + b"junk")
    return value


@pytest.mark.timeout(30)
def test_a_unit_whose_channel_ends_inside_a_frame_fails_saying_so(sup: wu.Supervisor) -> None:
    record = sup.wait(sup.agent(begin_a_frame_and_return, "lost").id, timeout=20)
    assert (record.status, record.exit_code) == (wu.Status.FAILED, 0)
    assert "BrokenChannel: the unit's channel to the supervisor carried bytes" in (
        record.error or ""
    )
    assert "bytes into a frame" in (record.error or "")


def return_then_tear_a_frame(value: str) -> str:
    """Its result goes out whole; then a frame is begun and cut off by the exit (as a
    thread's progress would be)."""
    ctx = wu.current()
    send = ctx.send

    def send_then_tear(message: Any) -> None:
        send(message)
        if type(message).__name__ == "Result":
            write_on_every_socket(struct.pack(">I", 1 << 20) + b"cut by the exit")

    ctx.send = send_then_tear  # type: ignore[method-assign]
    return value


@pytest.mark.timeout(30)
def test_a_whole_result_wins_over_a_torn_frame_after_it(sup: wu.Supervisor) -> None:
    record = sup.wait(sup.agent(return_then_tear_a_frame, "kept").id, timeout=20)
    assert (record.status, record.exit_code, record.error) == (wu.Status.COMPLETED, 0, None)
    assert sup.result(record.id, timeout=20) == "kept"


@pytest.mark.timeout(30)
def test_the_supervisor_keeps_serving_after_crashes(sup: wu.Supervisor) -> None:
    for body in (segfault, raise_value_error):
        sup.wait(sup.agent(body).id, timeout=20)
    assert sup.result(sup.agent(add, 1, 1).id, timeout=20) == 2


# -- cancel, kill, timeout --------------------------------------------------------


@pytest.mark.timeout(30)
def test_cancel_is_cooperative_at_the_next_checkpoint(sup: wu.Supervisor) -> None:
    h = sup.agent(checkpoint_loop)
    running_pid(sup, h.id)
    assert sup.cancel(h.id, grace=30) is True
    record = sup.wait(h.id, timeout=20)  # long before the 30 s grace
    assert record.status == wu.Status.KILLED
    assert record.reason == wu.Reason.CANCELLED
    assert record.signal is None  # it stopped by itself, no SIGKILL was needed


@pytest.mark.timeout(30)
def test_cancel_escalates_to_sigkill_after_the_grace(sup: wu.Supervisor) -> None:
    h = sup.agent(sleep_forever)  # never reaches a checkpoint after its first progress
    eventually(lambda: sup.get(h.id).progress is not None, what="the unit to report progress")
    sup.cancel(h.id, grace=0.2)
    record = sup.wait(h.id, timeout=20)
    assert record.status == wu.Status.KILLED
    assert record.reason == wu.Reason.CANCELLED
    assert record.signal == signal.SIGKILL


@pytest.mark.timeout(30)
def test_kill_and_timeout(sup: wu.Supervisor) -> None:
    h = sup.agent(sleep_forever)
    pid = running_pid(sup, h.id)
    assert sup.kill(h.id) is True
    record = sup.wait(h.id, timeout=20)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)
    assert not alive(pid)
    assert sup.kill(h.id) is False
    t = sup.agent(sleep_forever, timeout=0.3)
    record = sup.wait(t.id, timeout=20)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.TIMEOUT)
    with pytest.raises(wu.WorkKilled):
        sup.result(t.id)


# -- transcripts --------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["kill", "cancel"])
def test_a_killed_agents_transcript_ends_with_its_end_before_anyone_sees_it(
    sup: wu.Supervisor, tmp_path: Path, how: str
) -> None:
    # A unit we signalled ends on the Reaper's thread, not after its actor's
    # drain; its transcript still gets the end event first, and only once.
    h = sup.agent(sleep_forever)
    running_pid(sup, h.id)
    if how == "kill":
        assert sup.kill(h.id)
    else:
        assert sup.cancel(h.id, grace=0.0)
    record = sup.wait(h.id, timeout=20)
    assert record.status == wu.Status.KILLED
    transcript = tmp_path / "state" / "transcripts" / f"{h.id}.jsonl"
    events = [orjson.loads(line) for line in transcript.read_bytes().splitlines()]
    ends = [e for e in events if e["type"] == "end"]
    assert ends == [events[-1]]
    reason = "killed" if how == "kill" else "cancelled"
    assert (ends[0]["status"], ends[0]["reason"]) == ("killed", reason)
    assert record.output_tail.splitlines()[-1] == transcript.read_bytes().splitlines()[-1]
    # Its actor drained the channel after the end was reported, and wrote no second end.
    eventually(lambda: not pykka.ActorRegistry.get_by_class(AgentActor), what="the actor to stop")
    types = [orjson.loads(line)["type"] for line in transcript.read_bytes().splitlines()]
    assert types.count("end") == 1


@pytest.mark.timeout(30)
@pytest.mark.timeout(30)
def test_an_event_json_cannot_hold_is_written_as_text_not_a_failure(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    """orjson refused each of these with a TypeError that failed the unit."""
    h = sup.agent(emits_what_json_cannot_hold)
    assert h.result(timeout=20) == "emitted"
    transcript = tmp_path / "state" / "transcripts" / f"{h.id}.jsonl"
    events = [orjson.loads(line) for line in transcript.read_bytes().splitlines()]
    assert [e["data"] for e in events if e["type"] == "event"] == [
        {"1": "an int key"},
        {"big": str(1 << 70)},
        {"path": "report-\\udcff.csv"},
    ]


def test_transcript_events_and_output_as_its_second_name(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    h = sup.agent(talkative)
    output = tmp_path / "state" / "output" / f"{h.id}.out"
    transcript = tmp_path / "state" / "transcripts" / f"{h.id}.jsonl"
    eventually(output.exists, what="the output file")
    # One file, two names: no inode of its own for the output.
    assert not output.is_symlink()
    assert output.samefile(transcript)
    assert sup.result(h.id, timeout=20) == "done"
    assert not output.exists()
    assert not output.is_symlink()
    assert transcript.stat().st_nlink == 1
    assert transcript.stat().st_mode & 0o777 == 0o600
    events = [orjson.loads(line) for line in transcript.read_bytes().splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[0] == "start"
    assert events[0]["sandbox"]["policy"] == {}  # what it runs under: the default protection
    assert types[-1] == "end"
    assert {"stdout", "stderr", "progress", "checkpoint", "event", "result"} <= set(types)
    assert any(e["type"] == "stdout" and "to stdout" in e["data"] for e in events)
    assert events[-1]["status"] == "completed"
    assert sup.get(h.id).output_tail == transcript.read_bytes()


# -- hierarchies ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_children_notify_their_parent_process(sup: wu.Supervisor) -> None:
    h = sup.agent(parent_with_children)
    value, tail, notified, started = sup.result(h.id, timeout=40)
    assert value == 5
    assert tail == "from-child-shell\n"
    assert notified == started  # one notice per child, to the parent's own mailbox
    children = sup.list(parent=h.id)
    assert sorted(c.id for c in children) == started
    assert all(c.parent == h.id for c in children)
    # the application's mailbox holds only the top-level unit's notice
    inbox = sup.notifications()
    assert inbox.get(timeout=5).id == h.id
    with pytest.raises(TimeoutError):
        inbox.get(timeout=0.05)


@pytest.mark.timeout(60)
def test_killing_a_parent_kills_its_descendants(sup: wu.Supervisor) -> None:
    h = sup.agent(parent_then_hang)
    eventually(lambda: sup.get(h.id).progress == 1.0, what="children to start")
    children = sup.list(parent=h.id)
    pids = [running_pid(sup, c.id) for c in children]
    sup.kill(h.id)
    for child in children:
        record = sup.wait(child.id, timeout=20)
        assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.PARENT_ENDED)
    for pid in pids:
        eventually(lambda p=pid: not alive(p), what=f"pid {pid} to die")  # type: ignore[misc]
    assert "parent_then_hang" in sup.tree(h.id)


# -- the zygote ------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_zygote_death_loses_running_units_and_a_new_one_takes_over(sup: wu.Supervisor) -> None:
    agent = sup.agent(sleep_forever)
    shell = sup.shell("sleep 600")
    pids = [running_pid(sup, agent.id), running_pid(sup, shell.id)]
    zygote = sup._machinery.zygote.pid
    assert zygote is not None
    os.kill(zygote, signal.SIGKILL)
    for unit in (agent, shell):
        record = sup.wait(unit.id, timeout=20)
        assert (record.status, record.reason) == (wu.Status.FAILED, wu.Reason.LOST)
    for pid in pids:  # the shell has no parent-death signal: its actor killed it via pidfd
        eventually(lambda p=pid: not alive(p), what=f"pid {pid} to die")  # type: ignore[misc]
    assert sup.result(sup.agent(add, 20, 22).id, timeout=30) == 42
    assert sup._machinery.zygote.pid not in (None, zygote)


def split_character() -> None:
    # "é" is two bytes in UTF-8. The second is written only once the capture has
    # read the first (the pipe behind fd 1 holds nothing unread), so the two
    # certainly arrive in separate reads.
    os.write(1, "é".encode()[:1])
    drained, deadline = threading.Event(), time.monotonic() + 10
    while _unread(1) and time.monotonic() < deadline:
        drained.wait(0.001)
    os.write(1, "é".encode()[1:] + b"\n")


def _unread(fd: int) -> int:
    """Bytes written to the pipe behind ``fd`` and not read yet (FIONREAD)."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


@pytest.mark.timeout(30)
def test_a_character_split_across_writes_reaches_the_transcript_whole(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    h = sup.agent(split_character)
    sup.result(h.id, timeout=20)
    transcript = tmp_path / "state" / "transcripts" / f"{h.id}.jsonl"
    events = [orjson.loads(line) for line in transcript.read_bytes().splitlines()]
    assert "".join(e["data"] for e in events if e["type"] == "stdout") == "é\n"


def flood(chunk: int) -> None:
    # 8 MiB at full speed, far past the test's cap, then wait to be killed.
    line = "x" * (chunk - 1) + "\n"
    for _ in range(8 * 1024 * 1024 // chunk):
        sys.stdout.write(line)
    sys.stdout.flush()
    threading.Event().wait()


@pytest.mark.timeout(30)
def test_an_agent_past_its_output_cap_is_killed_with_that_reason(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    cap = 256 * 1024
    h = sup.agent(flood, 16 * 1024, output_cap=cap)
    record = sup.wait(h.id, timeout=20)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.OUTPUT_CAP)
    transcript = tmp_path / "state" / "transcripts" / f"{h.id}.jsonl"
    # The capture stops at the cap; the actor appends one `end` line.
    assert transcript.stat().st_size <= cap + 64 * 1024


def test_an_agent_output_cap_must_be_a_positive_int(sup: wu.Supervisor) -> None:
    bads: list[Any] = [0, -1, 1.5, True]
    for bad in bads:
        with pytest.raises(wu.SpecError, match="output_cap must be a positive int"):
            sup.agent(flood, 1, output_cap=bad)
