"""A supervisor and a client on a PostgreSQL ledger, end to end (real processes, real server)."""

from __future__ import annotations

import operator
from pathlib import Path

import pytest

import workunits as wu
from workunits._core.errors import SpecError


def test_a_supervisor_on_postgres_runs_units_a_client_submits(
    postgres_url: str, state_dir: Path
) -> None:
    with wu.Supervisor(state_dir, ledger=postgres_url, install_signal_handlers=False) as sup:
        own = sup.agent(operator.add, 2, 3)
        assert sup.result(own.id, timeout=30) == 5
        with wu.connect(state_dir, ledger=postgres_url) as client:
            handle = client.shell("echo hello")
            record = client.wait(handle.id, timeout=30)
            assert record.status == wu.Status.COMPLETED
            assert client.get(own.id).status == wu.Status.COMPLETED
    assert not (state_dir / "ledger.db").exists()  # the ledger lives in PostgreSQL only


def test_a_url_given_as_the_state_dir_is_taken_as_the_ledger(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with wu.connect(postgres_url) as client:
        assert client.ledger.where == postgres_url
        assert client.state_dir.resolve() == (tmp_path / ".workunits").resolve()


def test_a_ledger_that_is_not_a_url_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="postgresql:// URL"):
        wu.Supervisor(tmp_path / "state", ledger="ledger.db", install_signal_handlers=False)
    assert not (tmp_path / "state").exists()


def test_schedules_fire_and_record_misses_on_postgres(postgres_url: str, state_dir: Path) -> None:
    from workunits.testing import ManualClock  # noqa: PLC0415 - only this test

    clock = ManualClock()  # 1_000_000: */10 minutes is first due at 1_000_200

    def opened() -> wu.Supervisor:
        return wu.Supervisor(
            state_dir,
            ledger=postgres_url,
            clock=clock,
            tick_interval=None,
            install_signal_handlers=False,
        )

    with opened() as sup:
        sup.schedule("ten", "*/10 * * * *", "shell", "true", catch_up="run-once")
        clock.set(1_000_200)
        sup.tick()
        sup.tick()
    clock.set(1_001_500)  # two due times pass with no supervisor
    with opened() as sup:
        sup.schedule("ten", "*/10 * * * *", "shell", "true", catch_up="run-once")
        sup.tick()
        (info,) = sup.schedules()
        assert info.next_at == 1_002_000
    with wu.connect(state_dir, ledger=postgres_url) as client:
        firings = client.ledger.schedules.firings("ten")
    assert [(f.due_at, f.outcome) for f in firings] == [
        (1_001_400, "fired"),
        (1_000_800, "missed"),
        (1_000_200, "fired"),
    ]


def test_root_notices_on_postgres_are_claimed_once_across_processes(
    postgres_url: str, state_dir: Path, tmp_path: Path
) -> None:
    """The supervisor's own mailbox claims in PostgreSQL (there is no ledger file here)."""
    with wu.Supervisor(state_dir, ledger=postgres_url, install_signal_handlers=False) as sup:
        handle = sup.agent(operator.add, 1, 1)
        with sup.notifications().take(timeout=30) as notice:
            assert isinstance(notice, wu.Notification)
            assert notice.id == handle.id
            assert notice.status == wu.Status.COMPLETED
        with (
            wu.connect(tmp_path / "client", ledger=postgres_url) as client,
            pytest.raises(wu.NoNotification),
        ):
            client.notifications().get(timeout=0.5)  # acknowledged: never again
