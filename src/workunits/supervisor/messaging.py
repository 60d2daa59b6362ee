"""``UnitMessaging``: messages between units -- tells and asks to teammates, monitors' events.

Owned by the SupervisorActor; every method runs in its thread. Nothing here
waits: an ask is routed with a token and a *route* (``supervisor.asks``) that
is called once, when the teammate's actor reports the answer or when the
teammate ends. So an ask blocks neither this actor nor the teammate's
WorkActor, and no asker waits on a unit that can no longer answer.
"""

from __future__ import annotations

from typing import Any

import pykka

from workunits._errors import SpecError, SupervisorClosed, TeammateEnded, WorkunitsError
from workunits._record import WorkRecord
from workunits._status import Status, is_terminal
from workunits._wire import frames as m
from workunits._wire.actor_messages import (
    Answered,
    DeliverToUnit,
    MonitorEventReport,
    ReplyToUnit,
    SendFromUnit,
)
from workunits.supervisor.asks import PendingAsks, Route, deliver
from workunits.supervisor.notices import Notices
from workunits.supervisor.slots import Ending
from workunits.supervisor.units import Units

BetweenUnits = SendFromUnit | Answered | MonitorEventReport


def reply_to_unit(units: Units, unit: str, req: int, ok: bool, value: Any) -> None:
    """Answer request ``req`` of a unit's process (through its actor)."""
    units.tell(unit, ReplyToUnit(m.Reply(req, ok, value)))


class UnitMessaging:
    def __init__(self, units: Units, notices: Notices) -> None:
        self._units = units
        self._notices = notices
        self._asks = PendingAsks()

    # -- tells from WorkActors -----------------------------------------------------

    def between_units(self, message: BetweenUnits) -> None:
        match message:
            case SendFromUnit(sender, request):
                self._send_from_unit(sender, request)
            case Answered(work_id, answer):
                route = self._asks.pop(work_id, answer.token)
                if route is not None:
                    deliver(route, True, answer)
            case MonitorEventReport(event):
                self._notices.post_event(event)

    def _send_from_unit(self, sender: str, request: m.Send) -> None:
        def reply(ok: bool, value: Any) -> None:
            reply_to_unit(self._units, sender, request.req, ok, value)

        try:
            if request.ask and request.target == sender:
                raise SpecError(f"{sender} asked itself: it would wait for its own answer forever")
            self.send(request.target, request.message, ask=request.ask, reply=reply)
        except WorkunitsError as exc:
            reply(False, exc)
        else:
            if not request.ask:
                reply(True, None)

    # -- asks from the facade --------------------------------------------------------

    def send(self, target: str, message: bytes, *, ask: bool, reply: Route | None = None) -> int:
        """Route a tell, or an ask answered through ``reply``; returns the ask's token.

        Raises at once when the target cannot take it (not a teammate; ended,
        stopping or being killed). The answer, or the teammate's end, reaches
        ``reply`` later.
        """
        record = self._units.lookup(target)
        if not self._units.kinds.actor_class(target[0]).accepts_messages:
            raise SpecError(f"{target} is a {record.kind} unit; only teammates take messages")
        slot = self._units.slot(target)
        ref = None if slot is None else slot.actor
        ending = None if slot is None else slot.ending
        if record.status != Status.RUNNING or ref is None or ending is not None:
            raise TeammateEnded(f"{target} {_not_taking(record, ending)}")
        token = 0 if reply is None or not ask else self._asks.add(target, reply)
        try:
            ref.tell(DeliverToUnit(m.Deliver(token, message, ask)))
        except pykka.ActorDeadError:  # it stopped; its end is queued behind this call
            self._asks.pop(target, token)
            raise TeammateEnded(f"{target} has ended; it takes no more messages") from None
        return token

    def forget_ask(self, target: str, token: int) -> None:
        """The asker gave up (timeout, cancelled task): drop its route."""
        self._asks.pop(target, token)

    # -- ends --------------------------------------------------------------------------

    def fail_asks(self, record: WorkRecord) -> None:
        """Part of the terminal transition: asks still open to this unit fail now."""
        for route in self._asks.pop_all(record.id):
            why = TeammateEnded(f"{record.id} ended ({record.describe_end()}) before it answered")
            deliver(route, False, why)

    def fail_all_asks(self) -> None:
        """At stop: no answer can come any more."""
        for route in self._asks.drain():
            deliver(route, False, SupervisorClosed("the supervisor closed before the answer came"))


def _not_taking(record: WorkRecord, ending: Ending | None) -> str:
    """Why a teammate takes no more messages, for TeammateEnded."""
    if is_terminal(record.status):
        how = record.status.value
        if record.status != Status.COMPLETED:
            how += f": {record.describe_end()}"
        return f"has ended ({how}); it takes no more messages"
    if ending is Ending.STOP:
        return "is stopping; it takes no more messages"
    if ending is not None:
        return f"is being ended ({ending.value}); it takes no more messages"
    return f"is {record.status.value}; it takes no messages yet"
