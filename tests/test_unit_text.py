"""A unit's own text (its error, its progress message) is free text, and its end always lands.

SQLite and orjson refuse a lone surrogate (an undecodable byte, as
``os.fsdecode`` gives it), PostgreSQL a NUL. Such a character in an exception
message used to keep the unit's end out of the ledger (not retried, or retried
forever) and one in a progress message failed the unit. Now the end is
written, on either ledger, with the character escaped (a surrogate) or shown
as U+FFFD (a NUL), and the parent gets its notice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.helpers import WAIT
from workunits._core.record import Outcome, storable_text
from workunits.testing import ScriptedDriver

pytestmark = pytest.mark.timeout(60)


def _raise_undecodable() -> None:
    raise ValueError("no such file: /data/caf\udce9")


def _raise_nul() -> None:
    raise ValueError("bad\x00byte")


def _report_undecodable() -> int:
    wu.current().progress(0.5, "reading /data/caf\udce9")
    return 1


def _report_nul() -> int:
    wu.current().progress(0.5, "half\x00way")
    return 2


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_sup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[wu.Supervisor]:
    url = None if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    with wu.Supervisor(tmp_path / "state", ledger=url, install_signal_handlers=False) as sup:
        yield sup


@pytest.mark.parametrize(
    ("body", "kept"),
    [(_raise_undecodable, "caf\\udce9"), (_raise_nul, "bad\ufffdbyte")],
)
def test_an_error_the_ledger_could_not_hold_is_written_with_its_end(
    ledger_sup: wu.Supervisor, body: Callable[[], None], kept: str
) -> None:
    handle = ledger_sup.agent(body)
    record = ledger_sup.wait(handle.id, timeout=WAIT)
    assert record.status is wu.Status.FAILED
    assert record.durable  # its end is in the ledger, not waiting to be retried
    assert record.error is not None
    assert kept in record.error
    assert ledger_sup.notifications().get(timeout=WAIT).id == handle.id
    row = ledger_sup._machinery.ledger.units.require(handle.id)
    assert row.status == "failed"
    assert row.error == record.error


@pytest.mark.parametrize(
    ("body", "value", "kept"),
    [(_report_undecodable, 1, "reading /data/caf\\udce9"), (_report_nul, 2, "half\ufffdway")],
)
def test_a_progress_message_the_ledger_could_not_hold_does_not_fail_the_unit(
    ledger_sup: wu.Supervisor, body: Callable[[], int], value: int, kept: str
) -> None:
    handle = ledger_sup.agent(body)
    assert ledger_sup.result(handle.id, timeout=WAIT) == value
    record = ledger_sup.get(handle.id)
    assert record.durable
    assert record.progress_message == kept
    assert ledger_sup._machinery.ledger.units.require(handle.id).progress_message == kept


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("plain", "plain"),
        ("café ✓", "café ✓"),
        ("a\x00b", "a\ufffdb"),
        ("caf\udce9", "caf\\udce9"),
        ("\x00\udcff", "\ufffd\\udcff"),
    ],
)
def test_storable_text_changes_only_what_a_ledger_refuses(text: str, kept: str) -> None:
    assert storable_text(text) == kept
    assert storable_text(kept) == kept  # once is enough
    assert Outcome(wu.Status.FAILED, error=text).error == kept


def test_a_scripted_units_error_is_stored_as_every_ledger_keeps_it(
    msup: wu.Supervisor, drive: ScriptedDriver
) -> None:
    """What the public lifecycle machine asserts for any text its ``fail`` rule draws."""
    unit = drive.start()
    record = drive.fail(unit.id, "\x00\udcff")
    assert record.error == "\ufffd\\udcff"
    assert msup._machinery.ledger.units.require(unit.id).error == record.error
