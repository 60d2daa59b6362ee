"""The supervisor: registry, routing, mailboxes, sweep, and the ``Supervisor`` facade.

Its names are imported on first use (see ``workunits._lazy``): the unit runtime
imports ``supervisor.mailbox`` and must not load the supervisor with it.
"""

from typing import TYPE_CHECKING

from workunits import _lazy
from workunits.supervisor.mailbox import Mailbox, MailboxClosed

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor as Supervisor
    from workunits.supervisor.handle import WorkHandle as WorkHandle

__all__ = ["Mailbox", "MailboxClosed", "Supervisor", "WorkHandle"]

__getattr__, __dir__ = _lazy.exports(
    __name__,
    globals(),
    {
        "Supervisor": "workunits.supervisor.facade",
        "WorkHandle": "workunits.supervisor.handle",
    },
)
