"""The lifecycle state machine over scripted units and real shell units.

Hypothesis picks the order: start, write, exit, fail, kill, cancel, read,
retain, release, advance the clock and tick, take notifications. The
invariants of ``LifecycleMachine`` (DESIGN §2) are checked after every step.
"""

from __future__ import annotations

import os
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import rule

from workunits import WorkHandle
from workunits.testing import LifecycleMachine, ScriptedLifecycleMachine


class SupervisorMachine(ScriptedLifecycleMachine):
    """Scripted units, plus shell units that finish by themselves or run until ended."""

    QUICK_OUTPUT: ClassVar[bytes] = b"abc\n"

    def setup(self) -> None:
        super().setup()
        self.shell_output: dict[str, bytes] = {}

    def expected_output(self, work_id: str) -> bytes | None:
        if work_id in self.shell_output:
            return self.shell_output[work_id]
        return super().expected_output(work_id)

    @rule(target=LifecycleMachine.units)
    def start_quick_shell(self) -> str:
        handle = self.sup.shell("echo abc")
        self.shell_output[handle.id] = self.QUICK_OUTPUT
        return self.track(handle)

    @rule(target=LifecycleMachine.units)
    def start_sleeping_shell(self) -> str:
        handle = self.sup.shell(["sleep", "30"])
        self.shell_output[handle.id] = b""
        return self.track(handle)


# `make mutate` reruns this for every mutant of the registry: it asks for few examples.
EXAMPLES = int(os.environ.get("WORKUNITS_MACHINE_EXAMPLES", "50"))

SupervisorMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# A green run takes seconds; the long timeout is for shrinking a failure to its shortest form.
TestSupervisorMachine = pytest.mark.timeout(600)(SupervisorMachine.TestCase)


class ShellOnlyMachine(LifecycleMachine):
    """The kind-agnostic base on its own, as a user would subclass it for a kind."""

    def submit_unit(self) -> WorkHandle:
        return self.sup.shell(["sleep", "30"])

    def expected_output(self, work_id: str) -> bytes | None:
        return b""


ShellOnlyMachine.TestCase.settings = settings(
    max_examples=max(1, EXAMPLES // 5),
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestShellOnlyMachine = pytest.mark.timeout(600)(ShellOnlyMachine.TestCase)
