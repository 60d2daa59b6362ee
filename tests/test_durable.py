"""Durability in real processes: a supervisor is SIGKILLed mid-run and another resumes.

Invariants 11-13 end to end: the resumed unit keeps its ID, runs as attempt 2
and repeats no finished step; units that cannot resume fail with reason lost;
each unit's notice is delivered once; a resubmit with the same key finds the
same unit; nothing of the dead session keeps running.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import workunits as wu

from .conftest import alive, eventually
from .durable_jobs import GROUPS
from .helpers import Host


def pid_of(source: wu.Client | wu.Supervisor, work_id: str) -> int:
    return eventually(lambda: source.get(work_id).pid, what=f"{work_id} to start")


def gone(pid: int) -> None:
    eventually(lambda: not alive(pid), what=f"pid {pid} of the dead session to die")


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    started: list[Host] = []
    yield started
    for host in started:
        host.close()


@pytest.mark.timeout(120)
def test_a_sigkilled_supervisor_s_workflow_resumes_at_the_next_step(
    tmp_path: Path, hosts: list[Host]
) -> None:
    state, log = tmp_path / "state", tmp_path / "groups.log"
    first = Host("durable_host", str(state), "migrate", str(log))
    hosts.append(first)
    work_id = first.read()["migration"]
    with wu.connect(state) as client:
        eventually(lambda: (client.get(work_id).progress or 0) >= 2 / GROUPS, timeout=60)
        pid = eventually(lambda: client.get(work_id).pid, what="the unit's pid on record")
        first.sigkill()
        eventually(lambda: not alive(pid), what="the dead session's unit process to die")

        second = Host("durable_host", str(state), "migrate", str(log))
        hosts.append(second)
        hello = second.read()
        assert hello["migration"] == work_id  # same key: the same unit, not a duplicate
        assert hello["recovered"]["resumed"] == [work_id]
        assert second.read()["result"] == list(range(GROUPS))
        record = client.get(work_id)
        assert (record.status, record.attempt) == (wu.Status.COMPLETED, 2)
        inbox = client.notifications()
        notices = []
        while (notice := inbox.get_nowait()) is not None:
            notices.append(notice.id)
    assert notices.count(work_id) == 1  # exactly one notice, across the restart
    groups = [line.split()[0] for line in log.read_text().splitlines()]
    assert sorted(groups) == [str(g) for g in range(GROUPS)]  # no finished step ran twice
    attempts = {line.split()[0]: line.split()[1] for line in log.read_text().splitlines()}
    assert attempts["0"] == "1"
    assert attempts[str(GROUPS - 1)] == "2"


@pytest.mark.timeout(120)
def test_after_a_crash_units_resume_or_fail_lost_as_their_kind_says(
    tmp_path: Path, hosts: list[Host]
) -> None:
    state = tmp_path / "state"
    host = Host("durable_host", str(state), "mixed", str(tmp_path / "groups.log"))
    hosts.append(host)
    ids = host.read()
    names = ("shell", "restart", "lambda", "agent")
    with wu.connect(state) as client:
        pids = [pid_of(client, ids[name]) for name in names]
    shell_output = state / "output" / f"{ids['shell']}.out"
    eventually(lambda: shell_output.read_bytes() == b"before-crash\n")
    host.sigkill()
    for pid in pids:
        gone(pid)
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        recovered = sup.recovered
        assert sorted(recovered["lost"]) == sorted([ids["shell"], ids["lambda"]])
        assert set(recovered["resumed"]) == {ids["migration"], ids["restart"], ids["agent"]}
        for name in ("shell", "lambda"):
            record = sup.get(ids[name])
            assert (record.status, record.reason) == (wu.Status.FAILED, wu.Reason.LOST)
            # Its end kept what it wrote and cleaned its output file, as any end does.
            assert record.output_bytes == len(record.output_tail) > 0
            assert record.output_path is not None
            assert not os.path.lexists(record.output_path)
        assert sup.get(ids["shell"]).output_tail == b"before-crash\n"
        for name in ("restart", "agent"):
            pid = pid_of(sup, ids[name])
            record = sup.get(ids[name])
            assert (record.status, record.attempt) == (wu.Status.RUNNING, 2)
            assert alive(pid)


def test_a_key_finds_the_unit_it_made_and_refuses_other_arguments(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        first = sup.shell("echo one", key="build-42")
        sup.wait(first.id, 20)
        assert sup.shell("echo one", key="build-42").id == first.id  # ended: still the same
        with pytest.raises(wu.IdempotencyConflict):
            sup.shell("echo two", key="build-42")
        assert len([r for r in sup.list() if r.description == "echo one"]) == 1


class Counter:
    def __init__(self, start: int) -> None:
        self.n = start

    def on_receive(self, message: Any) -> int:
        self.n += 1
        return self.n


def submit_keyed(sup: wu.Supervisor, kind: str, n: int) -> str:
    """Submit a unit of ``kind`` under the key "k"; ``n`` changes its spec."""
    if kind == "dream":
        return sup.dream(len, "x" * n, key="k").id
    if kind == "monitor":
        return sup.monitor(f"echo {n}", "never", key="k").id
    return sup.teammate(Counter, n, key="k").id


@pytest.mark.parametrize("kind", ["dream", "monitor", "teammate"])
def test_every_submitter_takes_a_key(tmp_path: Path, kind: str) -> None:
    # A key given to dream() or teammate() reached the callable as its argument.
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        first = submit_keyed(sup, kind, 1)
        assert submit_keyed(sup, kind, 1) == first  # a reconnecting caller gets the first unit
        with pytest.raises(wu.IdempotencyConflict):
            submit_keyed(sup, kind, 2)
        assert [r.id for r in sup.list(kind=kind)] == [first]
        if kind == "teammate":
            # Counter(1), not Counter(1, key="k")
            assert sup.ask(first, "tick", timeout=20) == 2
        else:
            assert sup.wait(first, 20).status is wu.Status.COMPLETED


async def submit_keyed_async(sup: wu.Supervisor) -> list[tuple[str, str]]:
    """Each async submitter twice under its key: (first ID, second ID)."""
    pairs = []
    for _ in range(2):
        ids = (
            (await sup.dream_async(len, "x", key="d")).id,
            (await sup.monitor_async("echo", "never", key="m")).id,
            (await sup.teammate_async(Counter, 1, key="t")).id,
        )
        pairs.append(ids)
    first, again = pairs
    return list(zip(first, again, strict=True))


def test_every_async_submitter_takes_a_key(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        pairs = asyncio.run(submit_keyed_async(sup))
        assert all(first == again for first, again in pairs)
        assert len(sup.list()) == 3


def test_one_supervisor_per_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with (
        wu.Supervisor(state, install_signal_handlers=False),
        pytest.raises(
            wu.SupervisorBusy, match=rf"this process \(pid {os.getpid()}\) already runs a"
        ),
    ):
        wu.Supervisor(state, install_signal_handlers=False)
