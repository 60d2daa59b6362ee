"""Pooled units (``agent(..., reuse=True)``): long-lived workers, one unit at a time.

Everything here runs in real worker processes forked by the zygote: reuse is
shown by the pid a unit reports, a kill and a crash by the worker's death and
its replacement, and each unit keeps its own record, transcript and one notice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import orjson
import pytest

import workunits as wu
from workunits._core.record import Notification
from workunits.actors import AgentActor, AgentSpec, Limits, PooledAgentActor

from .conftest import alive, eventually

WAIT = 20.0

# -- bodies run in workers (module-level so they pickle by reference) ------------


def whoami(text: str) -> int:
    print(text)
    return os.getpid()


def wait_for(path: str) -> int:
    """Block until ``path`` exists (the test's gate), bounded so nothing hangs forever."""
    deadline = time.monotonic() + WAIT
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)
    return os.getpid()


def touch(path: str) -> str:
    with open(path, "w") as f:
        f.write("ran")
    return "ran"


def leave_processes() -> list[int]:
    """Start a plain child, one in a session of its own and a double-forked one; return."""
    import shutil  # noqa: PLC0415 - in the worker
    import subprocess  # noqa: PLC0415

    sleep = shutil.which("sleep") or "/bin/sleep"
    plain = subprocess.Popen([sleep, "301"])
    own_session = subprocess.Popen([sleep, "302"], start_new_session=True)
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:  # pragma: no cover - the middle process: orphans its child at once
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            os.execv(sleep, [sleep, "303"])  # noqa: S606 - a fixed argv, no shell wanted
        os.write(write, str(grandchild).encode())
        os._exit(0)
    os.waitpid(middle, 0)
    os.close(write)
    orphan = int(os.read(read, 32))
    os.close(read)
    return [plain.pid, own_session.pid, orphan]


def hard_exit() -> None:
    os._exit(7)


def raise_error() -> None:
    raise ValueError("pooled failure")


def mess_up(where: str) -> None:
    os.chdir(where)
    os.environ["WU_POOLED_LEFTOVER"] = "1"  # added
    os.environ.pop("PATH", None)  # removed
    os.environ["HOME"] = "/nowhere"  # changed
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def surroundings() -> tuple[str, str | None, str | None, str | None, str]:
    return (
        os.getcwd(),
        os.environ.get("WU_POOLED_LEFTOVER"),
        os.environ.get("PATH"),
        os.environ.get("HOME"),
        str(signal.getsignal(signal.SIGTERM)),
    )


def checkpoints_until_cancelled() -> None:
    ctx = wu.current()
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        ctx.checkpoint({"at": time.monotonic()})
        time.sleep(0.01)


@pytest.fixture
def psup(state_dir: Path) -> Iterator[wu.Supervisor]:
    with wu.Supervisor(state_dir, install_signal_handlers=False, pool_size=1) as supervisor:
        yield supervisor


def test_a_pooled_unit_runs_returns_and_keeps_its_output_and_one_notice(
    psup: wu.Supervisor,
) -> None:
    mailbox = psup.notifications()
    h = psup.agent(whoami, "hello from a worker", reuse=True)
    assert h.id.startswith("a")
    record = psup.wait(h.id, timeout=WAIT)
    assert (record.status, record.kind) == (wu.Status.COMPLETED, "agent")
    assert psup.result(h.id) == record.pid
    events = [orjson.loads(line) for line in record.output_tail.splitlines()]
    types = [e["type"] for e in events]
    assert types == ["start", "stdout", "result", "end"]
    assert events[1]["data"] == "hello from a worker\n"
    notice = mailbox.get(timeout=WAIT)
    assert isinstance(notice, Notification)
    assert (notice.id, notice.status) == (h.id, wu.Status.COMPLETED)
    with pytest.raises(TimeoutError):
        mailbox.get(timeout=0)


def test_a_worker_sets_up_the_next_units_capture_before_it_comes_and_keeps_units_apart(
    psup: wu.Supervisor,
) -> None:
    # The capture (pipes on fds 1 and 2, a pump thread) is made while the worker
    # waits, not when the next unit arrives; each unit still gets only its own lines.
    worker = psup.result(psup.agent(whoami, "one", reuse=True).id, timeout=WAIT)
    eventually(
        lambda: os.readlink(f"/proc/{worker}/fd/1").startswith("pipe:"),
        what="the idle worker's stdout to be the next unit's capture",
    )
    second = psup.agent(whoami, "two", reuse=True)
    record = psup.wait(second.id, timeout=WAIT)
    assert psup.result(second.id) == worker
    events = [orjson.loads(line) for line in record.output_tail.splitlines()]
    assert [e["data"] for e in events if e["type"] == "stdout"] == ["two\n"]
    assert events[0]["seq"] == 1


def test_one_worker_serves_units_in_turn_and_a_kill_replaces_it(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    first = psup.result(psup.agent(whoami, "one", reuse=True).id, timeout=WAIT)
    second = psup.result(psup.agent(whoami, "two", reuse=True).id, timeout=WAIT)
    assert first == second  # the same process ran both
    gate = tmp_path / "never"
    stuck = psup.agent(wait_for, str(gate), reuse=True)
    eventually(lambda: psup.get(stuck.id).pid, what="the unit to reach its worker")
    assert psup.kill(stuck.id) is True
    record = psup.wait(stuck.id, timeout=WAIT)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)
    eventually(lambda: not alive(first), what="the killed unit's worker to die")
    third = psup.result(psup.agent(whoami, "three", reuse=True).id, timeout=WAIT)
    assert third != first
    assert alive(third)


def test_a_crash_fails_that_unit_only(state_dir: Path, tmp_path: Path) -> None:
    with wu.Supervisor(state_dir, install_signal_handlers=False, pool_size=2) as sup:
        gate = tmp_path / "gate"
        bystander = sup.agent(wait_for, str(gate), reuse=True)
        bystander_pid = eventually(lambda: sup.get(bystander.id).pid, what="the bystander")
        crashed = sup.wait(sup.agent(hard_exit, reuse=True).id, timeout=WAIT)
        assert (crashed.status, crashed.exit_code) == (wu.Status.FAILED, 7)
        raised = sup.wait(sup.agent(raise_error, reuse=True).id, timeout=WAIT)
        assert raised.status is wu.Status.FAILED
        assert raised.error is not None
        assert "ValueError: pooled failure" in raised.error
        with pytest.raises(wu.WorkFailed):
            sup.result(raised.id)
        # A raise leaves its worker serving; os._exit took the other one, replaced.
        assert raised.pid != crashed.pid
        assert alive(raised.pid or 0)
        assert not alive(crashed.pid or 0)
        assert sup.get(bystander.id).status is wu.Status.RUNNING
        gate.touch()
        assert sup.result(bystander.id, timeout=WAIT) == bystander_pid


def test_a_worker_puts_back_cwd_environment_and_signal_handlers(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    before = psup.result(psup.agent(surroundings, reuse=True).id, timeout=WAIT)
    psup.result(psup.agent(mess_up, str(tmp_path), reuse=True).id, timeout=WAIT)
    after = psup.result(psup.agent(surroundings, reuse=True).id, timeout=WAIT)
    assert after == before
    assert after[1] is None
    assert after[2] is not None  # PATH is back


def test_a_pooled_unit_cancels_at_its_checkpoint(psup: wu.Supervisor) -> None:
    h = psup.agent(checkpoints_until_cancelled, reuse=True)
    eventually(lambda: psup.get(h.id).pid, what="the unit to start")
    worker = psup.get(h.id).pid
    assert psup.cancel(h.id, grace=WAIT) is True
    record = psup.wait(h.id, timeout=WAIT)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)
    # It stopped by itself at the checkpoint: its worker lives on for the next unit.
    assert psup.result(psup.agent(whoami, "next", reuse=True).id, timeout=WAIT) == worker


def test_a_unit_waiting_for_a_worker_is_killed_without_running(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    busy = psup.agent(wait_for, str(gate), reuse=True)
    eventually(lambda: psup.get(busy.id).pid, what="the worker to be busy")
    queued = psup.agent(whoami, "must not run", reuse=True)
    assert psup.kill(queued.id) is True
    record = psup.wait(queued.id, timeout=WAIT)
    assert record.status is wu.Status.KILLED
    assert b"must not run" not in record.output_tail
    gate.touch()
    assert psup.get(busy.id).status is not wu.Status.KILLED
    psup.wait(busy.id, timeout=WAIT)
    assert psup.get(busy.id).status is wu.Status.COMPLETED


def test_closing_the_supervisor_ends_its_workers(state_dir: Path) -> None:
    with wu.Supervisor(state_dir, install_signal_handlers=False, pool_size=2) as sup:
        pid = sup.result(sup.agent(whoami, "x", reuse=True).id, timeout=WAIT)
        assert alive(pid)
    eventually(lambda: not alive(pid), what="the worker to end with its supervisor")


def test_pooled_units_of_another_sandbox_run_in_workers_of_their_own(
    psup: wu.Supervisor,
) -> None:
    """A worker is confined as it starts: units of a policy of their own (a memory limit,
    a workspace) get workers of that policy, never one that ran another's units."""
    default = psup.result(psup.agent(whoami, "x", reuse=True).id, timeout=WAIT)
    limited = psup.agent(whoami, "y", reuse=True, memory_limit=1 << 30)
    assert psup.result(limited.id, timeout=WAIT) != default
    assert psup.get(limited.id).sandbox == wu.Sandbox(memory=1 << 30)
    again = psup.agent(whoami, "z", reuse=True, sandbox=wu.Sandbox(memory=1 << 30))
    assert psup.result(again.id, timeout=WAIT) == psup.result(limited.id)
    with pytest.raises(wu.SpecError, match="pool_size"):
        wu.Supervisor(".unused", pool_size=0)


def square(x: int) -> int:
    return x * x


def test_pool_map_runs_pooled_units_in_order_and_raises_a_failure_in_place(
    psup: wu.Supervisor,
) -> None:
    pool = psup.pool()
    assert pool.size == 1
    assert list(pool.map(square, range(5), timeout=WAIT)) == [0, 1, 4, 9, 16]
    units = [r for r in psup.list(kind="agent") if r.description.startswith("square")]
    assert len(units) == 5
    assert len({r.pid for r in units}) == 1  # one worker ran them all
    results = pool.map(divide_by, [1, 0, 2], timeout=WAIT)
    assert next(results) == 1.0
    # As Executor.map: the function's own exception, with a note naming its unit.
    with pytest.raises(ZeroDivisionError) as raised:
        next(results)
    assert any(n.startswith("raised in unit a") for n in raised.value.__notes__)


def divide_by(x: int) -> float:
    return 1 / x


def open_once_running(sup: wu.Supervisor, work_id: str, gate: Path) -> threading.Thread:
    """A thread that opens ``gate`` once ``work_id`` runs: the unit cannot end before."""

    def run() -> None:
        eventually(lambda: sup.get(work_id).status is wu.Status.RUNNING, what="the unit to run")
        gate.touch()

    opener = threading.Thread(target=run, daemon=True)
    opener.start()
    return opener


@pytest.mark.timeout(60)
def test_leaving_a_pool_block_waits_for_the_units_submitted_in_it(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    with psup.pool() as pool:
        gated = pool.submit(wait_for, str(gate))  # Executor.submit's name for agent
        failing = pool.agent(divide_by, 0)
        opener = open_once_running(psup, gated.id, gate)
    # As leaving a ``with ProcessPoolExecutor()`` block: both ended, neither raised here.
    assert psup.get(gated.id).status is wu.Status.COMPLETED
    assert psup.get(failing.id).status is wu.Status.FAILED
    opener.join(WAIT)
    assert isinstance(gated.result(timeout=WAIT), int)
    with pytest.raises(wu.WorkFailed, match="ZeroDivisionError"):
        failing.result(timeout=WAIT)
    # As an executor's: this Pool is shut down, but the workers are the supervisor's,
    # and a new Pool takes units on them.
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        pool.submit(square, 3)
    assert psup.pool().submit(square, 3).result(timeout=WAIT) == 9


@pytest.mark.timeout(60)
def test_leaving_an_async_pool_block_waits_for_its_units(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"

    async def main() -> str:
        async with psup.pool() as pool:
            handle = await pool.agent_async(wait_for, str(gate))
            open_once_running(psup, handle.id, gate)
        return handle.id

    work_id = asyncio.run(main())
    assert psup.get(work_id).status is wu.Status.COMPLETED


def test_leaving_a_pool_map_early_kills_the_units_it_did_not_read(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    gate, never = tmp_path / "gate", str(tmp_path / "never")
    gate.touch()
    results = psup.pool().map(wait_for, [str(gate), never, never], timeout=WAIT)
    units = psup.list(kind="agent")
    assert len(units) == 3  # all submitted before the first result is read
    assert isinstance(next(results), int)
    results.close()  # as a ``break`` out of the loop does
    ends = [psup.wait(r.id, timeout=WAIT).status for r in units]
    assert ends == [wu.Status.COMPLETED, wu.Status.KILLED, wu.Status.KILLED]


def test_a_pool_map_timeout_counts_for_the_whole_map_and_kills_what_is_left(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    never = str(tmp_path / "never")
    results = psup.pool().map(wait_for, [never, never], timeout=0.2)
    with pytest.raises(TimeoutError):
        next(results)
    ends = [psup.wait(r.id, timeout=WAIT).status for r in psup.list(kind="agent")]
    assert ends == [wu.Status.KILLED, wu.Status.KILLED]


def append_index(path: str, index: int) -> None:
    with open(path, "a") as log:
        log.write(f"{index}\n")


def test_pooled_units_run_in_the_order_they_were_submitted(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    log = tmp_path / "order"
    handles = [psup.agent(append_index, str(log), i, reuse=True) for i in range(6)]
    for h in handles:
        psup.wait(h.id, timeout=WAIT)
    # The first units race the first worker's start: none of them may jump the queue.
    assert log.read_text().split() == [str(i) for i in range(6)]


# -- a kind whose every unit is pooled ----------------------------------------------


class ScorerActor(PooledAgentActor):
    """A user's kind: every unit submitted to it runs in the pool's workers."""

    kind: ClassVar[str] = "scorer"


class OwnProcessAgent(AgentActor):
    """A user's agent kind that keeps a process per unit."""

    kind: ClassVar[str] = "own-process"


def test_a_pooled_kind_runs_each_unit_in_the_pools_worker_and_a_kill_replaces_it(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    psup.register_kind("q", ScorerActor)
    first = psup.submit("q", AgentSpec.build(whoami, ("one",), {}))
    second = psup.submit("q", AgentSpec.build(whoami, ("two",), {}))
    assert first.id.startswith("q")
    worker = first.result(timeout=WAIT)
    assert second.result(timeout=WAIT) == worker  # one worker ran both, no reuse=True asked
    record = psup.get(second.id)
    assert (record.kind, record.status, record.pid) == ("scorer", wu.Status.COMPLETED, worker)
    stdout = [orjson.loads(line) for line in record.output_tail.splitlines()]
    assert [e["data"] for e in stdout if e["type"] == "stdout"] == ["two\n"]

    stuck = psup.submit("q", AgentSpec.build(wait_for, (str(tmp_path / "never"),), {}))
    eventually(lambda: psup.get(stuck.id).pid == worker, what="the unit to reach the worker")
    assert psup.kill(stuck.id) is True
    assert psup.wait(stuck.id, timeout=WAIT).status is wu.Status.KILLED
    eventually(lambda: not alive(worker), what="the killed unit's worker to die")
    replacement = psup.submit("q", AgentSpec.build(whoami, ("three",), {})).result(timeout=WAIT)
    assert replacement != worker


def test_a_pooled_kind_refuses_process_limits_before_any_id(psup: wu.Supervisor) -> None:
    psup.register_kind("q", ScorerActor)
    with pytest.raises(wu.SpecError, match="memory limit or idle priority"):
        psup.submit("q", AgentSpec.build(whoami, ("x",), {}, memory_limit=1 << 30))
    with pytest.raises(wu.SpecError, match="memory limit or idle priority"):
        psup.submit("q", AgentSpec.build(whoami, ("x",), {}, idle_priority=True))
    assert psup.list(kind="scorer") == []


def test_a_spec_built_by_hand_cannot_take_a_limit_into_the_pool(psup: wu.Supervisor) -> None:
    # AgentSpec.build refuses reuse=True with a limit; a spec made without it is
    # checked by the kind, before the unit is routed to the pool.
    spec = dataclasses.replace(
        AgentSpec.build(whoami, ("x",), {}), limits=Limits(memory=1 << 30), reuse=True
    )
    with pytest.raises(wu.SpecError, match="memory limit or idle priority"):
        psup.submit("a", spec)
    assert psup.list(kind="agent") == []


def test_reuse_is_refused_by_an_agent_kind_that_runs_a_process_per_unit(
    psup: wu.Supervisor,
) -> None:
    psup.register_kind("x", OwnProcessAgent)
    with pytest.raises(wu.SpecError, match="subclass PooledAgentActor"):
        psup.submit("x", AgentSpec.build(whoami, ("x",), {}, reuse=True))
    assert psup.list(kind="own-process") == []
    # Without reuse it runs, in a process of its own.
    unit = psup.submit("x", AgentSpec.build(whoami, ("y",), {}))
    assert unit.result(timeout=WAIT) == psup.get(unit.id).pid


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mechanism", ["auto", "subreaper"])
def test_a_pooled_units_processes_end_with_it_not_with_the_worker(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, mechanism: str
) -> None:
    """They ran on beside the next units until the supervisor closed (DESIGN §2.9)."""
    monkeypatch.setenv("WORKUNITS_CONTAINMENT", mechanism)
    with wu.Supervisor(state_dir, install_signal_handlers=False, pool_size=1) as sup:
        pids = sup.result(sup.agent(leave_processes, reuse=True).id, timeout=WAIT)
        for pid in pids:
            eventually(lambda p=pid: not alive(p), what=f"process {pid} to end")  # type: ignore[misc]
        # The worker carries on: the next unit runs in it.
        assert sup.result(sup.agent(whoami, "next", reuse=True).id, timeout=WAIT) > 0


@pytest.mark.timeout(60)
def test_a_cancel_of_a_unit_waiting_for_a_worker_ends_it_before_it_runs(
    psup: wu.Supervisor, tmp_path: Path
) -> None:
    """It was asked to stop through a channel no worker read yet: it ran once one freed."""
    gate, marker = tmp_path / "gate", tmp_path / "marker"
    busy = psup.agent(wait_for, str(gate), reuse=True)  # the one worker is taken
    eventually(lambda: psup.get(busy.id).pid is not None, what="the worker to run it")
    queued = psup.agent(touch, str(marker), reuse=True)
    assert psup.cancel(queued.id, grace=30)
    record = psup.wait(queued.id, timeout=WAIT)  # at once, while the worker is still busy
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)
    gate.touch()
    assert psup.wait(busy.id, timeout=WAIT).status is wu.Status.COMPLETED
    assert not marker.exists()


def leave_a_child_on_stdout() -> int:
    """Start a child that inherits (and holds) the unit's stdout, and return at once."""
    child = subprocess.Popen(["sleep", "30"])  # noqa: S607 - a test's own command
    print("left", child.pid, flush=True)
    return child.pid


def test_a_child_left_on_stdout_is_ended_without_waiting_for_its_pipe(
    psup: wu.Supervisor,
) -> None:
    # The worker closed each unit's capture by waiting up to 1 s for its pipes to
    # reach end of file, which a child holding stdout never lets happen: every such
    # unit ended a second after its result. Now what the unit left is ended first,
    # and what it wrote up to then is in its transcript.
    gaps = []
    for _ in range(3):
        h = psup.agent(leave_a_child_on_stdout, reuse=True)
        child = psup.result(h.id, timeout=WAIT)
        eventually(lambda c=child: not alive(c), what=f"the left child {child} to end")  # type: ignore[misc]
        record = psup.wait(h.id, timeout=WAIT)
        events = {e["type"]: e for e in map(orjson.loads, record.output_tail.splitlines())}
        assert events["stdout"]["data"] == f"left {child}\n"
        gaps.append(events["end"]["ts"] - events["result"]["ts"])
    assert min(gaps) < 0.9, gaps  # the old wait took the full second, every time
