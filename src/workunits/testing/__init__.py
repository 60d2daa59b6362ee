"""Test helpers for workunits and for users' own kinds.

- ``ManualClock``: an injectable clock that moves only when told; pair it with
  ``Supervisor(clock=..., tick_interval=None)`` and drive time with ``sup.tick()``.
- ``ScriptedWork`` / ``ScriptSpec`` / ``ScriptedDriver``: a deterministic kind with
  no OS process; the test tells each unit to write, exit or fail, and every call
  returns once it has happened.
- ``LifecycleMachine`` / ``ScriptedLifecycleMachine``: Hypothesis state machines
  that check the DESIGN §2 invariants after every step; subclass them for your
  own kind. They need the ``hypothesis`` package and are imported on first use.

Time and ordering without sleeps::

    clock = ManualClock()
    with Supervisor(state_dir, clock=clock, tick_interval=None, eviction_grace=10) as sup:
        drive = ScriptedDriver(sup)          # registers ScriptedWork as kind "x"
        unit = drive.start(description="demo")
        drive.write(unit.id, b"hello")       # on disk when this returns
        assert sup.read_output(unit.id) == b"hello"
        drive.exit(unit.id, 0)               # returns the terminal record
        sup.notifications().get(timeout=5)   # its notice taken: it may leave memory
        clock.advance(10)
        assert sup.tick() == 1               # evicted exactly at the grace

Your own kind under the lifecycle invariants::

    class MyKindMachine(LifecycleMachine):
        def setup(self):
            self.sup.register_kind("k", MyWorkActor)

        def submit_unit(self):
            return self.sup.submit("k", MySpec(...))

    TestMyKind = MyKindMachine.TestCase
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workunits._core.errors import NotRunning as NotRunning
from workunits.testing._clock import ManualClock as ManualClock
from workunits.testing._scripted import ScriptedDriver as ScriptedDriver
from workunits.testing._scripted import ScriptedWork as ScriptedWork
from workunits.testing._scripted import ScriptSpec as ScriptSpec

if TYPE_CHECKING:
    from workunits.testing._machine import ChangeLog as ChangeLog
    from workunits.testing._machine import LifecycleMachine as LifecycleMachine
    from workunits.testing._machine import ScriptedLifecycleMachine as ScriptedLifecycleMachine
    from workunits.testing._machine import UnitModel as UnitModel

__all__ = [
    "ChangeLog",
    "LifecycleMachine",
    "ManualClock",
    "NotRunning",
    "ScriptSpec",
    "ScriptedDriver",
    "ScriptedLifecycleMachine",
    "ScriptedWork",
    "UnitModel",
]

_MACHINE_NAMES = frozenset(
    {"ChangeLog", "LifecycleMachine", "ScriptedLifecycleMachine", "UnitModel"}
)


def __getattr__(name: str) -> Any:
    # The state machines import hypothesis, a test-only dependency: load them on first use.
    if name in _MACHINE_NAMES:
        from workunits.testing import _machine  # noqa: PLC0415 - deferred on purpose

        return getattr(_machine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
