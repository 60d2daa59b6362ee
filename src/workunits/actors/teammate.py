"""Teammate units (``t``): an instance of a class in its own process, taking messages.

A teammate is an agent whose body is ``runtime.teammate.serve``: same process,
channel, transcript, children and endings (kill; cancel, then SIGKILL after the
grace) as an agent. This actor adds (as an agent's): forwarding the
``Deliver`` and ``Stop`` frames the supervisor routes to it, and handing each
``Answer`` back to the supervisor, which owns the table of open asks. It never
waits for an answer, so an ask blocks neither this actor nor the supervisor.
Unlike an agent's, a teammate's end always waits for its channel to drain.
"""

from __future__ import annotations

from typing import Any, ClassVar

from workunits._core.errors import SpecError
from workunits._core.record import Outcome
from workunits._wire import frames as m
from workunits._wire.actor_messages import Answered, DeliverToUnit, StopTeammate
from workunits._wire.specs import TeammateSpec
from workunits.actors.agent import AgentActor

# -- messages --------------------------------------------------------------------


class TeammateActor(AgentActor):
    kind: ClassVar[str] = "teammate"
    accepts_messages: ClassVar[bool] = True

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        if not isinstance(spec, TeammateSpec):
            raise SpecError(f"a teammate unit needs a TeammateSpec, got {type(spec).__name__}")

    def on_receive(self, message: Any) -> Any:
        match message:
            case DeliverToUnit(frame):
                # If the process is already gone this is a no-op: the supervisor
                # fails the ask when our end reaches it, so nothing waits forever.
                self._send(frame)
            case StopTeammate():
                self._send(m.Stop())
            case _:
                return super().on_receive(message)
        return None

    def end_on_exit(self, exit_code: int | None, signum: int | None) -> Outcome | None:
        """Always after the drain, even when killed or cancelled: an answer the
        process sent before it exited is still in the channel, and its asker must
        get it before the end fails the asks left open."""
        return None

    def _from_unit(self, frame: Any) -> None:
        if isinstance(frame, m.Answer):
            self.unit.tell_supervisor(Answered(self.unit.id, frame))
        else:
            super()._from_unit(frame)
