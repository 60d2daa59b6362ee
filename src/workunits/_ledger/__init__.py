"""The durable ledger: SQLite in the state dir, so units outlive the process that started them.

Two backends, siblings: ``sqlite/`` (the default: ``db``, the connection, file
modes, read-only opening and the transaction discipline; ``schema``, tables and
forward migrations by ``PRAGMA user_version``; ``backup``) and ``postgres/``
(the same for a ``postgresql://`` URL, with its SQL rewriting and LISTEN). The
modules beside them, one concept each, speak to either through ``backend``:

- ``store``       ``Ledger``: opens the connection and hands out one object per table
                  or concern (below), which share it through ``context``
- ``units``       ``ledger.units``: submits (``submits``, the idempotent insert,
                  invariant 12; ``submit_group``, shared commits) and reads
- ``attempts``    ``ledger.attempts``: writes fenced by attempt (``writes``, the one
                  function that changes a unit's status, with its outbox row),
                  progress, checkpoints, resumes and retries
- ``outbox``      ``ledger.outbox``: notifications claimed and acknowledged (invariant 11)
- ``retains``     ``ledger.retains``: leases that keep ended units visible
- ``requests``    ``ledger.requests``: commands from other processes
- ``signals``     ``ledger.signals``: outside input units wait for
- ``schedules``   ``ledger.schedules``: cron entries and their firings
- ``sessions``    ``ledger.sessions``: supervisor runs, leases, takeovers (``fence``)
- ``claims``      ``ledger.claims``: pending units no session owns, taken by one
- ``retention``   ``ledger.retention``: expiry to a small ``expired`` row, forgetting
- ``context``     what those objects share: the connection, clock, key, large values
                  (``largevalues``, ``valuestore``), polls (``polls``) and the row check
- ``rows``        typed rows and their conversions to and from ``WorkRecord``
- ``unreadable``  rows that do not decode: skipped one by one by readers of many, reported
- ``values``      specs and results: import references, signed pickles, spec hashes
- ``statedir``    the state dir's checks: refused when unsafe, never repaired
- ``lock``        one supervisor per state dir

The store and its rows are imported on first use (see ``workunits._util.lazy``), so
importing the package's errors does not load SQLite.
"""

from typing import TYPE_CHECKING

from workunits._core.errors import LedgerCorrupt as LedgerCorrupt
from workunits._core.errors import LedgerError as LedgerError
from workunits._core.errors import LedgerFull as LedgerFull
from workunits._core.errors import LedgerTampered as LedgerTampered
from workunits._core.errors import LedgerVersionError as LedgerVersionError
from workunits._core.errors import NoLedger as NoLedger
from workunits._core.errors import StaleAttempt as StaleAttempt
from workunits._core.errors import StateDirError as StateDirError
from workunits._core.errors import SupervisorBusy as SupervisorBusy
from workunits._core.errors import UnstorableValue as UnstorableValue
from workunits._core.errors import ValueVersionMismatch as ValueVersionMismatch
from workunits._util import lazy

if TYPE_CHECKING:
    from workunits._ledger.lock import SupervisorLock as SupervisorLock
    from workunits._ledger.requests import LedgerRequest as LedgerRequest
    from workunits._ledger.rows import EXPIRED as EXPIRED
    from workunits._ledger.rows import NewUnit as NewUnit
    from workunits._ledger.rows import UnitRow as UnitRow
    from workunits._ledger.sessions import Session as Session
    from workunits._ledger.sqlite.schema import SCHEMA_VERSION as SCHEMA_VERSION
    from workunits._ledger.store import Ledger as Ledger
    from workunits._ledger.values import Stored as Stored
    from workunits._ledger.writes import NO_RESULT as NO_RESULT
    from workunits._ledger.writes import Write as Write
    from workunits._ledger.writes import WriteOutcome as WriteOutcome
    from workunits._wire.specs import Call as Call

__all__ = [
    "EXPIRED",
    "NO_RESULT",
    "SCHEMA_VERSION",
    "Call",
    "Ledger",
    "LedgerCorrupt",
    "LedgerError",
    "LedgerFull",
    "LedgerRequest",
    "LedgerTampered",
    "LedgerVersionError",
    "NewUnit",
    "NoLedger",
    "Session",
    "StaleAttempt",
    "StateDirError",
    "Stored",
    "SupervisorBusy",
    "SupervisorLock",
    "UnitRow",
    "UnstorableValue",
    "ValueVersionMismatch",
    "Write",
    "WriteOutcome",
]

__getattr__, __dir__ = lazy.exports(
    __name__,
    globals(),
    {
        "SupervisorLock": "workunits._ledger.lock",
        "LedgerRequest": "workunits._ledger.requests",
        "EXPIRED": "workunits._ledger.rows",
        "NewUnit": "workunits._ledger.rows",
        "UnitRow": "workunits._ledger.rows",
        "SCHEMA_VERSION": "workunits._ledger.sqlite.schema",
        "Session": "workunits._ledger.sessions",
        "Ledger": "workunits._ledger.store",
        "Call": "workunits._wire.specs",
        "Stored": "workunits._ledger.values",
        "NO_RESULT": "workunits._ledger.writes",
        "WriteOutcome": "workunits._ledger.writes",
        "Write": "workunits._ledger.writes",
    },
)
