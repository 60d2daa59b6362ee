"""A unit's end takes every process it started, however it escaped (invariant 9).

Each unit starts descendants that leave its process group — a new session, a
new group, a double fork — and writes their pids to a file. After the unit
ends (by itself, by kill, by cancel, by timeout) none of them is left in /proc,
while the supervisor still runs. Both mechanisms run: a cgroup per unit (when
this process may create one) and the subreaper chain
(``WORKUNITS_CONTAINMENT=subreaper``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

import workunits as wu
from workunits._zygote import containment

from .conftest import alive, eventually, parent_of

cloudpickle.register_pickle_by_value(sys.modules[__name__])

# Each shell pattern starts `sleep 700` outside the unit's group and records its pid.
# (sh has no way to make a new group alone; agents test that escape.)
SHELL_ESCAPES = {
    "setsid": "( setsid sh -c 'echo $$ >> {pids}; exec sleep 700' & )",
    "double-fork": "( ( setsid sh -c 'echo $$ >> {pids}; exec sleep 700' & ) & )",
}
AGENT_ESCAPES = ("setsid", "new-group", "double-fork")
HOW_IT_ENDS = ("by-itself", "kill", "cancel", "timeout")
# Long enough for a loaded machine to start the unit and its escapee before it fires
# (they write their pids within ~0.1 s); every timeout case waits this long.
TIMEOUT = 2.0


def escape_from_agent(how: str, pids: str, release: str) -> str:
    """Start one `sleep 700` outside this process's group, the way ``how`` says."""
    sleep = ["/bin/sh", "-c", f"echo $$ >> {pids}; exec sleep 700"]
    if how == "setsid":
        subprocess.Popen(sleep, start_new_session=True)
    elif how == "new-group":
        subprocess.Popen(sleep, process_group=0)
    else:  # double fork: the middle process exits, the grandchild is orphaned at once
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sleep[0], sleep)  # noqa: S606 - a fixed argv, no shell wanted
            os._exit(0)
        os.waitpid(pid, 0)
    pause = threading.Event()
    while not os.path.exists(release):
        pause.wait(0.01)
    return "done"


@pytest.fixture(params=["cgroup", "subreaper"])
def mechanism(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "cgroup":
        found = containment.probe()
        if found.own is None:
            pytest.skip(f"no cgroup per unit here: {found.reason}")
        monkeypatch.delenv(containment.ENV, raising=False)
    else:
        monkeypatch.setenv(containment.ENV, "subreaper")
    return str(request.param)


@pytest.fixture
def esup(tmp_path: Path, mechanism: str) -> Iterator[wu.Supervisor]:
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        yield sup


def escaped_pids(path: Path, count: int = 1, *, alive_now: bool = True) -> list[int]:
    """The escapees' pids once written (and, with ``alive_now``, seen running).

    A unit ended by its timeout may take its escapee with it before a loaded
    machine lets the test look: then a written pid is proof enough it started.
    """

    def read() -> list[int] | None:
        if not path.exists():
            return None
        pids = [int(line) for line in path.read_text().split()]
        if len(pids) < count:
            return None
        return pids if not alive_now or all(alive(p) for p in pids) else None

    return eventually(read, timeout=20, what="the escaped process to start")


def end(sup: wu.Supervisor, unit: wu.WorkHandle, how: str, release: Path) -> wu.WorkRecord:
    if how == "by-itself":
        release.touch()
    elif how == "kill":
        sup.kill(unit.id)
    elif how == "cancel":
        sup.cancel(unit.id, grace=0.2)
    return sup.wait(unit.id, timeout=30)


def assert_gone(pids: list[int]) -> float:
    """Wait for every pid to leave /proc; the seconds it took."""
    start = time.monotonic()
    for pid in pids:
        eventually(lambda p=pid: not alive(p), timeout=10, what=f"escaped pid {pid} to die")  # type: ignore[misc]
    return time.monotonic() - start


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", HOW_IT_ENDS)
@pytest.mark.parametrize("escape", sorted(SHELL_ESCAPES))
def test_a_shell_units_escaped_descendants_end_with_it(
    esup: wu.Supervisor, tmp_path: Path, escape: str, how: str
) -> None:
    pids_file = tmp_path / "pids"
    release = tmp_path / "release"
    escaping = SHELL_ESCAPES[escape].format(pids=pids_file)
    hold = f"while [ ! -e {release} ]; do sleep 0.01; done"
    timeout = TIMEOUT if how == "timeout" else None
    unit = esup.shell(f"{escaping}; {hold}", timeout=timeout)
    pids = escaped_pids(pids_file, alive_now=how != "timeout")
    record = end(esup, unit, how, release)
    assert record.status is (wu.Status.COMPLETED if how == "by-itself" else wu.Status.KILLED)
    assert_gone(pids)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", HOW_IT_ENDS)
@pytest.mark.parametrize("escape", AGENT_ESCAPES)
def test_an_agents_escaped_descendants_end_with_it(
    esup: wu.Supervisor, tmp_path: Path, escape: str, how: str
) -> None:
    pids_file = tmp_path / "pids"
    release = tmp_path / "release"
    timeout = TIMEOUT if how == "timeout" else None
    unit = esup.agent(escape_from_agent, escape, str(pids_file), str(release), timeout=timeout)
    pids = escaped_pids(pids_file, alive_now=how != "timeout")
    record = end(esup, unit, how, release)
    assert record.status is (wu.Status.COMPLETED if how == "by-itself" else wu.Status.KILLED)
    assert_gone(pids)


@pytest.mark.timeout(60)
def test_a_sigkilled_zygote_leaves_no_escaped_grandchild(
    esup: wu.Supervisor, tmp_path: Path
) -> None:
    shell_pids, agent_pids = tmp_path / "shell-pids", tmp_path / "agent-pids"
    never = tmp_path / "never"
    hold = f"; while [ ! -e {never} ]; do sleep 0.05; done"
    units = [
        esup.shell(SHELL_ESCAPES["setsid"].format(pids=shell_pids) + hold),
        esup.shell(SHELL_ESCAPES["double-fork"].format(pids=shell_pids) + hold),
        esup.agent(escape_from_agent, "setsid", str(agent_pids), str(never)),
        esup.agent(escape_from_agent, "double-fork", str(agent_pids), str(never)),
    ]
    pids = escaped_pids(shell_pids, 2) + escaped_pids(agent_pids, 2)
    zygote = esup._machinery.zygote.pid
    assert zygote is not None
    os.kill(zygote, signal.SIGKILL)
    for unit in units:
        record = esup.wait(unit.id, timeout=30)
        assert record.status is wu.Status.FAILED
        assert record.reason is wu.Reason.LOST
    assert_gone(pids)
    # The supervisor still runs, and starts units again.
    assert esup.wait(esup.shell("true").id, timeout=30).status is wu.Status.COMPLETED


def emptied_unit_cgroups(root: Path) -> list[str]:
    """The unit directories under the zygote's cgroup that hold no process any more."""
    return [
        entry.name
        for entry in root.iterdir()
        if entry.is_dir() and not (entry / "cgroup.procs").read_text().split()
    ]


@pytest.mark.timeout(60)
def test_ended_units_leave_no_cgroup_behind(esup: wu.Supervisor, mechanism: str) -> None:
    if mechanism != "cgroup":
        pytest.skip("a cgroup per unit only")
    blocked = esup.agent(time.sleep, 600)
    running = esup.shell(["sleep", "600"])
    ended = [
        esup.shell(["true"]),
        esup.shell(["false"]),
        esup.agent(int, "7"),
        esup.agent(int, "not a number"),
    ]
    for unit in ended:
        esup.wait(unit.id, timeout=30)
    zygote = esup._machinery.zygote.pid
    own = containment.own_cgroup()
    assert zygote is not None
    assert own is not None
    root = Path(own) / f"workunits-{parent_of(zygote)}"  # named after the zygote's guard
    assert root.is_dir()
    for unit in (blocked, running):
        eventually(lambda u=unit: esup.get(u.id).pid, what=f"{unit.id} to run")  # type: ignore[misc]
        assert esup.kill(unit.id)
        assert esup.wait(unit.id, timeout=30).status is wu.Status.KILLED
    # Removed once empty: at once, or by the zygote's loop while a killed one still dies.
    # What stays holds a process: a warm spare waiting for its unit.
    eventually(lambda: not emptied_unit_cgroups(root), timeout=10, what="emptied cgroups gone")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["by-itself", "kill"])
def test_a_descendant_that_leaves_its_units_cgroup_ends_with_it(
    esup: wu.Supervisor, mechanism: str, tmp_path: Path, how: str
) -> None:
    """Root may move a process out of its unit's cgroup, where cgroup.kill cannot reach it;
    orphaned, it comes back to the zygote, which ends it. A running unit's orphan that
    stayed in its cgroup is that unit's: another unit's end leaves it alone."""
    if mechanism != "cgroup":
        pytest.skip("a cgroup per unit only")
    own = containment.own_cgroup()
    assert own is not None
    pids_file, kept_file = tmp_path / "pids", tmp_path / "kept"
    release, never = tmp_path / "release", tmp_path / "never"
    hold = f"while [ ! -e {release} ]; do sleep 0.01; done"
    # The escapee moves itself to this test's own cgroup, outside every unit's: only a
    # unconfined unit can (the default protection makes /sys read-only for root's units).
    moved = f"echo $$ > {own}/cgroup.procs && echo $$ >> {pids_file}; exec sleep 700"
    unit = esup.shell(f"( setsid sh -c '{moved}' & ); {hold}", sandbox=wu.Sandbox.none())
    # An orphan at once, in its running unit's cgroup.
    staying = f"( setsid sh -c 'echo $$ >> {kept_file}; exec sleep 700' & )"
    keeper = esup.shell(f"{staying}; while [ ! -e {never} ]; do sleep 0.05; done")
    (escaped,) = escaped_pids(pids_file)
    (kept,) = escaped_pids(kept_file)
    record = end(esup, unit, how, release)
    assert record.status is (wu.Status.COMPLETED if how == "by-itself" else wu.Status.KILLED)
    assert_gone([escaped])
    assert alive(kept), "the orphan of a unit that still runs was killed"
    assert esup.kill(keeper.id)
    assert_gone([kept])


# The zygote's guard after the zygote died: one child still in the guard's own group
# (a unit process the zygote had just forked, before its setsid) and one in a session
# of its own. The guard prints their pids, sweeps, and says it lived through it.
GUARD_SWEEP = """
import os, signal, sys
from workunits._zygote import _linux, guard

_linux.set_child_subreaper()
children = []
for leaves_our_group in (False, True):
    pid = os.fork()
    if pid == 0:
        if leaves_our_group:
            os.setsid()
        signal.pause()
        os._exit(0)
    children.append(pid)
print(*children, flush=True)
guard.sweep(None)
print("swept", flush=True)
"""


@pytest.mark.timeout(60)
def test_the_guards_sweep_spares_its_own_group() -> None:
    # Killing a child's group killed the guard when the child was still in the
    # guard's group: the guard died mid-sweep and every escapee outlived it.
    done = subprocess.run(
        [sys.executable, "-c", GUARD_SWEEP],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,  # a group of its own, as the guard has
    )
    lines = done.stdout.split("\n")
    children = [int(pid) for pid in lines[0].split()]
    try:
        assert done.returncode == 0, f"the guard ended with {done.returncode}: {done.stderr}"
        assert lines[1] == "swept"
        assert_gone(children)
    finally:  # a guard that died left its other child to init: not to outlive the test
        for pid in filter(alive, children):
            os.kill(pid, signal.SIGKILL)
