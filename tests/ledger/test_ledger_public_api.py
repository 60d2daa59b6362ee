"""The ledger's public names are declared, and a change to them is deliberate."""

from __future__ import annotations

import workunits._ledger
from workunits._core.errors import LedgerError, WorkunitsError

EXPECTED = {
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
}


def test_all_is_exactly_the_declared_names() -> None:
    assert set(workunits._ledger.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(workunits._ledger, name) is not None


def test_every_ledger_error_is_a_workunits_error() -> None:
    for name in EXPECTED:
        value = getattr(workunits._ledger, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, WorkunitsError), name
    for name in ("LedgerCorrupt", "LedgerFull", "LedgerTampered", "LedgerVersionError"):
        assert issubclass(getattr(workunits._ledger, name), LedgerError)
