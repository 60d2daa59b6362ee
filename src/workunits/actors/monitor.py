"""Monitor units (``m``): a watcher whose matching lines become events for its parent.

The unit process (``runtime.monitor.watch``) runs the source and does the
matching and rate limiting; this actor (as an agent's) turns each
``MonitorMatch`` frame into a ``MonitorEvent`` and tells the supervisor, which
puts it in the parent's mailbox (or passes it into an agent parent's process).
Events travel the same FIFO path as the unit's end, so all of them reach the
parent before its one terminal notification.
"""

from __future__ import annotations

from typing import Any, ClassVar

from workunits._core.errors import SpecError
from workunits._core.record import MonitorEvent
from workunits._wire import frames as m
from workunits._wire.actor_messages import MonitorEventReport
from workunits._wire.specs import (
    MonitorSpec,
)
from workunits.actors.agent import AgentActor


class MonitorActor(AgentActor):
    kind: ClassVar[str] = "monitor"

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        if not isinstance(spec, MonitorSpec):
            raise SpecError(f"a monitor unit needs a MonitorSpec, got {type(spec).__name__}")

    def _from_unit(self, frame: Any) -> None:
        if isinstance(frame, m.MonitorMatch):
            event = MonitorEvent(self.unit.id, frame.line, frame.at, frame.suppressed)
            self.unit.tell_supervisor(MonitorEventReport(event))
        else:
            super()._from_unit(frame)
