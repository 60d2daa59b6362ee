"""A Hypothesis state machine over agent hierarchies in real processes.

Rules spawn, complete, raise, crash, kill, cancel and SIGKILL puppets at random
points. After every step: no process of a terminal unit is alive, no running
unit has an ended parent, and every notice went once to the right parent.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import workunits as wu

from .conftest import alive, eventually
from .puppets import puppet, send


class Hierarchies(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory(prefix="wu-hier-")
        self.fifos = os.path.join(self.tmp.name, "fifos")
        os.mkdir(self.fifos)
        self.sup = wu.Supervisor(
            os.path.join(self.tmp.name, "state"), install_signal_handlers=False
        )
        self.units: list[str] = []
        self.app_notices: Counter[str] = Counter()

    def teardown(self) -> None:
        self.sup.close()
        self.check_all()
        self.tmp.cleanup()

    # -- helpers ---------------------------------------------------------------

    def running(self) -> list[str]:
        return [u for u in self.units if self.sup.get(u).status == wu.Status.RUNNING]

    def ready(self, work_id: str) -> None:
        eventually(
            lambda: (
                self.sup.get(work_id).progress is not None
                or wu.is_terminal(self.sup.get(work_id).status)
            ),
            what=f"{work_id} to be ready",
        )

    def settle(self, work_id: str) -> None:
        self.sup.wait(work_id, timeout=20)
        for child in self.sup.list(parent=work_id):
            self.settle(child.id)

    # -- rules -----------------------------------------------------------------

    @precondition(lambda self: len(self.units) < 6)
    @rule()
    def start_top(self) -> None:
        h = self.sup.agent(puppet, self.fifos)
        self.units.append(h.id)
        self.ready(h.id)

    @precondition(lambda self: len(self.units) < 8)
    @rule(data=st.data())
    def spawn_child(self, data: st.DataObject) -> None:
        parents = self.running()
        if not parents:
            return
        parent = data.draw(st.sampled_from(parents))
        before = {r.id for r in self.sup.list(parent=parent)}
        if not send(self.fifos, parent, "spawn"):
            return
        found = eventually(
            lambda: (
                ({r.id for r in self.sup.list(parent=parent)} - before)
                or wu.is_terminal(self.sup.get(parent).status)
            ),
            what=f"{parent} to spawn",
        )
        if isinstance(found, set):
            child = found.pop()
            self.units.append(child)
            self.ready(child)

    @rule(data=st.data(), command=st.sampled_from(["complete", "raise", "exit", "segfault"]))
    def end_by_itself(self, data: st.DataObject, command: str) -> None:
        targets = self.running()
        if not targets:
            return
        target = data.draw(st.sampled_from(targets))
        if send(self.fifos, target, command):
            self.settle(target)

    @rule(data=st.data(), how=st.sampled_from(["kill", "cancel", "sigkill"]))
    def end_from_outside(self, data: st.DataObject, how: str) -> None:
        targets = self.running()
        if not targets:
            return
        target = data.draw(st.sampled_from(targets))
        record = self.sup.get(target)
        if how == "kill":
            self.sup.kill(target)
        elif how == "cancel":
            self.sup.cancel(target, grace=1.0)
        elif record.pid is not None:
            os.kill(record.pid, signal.SIGKILL)
        self.settle(target)

    # -- invariants --------------------------------------------------------------

    @invariant()
    def lifecycle_holds(self) -> None:
        self.check_all()

    def check_all(self) -> None:
        mailbox = self.sup.notifications() if not self.sup._closed else None
        while mailbox is not None and (notice := mailbox.get_nowait()) is not None:
            self.app_notices[notice.id] += 1
        assert all(n == 1 for n in self.app_notices.values()), self.app_notices
        for work_id in self.units:
            record = self.sup.get(work_id) if not self.sup._closed else None
            if record is None:
                continue
            if wu.is_terminal(record.status):
                assert record.notified
                if record.pid is not None:
                    pid = record.pid
                    assert not alive(pid), f"{work_id} is {record.status} but pid {pid} lives"
                if record.parent is None:
                    self._expect_app_notice(work_id)
            parent = record.parent
            if parent is not None and wu.is_terminal(self.sup.get(parent).status):
                self._expect_ended(work_id)
        for notices in Path(self.fifos).glob("*.notices"):
            parent = notices.name.split(".")[0]
            ids = [line.split()[0] for line in notices.read_text().splitlines()]
            assert len(ids) == len(set(ids)), f"{parent} got a notice twice: {ids}"
            if not self.sup._closed:
                assert all(self.sup.get(i).parent == parent for i in ids)

    def _expect_app_notice(self, work_id: str) -> None:
        eventually(lambda: self._drain_app(work_id), what=f"the notice of {work_id}")

    def _expect_ended(self, work_id: str) -> None:
        eventually(
            lambda: wu.is_terminal(self.sup.get(work_id).status),
            what=f"{work_id} to end with its parent",
        )

    def _drain_app(self, work_id: str) -> bool:
        mailbox = self.sup.notifications()
        while (notice := mailbox.get_nowait()) is not None:
            self.app_notices[notice.id] += 1
        return self.app_notices[work_id] == 1


Hierarchies.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_hierarchies() -> None:
    Hierarchies.TestCase().runTest()
