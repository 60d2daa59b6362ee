"""The supervisor: the ``Supervisor`` facade and everything it runs on.

Two sides, by the thread that runs the code:

- this package's modules run on the *caller's* thread (the facade, handles,
  streams, the pool, waiters, teammate calls, the channel to the actor, the
  machinery that starts and closes it all, and the cleanup thread that closes
  supervisors at exit or on a signal);
- ``actor/`` runs on the ``SupervisorActor``'s thread (the registry, starts,
  endings, eviction, notices, recovery, retries, schedules, the ledger mirror),
  fed by the Ticker's and the Reaper's threads. It never imports the caller's
  side (``make lint`` checks it).

Nothing below this package imports it: a unit process, the zygote and a
``wu.connect`` client never load it (``make lint`` checks the layers).
"""

from workunits._core.mailbox import Mailbox, MailboxClosed
from workunits.supervisor.facade import Supervisor
from workunits.supervisor.handle import WorkHandle

__all__ = ["Mailbox", "MailboxClosed", "Supervisor", "WorkHandle"]
