"""``UnitMessaging``: messages between units -- tells and asks to teammates, monitors' events.

Owned by the SupervisorActor; every method runs in its thread. Nothing here
waits: an ask is routed with a token and a *route* (``supervisor.actor.asks``) that
is called once, when the teammate's actor reports the answer or when the
teammate ends. So an ask blocks neither this actor nor the teammate's
WorkActor, and no asker waits on a unit that can no longer answer.

A teammate that restarts (``_core.restart``) answers no ask of the attempt that
ended: those fail with TeammateRestarted. What is sent while it restarts is
held here, in order, and delivered to the next attempt once its actor is up
(its ``on_start`` runs before the process reads them); if it ends instead,
the held asks fail with its end. An asker that gives up first is forgotten.
"""

from __future__ import annotations

from typing import Any

import pykka

from workunits._core.errors import (
    SpecError,
    SupervisorClosed,
    TeammateEnded,
    TeammateRestarted,
    WorkunitsError,
)
from workunits._core.record import WorkRecord
from workunits._core.status import Status, is_terminal
from workunits._wire import frames as m
from workunits._wire.actor_messages import (
    Answered,
    DeliverToUnit,
    MonitorEventReport,
    ReplyToUnit,
    SendFromUnit,
)
from workunits.supervisor.actor.asks import PendingAsks, Route, deliver
from workunits.supervisor.actor.notices import Notices
from workunits.supervisor.actor.slots import Ending
from workunits.supervisor.actor.units import Units

BetweenUnits = SendFromUnit | Answered | MonitorEventReport


def reply_to_unit(units: Units, unit: str, req: int, ok: bool, value: Any) -> None:
    """Answer request ``req`` of a unit's process (through its actor)."""
    units.tell(unit, ReplyToUnit(m.Reply(req, ok, value)))


class UnitMessaging:
    def __init__(self, units: Units, notices: Notices) -> None:
        self._units = units
        self._notices = notices
        self._asks = PendingAsks()
        # Frames sent to a teammate while it restarts, in order, per teammate.
        self._held: dict[str, list[m.Deliver]] = {}

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
        if self._units.evicted(target):  # ended long enough ago to leave memory
            record = self._units.get(target)
            if not self._units.kinds.actor_class(target[0]).accepts_messages:
                raise SpecError(f"{target} is a {record.kind} unit; only teammates take messages")
            raise TeammateEnded(f"{target} {_not_taking(record, None)}")
        record = self._units.lookup(target)
        if not self._units.kinds.actor_class(target[0]).accepts_messages:
            raise SpecError(f"{target} is a {record.kind} unit; only teammates take messages")
        slot = self._units.slot(target)
        ref = None if slot is None else slot.actor
        ending = None if slot is None else slot.ending
        restarting = record.restart is not None and record.retry_at is not None
        if (
            record.status != Status.RUNNING
            or ending is not None
            or (ref is None and not restarting)
        ):
            raise TeammateEnded(f"{target} {_not_taking(record, ending)}")
        token = 0 if reply is None or not ask else self._asks.add(target, reply)
        frame = m.Deliver(token, message, ask)
        if ref is None:  # between two attempts: the next one gets it
            self._held.setdefault(target, []).append(frame)
            return token
        try:
            ref.tell(DeliverToUnit(frame))
        except pykka.ActorDeadError:  # it stopped; its end is queued behind this call
            if record.restart is not None and record.restart.ever:
                # Its end may be a restart: the next attempt gets it, or its end fails it.
                self._held.setdefault(target, []).append(frame)
                return token
            self._asks.pop(target, token)
            raise TeammateEnded(f"{target} has ended; it takes no more messages") from None
        return token

    def forget_ask(self, target: str, token: int) -> None:
        """The asker gave up (timeout, cancelled task): drop its route."""
        self._asks.pop(target, token)

    # -- ends --------------------------------------------------------------------------

    def restarting(self, work_id: str, why: str) -> None:
        """A teammate's attempt ended and the next starts: the asks it had fail, naming why.

        Asks held for the next attempt (sent after its actor stopped) stay open.
        """
        held = {frame.token for frame in self._held.get(work_id, ())}
        for route in self._asks.pop_all(work_id, keep=held):
            again = TeammateRestarted(
                f"{work_id} restarted before it answered ({why}); its new attempt did not "
                f"get this ask: ask again"
            )
            deliver(route, False, again)

    def restarted(self, work_id: str) -> None:
        """A teammate's next attempt has its actor: what was held goes to it, in order."""
        held = self._held.pop(work_id, [])
        slot = self._units.slot(work_id)
        ref = None if slot is None else slot.actor
        if ref is None:
            return  # it could not start: its end (now committed) fails the held asks
        for frame in held:
            if frame.ask and not self._asks.is_open(work_id, frame.token):
                continue  # its asker gave up waiting
            try:
                ref.tell(DeliverToUnit(frame))
            except pykka.ActorDeadError:
                return  # this attempt ended already; its end decides for the asks

    def fail_asks(self, record: WorkRecord) -> None:
        """Part of the terminal transition: asks still open to this unit fail now."""
        self._held.pop(record.id, None)  # a held tell has nobody to go to
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
