"""Requests from inside unit processes: spawn a child, and kill / cancel / stop / get
one's own descendants. A base class of ``SupervisorActor``; runs in its thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workunits._errors import UnknownWork, WorkunitsError
from workunits._record import WorkRecord
from workunits._status import Reason
from workunits._wire import frames as m
from workunits._wire.actor_messages import ReplyToUnit

if TYPE_CHECKING:
    from workunits.supervisor.registry import Registry


class ChildRequests:
    """What a unit may ask of the supervisor about its children; mixed into SupervisorActor."""

    if TYPE_CHECKING:  # provided by SupervisorActor and its other bases
        registry: Registry

        def register(  # the registration chokepoint, with what a child request gives
            self, letter: str, spec: Any, *, parent: str, description: str, timeout: float | None
        ) -> WorkRecord: ...
        def _lookup(self, work_id: str) -> WorkRecord: ...
        def _tell(self, work_id: str, message: Any) -> bool: ...
        def _kill(self, work_id: str, reason: Reason) -> bool: ...
        def cancel(self, work_id: str, grace: float, reason: Reason = Reason.CANCELLED) -> bool: ...
        def stop_teammate(self, work_id: str) -> bool: ...

    def _reply(self, parent: str, req: int, ok: bool, value: Any) -> None:
        self._tell(parent, ReplyToUnit(m.Reply(req, ok, value)))

    def _spawn_child(self, parent: str, request: m.Spawn) -> None:
        try:
            record = self.register(
                request.letter,
                request.spec,
                parent=parent,
                description=request.description,
                timeout=request.timeout,
            )
        except WorkunitsError as exc:
            self._reply(parent, request.req, False, f"{type(exc).__name__}: {exc}")
        else:
            self._reply(parent, request.req, True, record.id)

    def _control_child(self, parent: str, request: m.Control) -> None:
        """kill / cancel / get for a unit's own descendants only."""
        try:
            target = self._lookup(request.target)
            if not self._descends_from(target, parent):
                raise UnknownWork(f"{request.target} is not a descendant of {parent}")
            if request.op == "kill":
                value: Any = self._kill(target.id, Reason.KILLED)
            elif request.op == "cancel":
                value = self.cancel(target.id, float(request.arg))
            elif request.op == "stop":
                value = self.stop_teammate(target.id)
            else:
                value = target
        except WorkunitsError as exc:
            self._reply(parent, request.req, False, f"{type(exc).__name__}: {exc}")
        else:
            self._reply(parent, request.req, True, value)

    def _descends_from(self, record: WorkRecord, ancestor: str) -> bool:
        while record.parent is not None:
            if record.parent == ancestor:
                return True
            found = self.registry.find(record.parent)
            if found is None:
                return False
            record = found
        return False
