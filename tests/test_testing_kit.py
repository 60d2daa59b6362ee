"""The testing kit's own settings: Supervisor options for the machine, and a hung kind that
fails fast instead of costing minutes of shrinking."""

from __future__ import annotations

import time
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings

from workunits import InvalidArgument, WorkHandle
from workunits.testing import LifecycleMachine, ScriptedWork, ScriptSpec

pytestmark = pytest.mark.timeout(300)


class HungWork(ScriptedWork):
    """A kind with a bug: it ignores every signal, so a killed unit never ends."""

    def signal_work(self, signum: int) -> None:
        self.signals.append(signum)


class _HungMachine(LifecycleMachine):
    wait_timeout: ClassVar[float] = 0.5

    def setup(self) -> None:
        self.sup.register_kind("h", HungWork)

    def submit_unit(self) -> WorkHandle:
        return self.sup.submit("h", ScriptSpec())


def test_a_hung_kind_fails_naming_it_and_costs_about_one_wait() -> None:
    _HungMachine._hung = None
    case = _HungMachine.TestCase
    # The settings the testing guide gives for a kind suspected of hanging: no shrinking.
    case.settings = settings(
        max_examples=30,
        stateful_step_count=8,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
        report_multiple_bugs=False,
    )
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"a hung kind") as failed:
        case("runTest").runTest()
    took = time.monotonic() - started
    assert "hung" in str(failed.value)
    assert "h" in str(failed.value)  # names the unit (an h… ID)
    # The failing example is reported as found: its one wait, no shrinking, no 5 s close.
    # About 4 s on an idle machine; shrinking it cost minutes. The bound leaves room
    # for a loaded one.
    assert took < 60, f"the hung kind cost {took:.0f} s"


class _WithOptions(LifecycleMachine):
    supervisor_options: ClassVar[dict[str, object]] = {"kinds": {"k": ScriptedWork}}

    def submit_unit(self) -> WorkHandle:
        return self.sup.submit("k", ScriptSpec())


def test_supervisor_options_reach_the_machines_supervisor() -> None:
    machine = _WithOptions()
    try:
        handle = machine.submit_unit()  # the kind came in through kinds=, no setup()
        assert handle.id.startswith("k")
    finally:
        machine.sup.close()


class _TakesTheClock(LifecycleMachine):
    supervisor_options: ClassVar[dict[str, object]] = {"tick_interval": 0.05}


def test_options_the_machine_sets_itself_are_refused_saying_why() -> None:
    with pytest.raises(InvalidArgument, match=r"may not set \['tick_interval'\]"):
        _TakesTheClock()
