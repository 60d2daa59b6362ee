"""``Notices``: where a parent hears of its children -- its process, or its mailbox.

Owned by the SupervisorActor; runs in its thread. A parent whose kind relays
(an agent) gets child notices and monitor events in its own process, through
its actor; any other parent, and the application (owner None), gets them in a
``Mailbox``.

The application's notices are claimed from the ledger's outbox, so each goes to
one consumer whether it reads ``sup.notifications()`` here or a client in another
process; the mailbox has a ledger connection of its own (a consumer never waits
behind the actor's writes), and is woken when a notice is written. A daemon
nobody reads from holds no notices in memory, and a late reader still gets
every one. Acknowledgements come back to the actor as ``Acknowledged``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pykka

from workunits._core.claim import Claim
from workunits._core.clock import Clock
from workunits._core.errors import LedgerError, WorkunitsError
from workunits._core.mailbox import Mailbox
from workunits._core.record import MailboxItem, MonitorEvent, Notification, StallEvent, WorkRecord
from workunits._ledger import Ledger
from workunits._wire.actor_messages import ChildEndedToUnit, EventToUnit
from workunits.supervisor.actor.units import Units

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """A notice was acknowledged (told from the consumer's thread, or a unit's actor).

    ``in_ledger``: the consumer already recorded it there (a claim it acknowledged).
    """

    notice: Notification
    in_ledger: bool


@dataclass(frozen=True, slots=True)
class RedeliverChildNotices:
    """Told when a new attempt of a relaying unit has started (``Starts.launch``)."""

    parent: str


class Notices:
    def __init__(
        self, units: Units, ledger: Ledger, clock: Clock, tell_self: Callable[[object], None]
    ) -> None:
        self._units = units
        self._ledger = ledger
        self._clock = clock  # the supervisor's: claims and acks are stamped on its time
        self._tell_self = tell_self  # to the actor, from any thread; never waits
        self._mailboxes: dict[str | None, Mailbox] = {}
        # The root mailbox's own connection, opened at its first claim, in the
        # consumer's thread. Guards _claims: opening and closing it, O(1) besides the open.
        self._claims_lock = threading.Lock()
        self._claims: Ledger | None = None
        self._closed = False

    # -- mailboxes -------------------------------------------------------------------

    def mailbox(self, owner: str | None = None) -> Mailbox:
        """The mailbox of ``owner`` (a unit in memory), or the application's."""
        if owner is not None:
            self._units.lookup(owner)
            return self._mailbox_of(owner)
        root = self._mailboxes.get(None)
        if root is None:
            root = self._mailboxes[None] = Mailbox(
                None, source=self._claim_root, waiting=self._root_waiting
            )
        return root

    def _mailbox_of(self, owner: str | None) -> Mailbox:
        if owner is None:
            return self.mailbox(None)
        mailbox = self._mailboxes.get(owner)
        if mailbox is None:
            mailbox = self._mailboxes[owner] = Mailbox(owner, on_ack=self._acknowledged_here)
        return mailbox

    def _claim_root(self) -> Claim[MailboxItem] | None:
        """The root mailbox's source: claim an application notice in the ledger.

        Runs in the consumer's thread, on the mailbox's own connection; once the
        supervisor has closed, on a connection per call, so a reader can still
        drain what the ledger holds.
        """
        held = self._on_claims(lambda ledger: ledger.outbox.claim(None))
        if held is None:
            return None
        notice, token = held.notice, held.token

        def ack() -> bool:
            done = self._on_claims(lambda ledger: ledger.outbox.ack(notice.id, token))
            if done:
                self._tell(Acknowledged(notice, in_ledger=True))
            return done

        def release() -> bool:
            return self._on_claims(lambda ledger: ledger.outbox.release(notice.id, token))

        return Claim(notice, ack=ack, release=release)

    def _root_waiting(self) -> int:
        """Application notices nobody has claimed (in the consumer's thread)."""
        return self._on_claims(lambda ledger: ledger.outbox.unclaimed_count(None))

    def _on_claims(self, call: Callable[[Ledger], T]) -> T:
        with self._claims_lock:
            closed = self._closed
            if not closed and self._claims is None:
                self._claims = self._ledger.sibling(clock=self._clock)
            claims = self._claims
        if claims is not None:
            try:
                return call(claims)
            except LedgerError:
                if not self._closed:
                    raise
                # closed under us: use a connection of our own, below
        with self._ledger.sibling(clock=self._clock) as own:
            return call(own)

    def _acknowledged_here(self, notice: Notification) -> None:
        """A notice held in memory (a non-root mailbox) was acknowledged."""
        self._tell(Acknowledged(notice, in_ledger=False))

    def _tell(self, message: object) -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            self._tell_self(message)

    def forget(self, owner: str) -> None:
        """The owner left memory: nobody can read its mailbox any more."""
        mailbox = self._mailboxes.pop(owner, None)
        if mailbox is not None:
            mailbox.close()

    def close(self) -> None:
        with self._claims_lock:
            self._closed = True
            claims, self._claims = self._claims, None
        for mailbox in self._mailboxes.values():
            mailbox.close()
        if claims is not None:
            claims.close()

    # -- what goes in ------------------------------------------------------------------

    def notify_parent(self, record: WorkRecord) -> None:
        """The one notice of a terminal unit: into its parent's process, or its mailbox."""
        if self._relay(record.parent, ChildEndedToUnit(record)):
            return
        if record.parent is None:
            root = self._mailboxes.get(None)
            if root is not None:
                root.wake()  # it is in the ledger's outbox, to be claimed
            return
        self._mailbox_of(record.parent).put(Notification.of(record))

    def redeliver(self, parent: str) -> None:
        """A new attempt of ``parent`` runs: hand its process the ends of children whose
        notices no earlier attempt acknowledged (they died with it), marked redelivered.

        Read from the ledger's outbox: an attempt resumed after a supervisor
        restart finds them there too.
        """
        try:
            notices = self._ledger.outbox.undelivered(parent)
        except LedgerError:
            log.exception("ledger: could not read the notices waiting for %s", parent)
            return
        for notice in notices:
            record = self._units.registry.find(notice.id)
            if record is None:
                try:
                    row = self._ledger.units.get(notice.id)
                    if row is None:
                        continue  # expired with its notice still waiting: nothing to hand
                    record = row.to_record()
                except WorkunitsError:
                    log.exception("ledger: could not read %s for its parent", notice.id)
                    continue
            if not self._relay(parent, ChildEndedToUnit(record, redelivered=True)):
                return  # the new attempt already ended

    def post_event(self, event: MonitorEvent | StallEvent) -> None:
        """A monitor's or a stall event: into an agent parent's process, or the parent's mailbox."""
        record = self._units.registry.find(event.id)
        if record is None:
            return
        parent = record.parent
        if parent is not None and parent not in self._units:
            return  # the parent has left memory: nobody is left to read it
        if self._relay(parent, EventToUnit(event)):
            return
        self._mailbox_of(parent).put(event)

    def _relay(self, parent: str | None, message: Any) -> bool:
        """Tell ``message`` to the actor of a parent that relays to its process.

        False when there is no such parent, or it just ended: then the caller
        keeps the item in the parent's mailbox.
        """
        slot = None if parent is None else self._units.slot(parent)
        ref = None if slot is None else slot.actor
        # The unit's own class: a kind's units may run in different classes (actor_for).
        if parent is None or ref is None or not ref.actor_class.relays_notifications:
            return False
        return self._units.tell(parent, message)
