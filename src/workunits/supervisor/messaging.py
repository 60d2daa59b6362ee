"""Messages between units, for the SupervisorActor: tells and asks to teammates,
stop, monitors' events, and shedding dreams. A base class of ``SupervisorActor``.

Every method runs in the supervisor actor's thread. Nothing here waits: an ask
is routed with a token and a *route* (``supervisor.asks``) that is called once,
when the teammate's actor reports the answer or when the teammate ends. So an
ask blocks neither this actor nor the teammate's WorkActor, and no asker waits
on a unit that can no longer answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pykka

from workunits._errors import SpecError, SupervisorClosed, TeammateEnded, WorkunitsError
from workunits._record import MonitorEvent, WorkRecord
from workunits._status import Reason, Status, is_terminal
from workunits._wire import frames as m
from workunits._wire.actor_messages import (
    Answered,
    DeliverToUnit,
    EventToUnit,
    MonitorEventReport,
    SendFromUnit,
    StopTeammate,
)
from workunits.supervisor.asks import PendingAsks, Route, deliver

if TYPE_CHECKING:
    from workunits._mailbox import Mailbox
    from workunits.actors.base import WorkActor
    from workunits.supervisor.kinds import Kinds
    from workunits.supervisor.registry import Registry

BetweenUnits = SendFromUnit | Answered | MonitorEventReport


class UnitMessaging:
    """Teammate messages and monitor events; mixed into ``SupervisorActor``."""

    if TYPE_CHECKING:  # provided by SupervisorActor
        registry: Registry
        kinds: Kinds
        _actors: dict[str, pykka.ActorRef[WorkActor]]
        _ending: dict[str, str]

        def _lookup(self, work_id: str) -> WorkRecord: ...
        def _tell(self, work_id: str, message: Any) -> bool: ...
        def _kill(self, work_id: str, reason: Reason) -> bool: ...
        def _relay(self, parent: str | None, message: Any) -> bool: ...
        def _mailbox(self, owner: str | None) -> Mailbox: ...
        def _reply(self, parent: str, req: int, ok: bool, value: Any) -> None: ...

    _asks: PendingAsks

    # -- tells from WorkActors -----------------------------------------------------

    def _between_units(self, message: BetweenUnits) -> None:
        match message:
            case SendFromUnit(sender, request):
                self._send_from_unit(sender, request)
            case Answered(work_id, answer):
                route = self._asks.pop(work_id, answer.token)
                if route is not None:
                    deliver(route, True, answer)
            case MonitorEventReport(event):
                self._post_event(event)

    def _send_from_unit(self, sender: str, request: m.Send) -> None:
        def reply(ok: bool, value: Any) -> None:
            self._reply(sender, request.req, ok, value)

        try:
            if request.ask and request.target == sender:
                raise SpecError(f"{sender} asked itself: it would wait for its own answer forever")
            self.send(request.target, request.message, ask=request.ask, reply=reply)
        except WorkunitsError as exc:
            reply(False, exc)
        else:
            if not request.ask:
                reply(True, None)

    def _post_event(self, event: MonitorEvent) -> None:
        """A monitor's event: into an agent parent's process, or the parent's mailbox."""
        record = self.registry.find(event.id)
        if record is None:
            return
        parent = record.parent
        if parent is not None and parent not in self.registry:
            return  # the parent has left memory: nobody is left to read it
        if self._relay(parent, EventToUnit(event)):
            return
        self._mailbox(parent).put(event)

    # -- asks from the facade --------------------------------------------------------

    def send(self, target: str, message: bytes, *, ask: bool, reply: Route | None = None) -> int:
        """Route a tell, or an ask answered through ``reply``; returns the ask's token.

        Raises at once when the target cannot take it (not a teammate; ended,
        stopping or being killed). The answer, or the teammate's end, reaches
        ``reply`` later.
        """
        record = self._lookup(target)
        if not self.kinds.actor_class(target[0]).accepts_messages:
            raise SpecError(f"{target} is a {record.kind} unit; only teammates take messages")
        ref = self._actors.get(target)
        if record.status != Status.RUNNING or ref is None or target in self._ending:
            raise TeammateEnded(f"{target} {_not_taking(record, self._ending.get(target))}")
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

    def stop_teammate(self, work_id: str) -> bool:
        """Stop after the messages already sent (ends ``completed``); False if not running."""
        record = self._lookup(work_id)
        if not self.kinds.actor_class(work_id[0]).accepts_messages:
            raise SpecError(f"{work_id} is a {record.kind} unit; only teammates are stopped")
        if record.status != Status.RUNNING or work_id in self._ending:
            return False
        self._ending[work_id] = "stop"  # refuses later messages, which the stop would drop
        self._tell(work_id, StopTeammate())
        return True

    def shed(self, n: int | None = None) -> list[str]:
        """Kill up to ``n`` running sheddable units (dreams), newest first; their IDs.

        Newest first: the most recently started dream has the least work to lose.
        """
        candidates = [
            (r.started_at or 0.0, order, r.id)
            for order, r in enumerate(self.registry)
            if r.status == Status.RUNNING
            and self.kinds.actor_class(r.id[0]).sheddable
            and self._ending.get(r.id) != "kill"
        ]
        candidates.sort(reverse=True)
        chosen = candidates if n is None else candidates[:n]
        return [work_id for _, _, work_id in chosen if self._kill(work_id, Reason.SHED)]

    # -- ends --------------------------------------------------------------------------

    def _fail_asks(self, record: WorkRecord) -> None:
        """Part of the terminal transition: asks still open to this unit fail now."""
        for route in self._asks.pop_all(record.id):
            why = TeammateEnded(f"{record.id} ended ({record.describe_end()}) before it answered")
            deliver(route, False, why)

    def _fail_all_asks(self) -> None:
        """At stop: no answer can come any more."""
        for route in self._asks.drain():
            deliver(route, False, SupervisorClosed("the supervisor closed before the answer came"))


def _not_taking(record: WorkRecord, ending: str | None) -> str:
    """Why a teammate takes no more messages, for TeammateEnded."""
    if is_terminal(record.status):
        how = record.status.value
        if record.status != Status.COMPLETED:
            how += f": {record.describe_end()}"
        return f"has ended ({how}); it takes no more messages"
    if ending == "stop":
        return "is stopping; it takes no more messages"
    if ending is not None:
        return f"is being ended ({ending}); it takes no more messages"
    return f"is {record.status.value}; it takes no messages yet"
