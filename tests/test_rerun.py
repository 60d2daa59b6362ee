"""``retry(id)``: a failed unit started again as a new unit, from the facade, a client and the CLI.

The old unit stays as it ended (terminal is permanent, one notice per unit);
the new one points back (``retry_of``) and takes the old one's idempotency key
in its submit's transaction, so the key names one unit at a time (invariant 12).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import workunits as wu
from workunits._cli import cli

from .retry_jobs import fail_until, report_evidence


def test_retry_starts_a_new_unit_that_takes_the_old_key(sup: wu.Supervisor) -> None:
    old = sup.shell("echo once; exit 2", key="build")
    assert sup.wait(old.id, timeout=30).status == wu.Status.FAILED
    mailbox = sup.notifications()
    assert mailbox.get(timeout=10).id == old.id

    new = sup.retry(old.id)
    assert new.id != old.id
    record = sup.wait(new.id, timeout=30)
    assert (record.retry_of, record.description) == (old.id, "echo once; exit 2")
    assert sup.get(old.id).status == wu.Status.FAILED  # the old unit stays as it ended
    assert sup.shell("echo once; exit 2", key="build").id == new.id  # the key moved
    assert sup.retry(old.id).id == new.id  # a second retry finds the first one's unit
    assert [mailbox.get(timeout=10).id] == [new.id]  # one notice: the new unit's
    with pytest.raises(wu.NoNotification):
        mailbox.get(timeout=0.1)


def test_only_a_failed_or_killed_unit_is_retried(sup: wu.Supervisor) -> None:
    done = sup.agent(report_evidence)
    sup.wait(done.id, timeout=30)
    with pytest.raises(wu.NotRetryable, match="completed"):
        sup.retry(done.id)
    with pytest.raises(wu.UnknownWork):
        sup.retry("a00000000")


def test_a_client_and_the_cli_retry_through_the_ledger(sup: wu.Supervisor, state_dir: Path) -> None:
    old = sup.agent(fail_until, 2, key="flaky")  # importable: its spec is kept
    assert sup.wait(old.id, timeout=30).status == wu.Status.FAILED
    result = CliRunner().invoke(cli, ["retry", "--state", str(state_dir), "--json", old.id])
    assert result.exit_code == 0, result.output
    with wu.connect(state_dir) as client:
        new = client.retry(old.id)  # the same unit the CLI started
        assert client.row(new.id).retry_of == old.id
        assert new.id in result.output
        # Its first attempt is 1, so fail_until(2) fails again: it ran, as a new unit.
        assert client.wait(new.id, timeout=30).status == wu.Status.FAILED
        assert client.agent(fail_until, 2, key="flaky").id == new.id


def test_a_unit_whose_spec_was_not_kept_says_so(sup: wu.Supervisor, state_dir: Path) -> None:
    old = sup.shell("exit 1")  # cannot resume: its spec lives only in memory
    sup.wait(old.id, timeout=30)
    with wu.connect(state_dir) as client, pytest.raises(wu.NotRetryable, match="spec"):
        client.retry(old.id)
    result = CliRunner().invoke(cli, ["retry", "--state", str(state_dir), old.id])
    assert result.exit_code != 0
    assert "submit it again" in result.output
