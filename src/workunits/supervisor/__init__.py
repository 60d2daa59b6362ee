"""The supervisor: the ``Supervisor`` facade, its actor, registry, routing and sweep.

Nothing below this package imports it: a unit process, the zygote and a
``wu.connect`` client never load it (``make lint`` checks the layers).
"""

from workunits._core.mailbox import Mailbox, MailboxClosed
from workunits.supervisor.facade import Supervisor
from workunits.supervisor.handle import WorkHandle

__all__ = ["Mailbox", "MailboxClosed", "Supervisor", "WorkHandle"]
