"""Progress as evidence: stamped reports with structured evidence, and stall events.

A StallEvent is an event for the parent (its mailbox here), not a status and
not a notice: the quiet unit stays running and still sends its one notice.
Time is a ManualClock, advanced by the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import workunits as wu
from workunits._ledger import Ledger
from workunits.testing import ManualClock

from .conftest import eventually
from .retry_jobs import go_quiet, report_evidence


def test_progress_is_stamped_and_keeps_its_evidence(
    msup: wu.Supervisor, clock: ManualClock, state_dir: Path
) -> None:
    unit = msup.agent(report_evidence)
    assert msup.result(unit.id, timeout=30) == "reported"
    record = msup.get(unit.id)
    assert (record.progress, record.progress_message) == (0.4, "group 3/8")
    assert record.evidence == {"done": 3, "total": 8}
    assert record.progress_at == clock.now()
    with Ledger(state_dir.with_name("manual-state")) as ledger:
        row = ledger.units.require(unit.id)
        assert (row.evidence, row.progress_at) == ({"done": 3, "total": 8}, clock.now())


def test_a_quiet_unit_sends_its_parent_one_stall_event_and_stays_running(
    msup: wu.Supervisor, clock: ManualClock, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    unit = msup.agent(go_quiet, str(gate), stall_after=30.0)
    mailbox = msup.notifications()
    eventually(lambda: msup.get(unit.id).progress_at, what="the unit's first report")
    clock.advance(29.0)
    msup.tick()
    with pytest.raises(wu.NoNotification):
        mailbox.get(timeout=0.05)
    clock.advance(1.0)
    msup.tick()
    event = mailbox.get(timeout=10)
    assert isinstance(event, wu.StallEvent)
    assert (event.id, event.stall_after, event.at) == (unit.id, 30.0, clock.now())
    assert msup.get(unit.id).status == wu.Status.RUNNING  # not a status
    clock.advance(60.0)
    msup.tick()
    with pytest.raises(wu.NoNotification):
        mailbox.get(timeout=0.05)  # once per quiet spell
    gate.write_text("done")
    assert msup.result(unit.id, timeout=30) == "done"
    notice = mailbox.get(timeout=10)
    assert isinstance(notice, wu.Notification)
    assert notice.id == unit.id


def test_a_bad_stall_after_is_refused(msup: wu.Supervisor) -> None:
    with pytest.raises(wu.SpecError, match="stall_after"):
        msup.agent(report_evidence, stall_after=0)
    assert msup.list() == []
