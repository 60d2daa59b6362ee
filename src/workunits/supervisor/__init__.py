"""The supervisor: registry, routing, mailboxes, sweep, and the ``Supervisor`` facade."""

from workunits.supervisor.facade import Supervisor
from workunits.supervisor.handle import WorkHandle
from workunits.supervisor.mailbox import Mailbox, MailboxClosed

__all__ = ["Mailbox", "MailboxClosed", "Supervisor", "WorkHandle"]
