"""A sandbox's resource limits hold, and a unit that hits one ends naming it.

Each limit is exceeded the ways a unit's tree can: by forking, by threads, and
by a grandchild that leaves in a session of its own. Where a cgroup can hold
the whole tree (memory, processes, CPU time), it does; elsewhere the per-process
rlimit holds, and the cases that need the tree skip naming what is missing.
Never an anonymous SIGKILL: ``record.reason`` says which limit it was.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu

from .sandbox_support import WAIT, machinery, need, pids_limit

pytestmark = pytest.mark.timeout(120)

MIB = 1 << 20


@pytest.fixture(scope="module")
def lsup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[wu.Supervisor]:
    state = tmp_path_factory.mktemp("limits") / "state"
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        yield sup


def cgroup_memory(machine: object) -> str | None:
    return None if getattr(machine, "cgroup_memory", None) else "needs a memory cgroup"


def unit_cgroups(sup: wu.Supervisor) -> str | None:
    return None if machinery(sup).zygote.pid and _v2_units(sup) else "needs a cgroup v2 per unit"


def _v2_units(sup: wu.Supervisor) -> bool:
    from workunits._zygote import containment  # noqa: PLC0415 - only to skip

    return containment.probe().own is not None


def assert_ended_by(record: wu.WorkRecord, reason: wu.Reason) -> None:
    assert record.reason is reason, record
    if record.signal is not None:  # killed: by the limit, and it says so
        assert record.status is wu.Status.KILLED


# -- memory --------------------------------------------------------------------------


def allocate_in(where: str, nbytes: int) -> None:
    """Allocate ``nbytes`` (touched) in this process, a thread, or a setsid grandchild."""
    if where == "thread":  # what a thread raised, the program raises in the end
        failed: list[BaseException] = []

        def allocate() -> None:
            try:
                bytearray(nbytes)
            except MemoryError as exc:
                failed.append(exc)

        thread = threading.Thread(target=allocate)
        thread.start()
        thread.join()
        if failed:
            raise failed[0]
        raise SystemExit(1)
    if where == "grandchild":
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                bytearray(nbytes)
                os._exit(0)
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(30)  # the grandchild's kill ends the tree: this never completes
        return
    bytearray(nbytes)


@pytest.mark.parametrize("where", ["self", "thread", "grandchild"])
def test_a_memory_limit_holds_for_the_tree(lsup: wu.Supervisor, where: str) -> None:
    if where == "grandchild":
        need(cgroup_memory)
    handle = lsup.agent(allocate_in, where, 512 * MIB, sandbox=wu.Sandbox(memory=128 * MIB))
    assert_ended_by(lsup.wait(handle.id, timeout=WAIT), wu.Reason.MEMORY_LIMIT)


def test_a_shells_fork_over_its_memory_limit_ends_it(lsup: wu.Supervisor) -> None:
    need(cgroup_memory)
    alloc = f"{sys.executable} -c 'bytearray({512 * MIB})'"
    handle = lsup.shell(f"{alloc} & wait $!", sandbox=wu.Sandbox(memory=128 * MIB))
    assert_ended_by(lsup.wait(handle.id, timeout=WAIT), wu.Reason.MEMORY_LIMIT)


# -- processes -----------------------------------------------------------------------


def spawn_many(how: str, n: int) -> None:
    """Start ``n`` processes or threads that wait, as a fork bomb would."""
    if how == "threads":
        stop = threading.Event()
        for _ in range(n):
            threading.Thread(target=stop.wait, daemon=True).start()
        return
    if how == "grandchild":
        pid = os.fork()
        if pid == 0:
            os.setsid()
            for _ in range(n):
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        raise SystemExit(os.waitstatus_to_exitcode(status) or 1)
    for _ in range(n):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)


@pytest.mark.parametrize("how", ["fork", "threads", "grandchild"])
def test_a_process_limit_holds_for_forks_threads_and_grandchildren(
    lsup: wu.Supervisor, how: str
) -> None:
    machine = need(pids_limit)
    if how == "grandchild" and not machine.cgroup_pids:
        pytest.skip("a setsid grandchild's forks: the pids cgroup counts them, an rlimit not")
    handle = lsup.agent(spawn_many, how, 200, sandbox=wu.Sandbox(processes=20))
    assert_ended_by(lsup.wait(handle.id, timeout=WAIT), wu.Reason.PROCESSES_LIMIT)


def test_a_shell_fork_bomb_is_held_by_its_process_limit(lsup: wu.Supervisor) -> None:
    machine = need(pids_limit)
    if not machine.cgroup_pids:
        pytest.skip("a command's refused fork is named only by the pids cgroup's count")
    bomb = "for i in $(seq 200); do sleep 60 & done; wait"
    handle = lsup.shell(bomb, sandbox=wu.Sandbox(processes=20), timeout=30)
    record = lsup.wait(handle.id, timeout=WAIT)
    assert record.reason in (wu.Reason.PROCESSES_LIMIT, wu.Reason.TIMEOUT), record
    assert lsup.wait(lsup.shell(["true"]).id, timeout=WAIT).status is wu.Status.COMPLETED


# -- CPU -----------------------------------------------------------------------------


def burn(processes: int, seconds: float) -> None:
    """Use ``seconds`` of CPU in each of ``processes`` processes (this one among them)."""
    children = [os.fork() for _ in range(processes - 1)]
    deadline = time.process_time() + seconds
    while time.process_time() < deadline:
        pass
    if 0 in children:
        os._exit(0)
    for pid in children:
        os.waitpid(pid, 0)


def test_a_cpu_limit_ends_a_busy_unit(lsup: wu.Supervisor) -> None:
    handle = lsup.agent(burn, 1, 30.0, sandbox=wu.Sandbox(cpu_seconds=1))
    record = lsup.wait(handle.id, timeout=WAIT)
    assert_ended_by(record, wu.Reason.CPU_LIMIT)
    assert record.signal in (signal.SIGXCPU, signal.SIGKILL)


def test_a_cpu_limit_holds_for_the_whole_tree(lsup: wu.Supervisor) -> None:
    """Three processes, each under the limit alone: their sum is over it."""
    if not _v2_units(lsup):
        pytest.skip("the tree's CPU time needs a cgroup v2 per unit (RLIMIT_CPU is per process)")
    handle = lsup.agent(burn, 3, 0.9, sandbox=wu.Sandbox(cpu_seconds=1.5))
    assert_ended_by(lsup.wait(handle.id, timeout=WAIT), wu.Reason.CPU_LIMIT)


def test_a_busy_shell_is_ended_by_its_cpu_limit(lsup: wu.Supervisor) -> None:
    handle = lsup.shell("while :; do :; done", sandbox=wu.Sandbox(cpu_seconds=1))
    assert_ended_by(lsup.wait(handle.id, timeout=WAIT), wu.Reason.CPU_LIMIT)


# -- files ---------------------------------------------------------------------------


def test_a_file_size_limit_ends_a_writer(lsup: wu.Supervisor, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    target = tmp_path / "big"
    cmd = f"head -c {4 * MIB} /dev/zero > {target}"
    handle = lsup.shell(cmd, sandbox=wu.Sandbox(file_size=MIB))
    record = lsup.wait(handle.id, timeout=WAIT)
    assert_ended_by(record, wu.Reason.FILE_SIZE_LIMIT)
    assert target.stat().st_size == MIB


def open_many(directory: str, n: int) -> None:
    files = [open(os.path.join(directory, f"f{i}"), "w") for i in range(n)]  # noqa: SIM115
    del files


def test_an_open_files_limit_ends_a_unit_naming_it(lsup: wu.Supervisor, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    handle = lsup.agent(open_many, str(tmp_path), 200, sandbox=wu.Sandbox(open_files=64))
    record = lsup.wait(handle.id, timeout=WAIT)
    assert record.status is wu.Status.FAILED
    assert_ended_by(record, wu.Reason.OPEN_FILES_LIMIT)


def test_limits_leave_the_next_unit_alone(lsup: wu.Supervisor) -> None:
    handle = lsup.agent(allocate_in, "self", 256 * MIB)
    assert lsup.wait(handle.id, timeout=WAIT).status is wu.Status.COMPLETED
