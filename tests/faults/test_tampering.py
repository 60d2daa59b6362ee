"""Tampering: a row changed while no supervisor runs is refused; a spec in it never runs.

§6: a stored spec carries an HMAC under the state dir's key, checked before the
reference is resolved or anything is unpickled. A unit submitted by a client
(``wu.connect(...).agent("module:qualname", ...)``) waits ``pending`` in the
ledger; an attacker with write access to ``ledger.db`` edits its row; the next
supervisor must fail the unit with ``LedgerTampered`` instead of running it.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

import workunits as wu
from workunits import Status, Supervisor


class _Evil:
    """Unpickling this creates a directory: proof that tampered bytes were loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Callable[[str], None], tuple[str]]:
        return (os.mkdir, (self.path,))


def _new_args(spec: bytes, evil: Path) -> tuple[bytes, str]:
    doc = orjson.loads(spec)
    doc["args"] = [str(evil)]
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS), "ref"


def _new_ref(spec: bytes, evil: Path) -> tuple[bytes, str]:
    doc = orjson.loads(spec)
    doc["ref"] = "os:mkdir"
    doc["args"] = [str(evil)]
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS), "ref"


def _as_pickle(spec: bytes, evil: Path) -> tuple[bytes, str]:
    return pickle.dumps(_Evil(str(evil))), "pickle"


@pytest.mark.parametrize("tamper", [_new_args, _new_ref, _as_pickle])
def test_a_tampered_pending_spec_fails_with_ledger_tampered_and_never_runs(
    tmp_path: Path, tamper: Callable[[bytes, Path], tuple[bytes, str]]
) -> None:
    state = tmp_path / "state"
    marker, evil = tmp_path / "marker", tmp_path / "evil"
    client = wu.connect(state)
    unit = client.agent("tests.faults.jobs:touch", str(marker))
    untouched = client.agent("tests.faults.jobs:touch", str(tmp_path / "good"))
    assert client.get(unit.id).status == Status.PENDING

    with sqlite3.connect(state / "ledger.db") as db:
        (spec,) = db.execute("SELECT spec FROM units WHERE id = ?", (unit.id,)).fetchone()
        data, fmt = tamper(spec, evil)
        changed = db.execute(
            "UPDATE units SET spec = ?, spec_format = ? WHERE id = ?", (data, fmt, unit.id)
        ).rowcount
        assert changed == 1
    db.close()

    with Supervisor(state, install_signal_handlers=False) as sup:
        record = sup.wait(unit.id, timeout=20)
        assert record.status == Status.FAILED, record
        assert "LedgerTampered" in (record.error or ""), record.error
        assert not marker.exists()
        assert not evil.exists()
        # The untampered unit next to it runs as usual.
        assert sup.result(untouched.id, timeout=20) == str(tmp_path / "good")


def test_a_json_result_changed_outside_workunits_is_refused_as_tampered(tmp_path: Path) -> None:
    # JSON runs no code, but a caller acts on what it says: {"approved": false}
    # must not read as true because someone edited the row.
    state = tmp_path / "state"
    with Supervisor(state, install_signal_handlers=False) as sup:
        unit = sup.agent("tests.faults.jobs:touch", str(tmp_path / "marker"))
        assert sup.result(unit.id, timeout=20) == str(tmp_path / "marker")
    with sqlite3.connect(state / "ledger.db") as db:
        db.execute("UPDATE units SET result = ? WHERE id = ?", (b'"/etc/passwd"', unit.id))
    db.close()

    with (
        Supervisor(state, install_signal_handlers=False) as sup,
        pytest.raises(wu.LedgerTampered, match=rf"{unit.id}.*result fails its integrity check"),
    ):
        sup.result(unit.id, timeout=20)
    with wu.connect(state) as client, pytest.raises(wu.LedgerTampered, match=unit.id):
        client.result(unit.id, timeout=20)


def test_a_result_changed_into_bad_json_is_ledger_corrupt_for_every_reader(
    tmp_path: Path,
) -> None:
    """Not orjson's own error: every reader raises the error tree's LedgerCorrupt, naming
    the unit and the column, as a client's read of the same row does."""
    state = tmp_path / "state"
    with Supervisor(state, install_signal_handlers=False) as sup:
        unit = sup.agent("tests.faults.jobs:touch", str(tmp_path / "marker"))
        assert sup.result(unit.id, timeout=20) == str(tmp_path / "marker")
    with sqlite3.connect(state / "ledger.db") as db:
        (fmt,) = db.execute("SELECT result_format FROM units WHERE id = ?", (unit.id,)).fetchone()
        assert fmt == "json"
        # Unsigned, as a result written before JSON was signed: the JSON is what fails.
        db.execute(
            "UPDATE units SET result = ?, result_mac = NULL WHERE id = ?",
            (b"\xff\x00\xff", unit.id),
        )
    db.close()

    with (
        Supervisor(state, install_signal_handlers=False) as sup,
        pytest.raises(wu.LedgerCorrupt, match=rf"{unit.id}.*column result"),
    ):
        sup.result(unit.id, timeout=20)
    with pytest.raises(wu.LedgerCorrupt, match=unit.id):
        wu.connect(state).result(unit.id, timeout=20)
