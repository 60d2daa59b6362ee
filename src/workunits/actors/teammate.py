"""Teammate units (``t``): an instance of a class in its own process, taking messages.

A teammate is an agent whose body is ``runtime.teammate.serve``: same process,
channel, transcript, children and endings (kill; cancel, then SIGKILL after the
grace) as an agent. This actor adds, in its own thread: forwarding the
``Deliver`` and ``Stop`` frames the supervisor routes to it, and handing each
``Answer`` back to the supervisor, which owns the table of open asks. It never
waits for an answer, so an ask blocks neither this actor nor the supervisor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from workunits._errors import SpecError
from workunits._runtime import messages as m
from workunits.actors.agent import AgentActor, AgentSpec


@dataclass(frozen=True, slots=True)
class TeammateSpec(AgentSpec):
    """An AgentSpec whose call is ``serve(cls, args, kwargs)``."""

    @classmethod
    def for_class(
        cls,
        teammate_cls: type[Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        memory_limit: int | None = None,
    ) -> TeammateSpec:
        """Pickle the class and its arguments now (caller's thread): SpecError registers nothing."""
        from workunits._runtime.teammate import serve  # noqa: PLC0415 - runtime imports actors

        if not isinstance(teammate_cls, type):
            raise SpecError(f"a teammate is made from a class, got {type(teammate_cls).__name__}")
        spec = AgentSpec.build(
            serve, (teammate_cls, tuple(args), dict(kwargs)), {}, memory_limit=memory_limit
        )
        return cls(spec.payload, teammate_cls.__qualname__, spec.limits)


# -- messages --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeliverToUnit:
    """Supervisor -> teammate actor: pass this frame to the process."""

    frame: m.Deliver


@dataclass(frozen=True, slots=True)
class StopTeammate:
    """Supervisor -> teammate actor: stop after the messages already delivered."""


@dataclass(frozen=True, slots=True)
class Answered:
    """Teammate actor -> supervisor: the process answered an ask."""

    work_id: str
    answer: m.Answer


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

    def _from_unit(self, frame: Any) -> None:
        if isinstance(frame, m.Answer):
            self.unit.tell_supervisor(Answered(self.unit.id, frame))
        else:
            super()._from_unit(frame)
