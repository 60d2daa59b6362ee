"""Dream units (``d``): an agent at idle CPU priority, the first work ``shed()`` kills.

Idle priority is applied in the unit process before it runs (``SCHED_IDLE``
where the kernel has it, else nice 19), so a dream uses only CPU time nothing
else wants. Whatever spec it is given, a dream runs idle.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from workunits._wire.zygote_protocol import Limits
from workunits.actors.agent import AgentActor


class DreamActor(AgentActor):
    kind: ClassVar[str] = "dream"
    sheddable: ClassVar[bool] = True

    def _limits(self) -> Limits:
        return replace(self.spec.limits, idle_priority=True)
