"""``Notices``: where a parent hears of its children -- its process, or its mailbox.

Owned by the SupervisorActor; runs in its thread. A parent whose kind relays
(an agent) gets child notices and monitor events in its own process, through
its actor; any other parent, and the application (owner None), gets them in a
``Mailbox``. The application's mailbox is made when first asked for and filled
then from the ledger's outbox: a daemon nobody reads from holds no notices in
memory, and a late reader still gets every one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka

from workunits._ledger import Ledger
from workunits._mailbox import Mailbox
from workunits._record import MonitorEvent, Notification, StallEvent, WorkRecord
from workunits._wire.actor_messages import ChildEnded, EventToUnit
from workunits.supervisor.units import Units


class Notices:
    def __init__(
        self, units: Units, ledger: Ledger, on_root_take: Callable[[object], None]
    ) -> None:
        self._units = units
        self._ledger = ledger
        self._on_root_take = on_root_take  # a mailbox hook: runs in the consumer's thread
        self._mailboxes: dict[str | None, Mailbox] = {}

    # -- mailboxes -------------------------------------------------------------------

    def mailbox(self, owner: str | None = None) -> Mailbox:
        """The mailbox of ``owner`` (a unit in memory), or the application's."""
        if owner is not None:
            self._units.lookup(owner)
            return self._mailbox_of(owner)
        root = self._mailboxes.get(None)
        if root is None:
            root = self._mailboxes[None] = Mailbox(None, on_take=self._on_root_take)
            for notice in self._ledger.undelivered(None):
                root.put(notice)
        return root

    def _mailbox_of(self, owner: str | None) -> Mailbox:
        if owner is None:
            return self.mailbox(None)
        mailbox = self._mailboxes.get(owner)
        if mailbox is None:
            mailbox = self._mailboxes[owner] = Mailbox(owner)
        return mailbox

    def forget(self, owner: str) -> None:
        """The owner left memory: nobody can read its mailbox any more."""
        mailbox = self._mailboxes.pop(owner, None)
        if mailbox is not None:
            mailbox.close()

    def close(self) -> None:
        for mailbox in self._mailboxes.values():
            mailbox.close()

    # -- what goes in ------------------------------------------------------------------

    def notify_parent(self, record: WorkRecord) -> None:
        """The one notice of a terminal unit: into its parent's process, or its mailbox."""
        if self._relay(record.parent, ChildEnded(record)):
            return
        if record.parent is None and None not in self._mailboxes:
            return  # the ledger's outbox holds it until the application asks
        self._mailbox_of(record.parent).put(Notification.of(record))

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
        if ref is None or not ref.actor_class.relays_notifications:
            return False
        try:
            ref.tell(message)
        except pykka.ActorDeadError:
            return False
        return True
