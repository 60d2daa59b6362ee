"""A supervisor whose ledger COMMITs lose their answers: no unit is lost, none runs twice.

A real proxy (``tests.pg_proxy``) between the supervisor and a real
PostgreSQL server drops both connections right after forwarding a COMMIT,
at each write the issue names: a submit, a claim of a pending unit, a
takeover of a dead session, a schedule's firing, an end, an acknowledgement.
The write landed, and its writer never heard so; each is settled by reading
back before anyone is told. A supervisor also finds, by its rescan, units its
session owns that memory lacks (a write that could not even be read back).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import workunits as wu
from tests.conftest import eventually
from tests.helpers import Host
from tests.pg_proxy import ProxiedLedger
from workunits import Status

pytestmark = pytest.mark.timeout(180)


def _supervisor(state: Path, url: str, **options: object) -> wu.Supervisor:
    return wu.Supervisor(
        state,
        ledger=url,
        install_signal_handlers=False,
        session_lease=2.0,
        **options,  # type: ignore[arg-type]
    )


def _rows(tmp_path: Path, url: str) -> list[wu.WorkRecord]:
    with wu.connect(tmp_path / "look", ledger=url) as client:
        return client.list()


@pytest.mark.parametrize("mode", ["after", "before"])
def test_a_submit_whose_commit_answer_is_lost_returns_its_unit_which_runs_once(
    tmp_path: Path, ledgers: ProxiedLedger, mode: str
) -> None:
    out = tmp_path / "out"
    with _supervisor(tmp_path / "state", ledgers.proxied) as sup:
        cut = ledgers.proxy.arm(r"INSERT INTO units", mode=mode)
        handle = sup.shell(f"echo ran >> {out}")
        assert cut.fired.is_set()
        record = sup.wait(handle.id, timeout=60)
    assert record.status is Status.COMPLETED
    assert out.read_text() == "ran\n"
    assert [r.id for r in _rows(tmp_path, ledgers.direct)] == [handle.id]


@pytest.mark.parametrize("mode", ["after", "before"])
def test_an_end_whose_commit_answer_is_lost_is_told_once(
    tmp_path: Path, ledgers: ProxiedLedger, mode: str
) -> None:
    gate = tmp_path / "gate"
    with _supervisor(tmp_path / "state", ledgers.proxied) as sup:
        handle = sup.shell(f"while [ ! -e {gate} ]; do sleep 0.01; done; echo done")
        eventually(lambda: sup.get(handle.id).status is Status.RUNNING, what="running")
        cut = ledgers.proxy.arm(r"INSERT INTO notifications", mode=mode)
        gate.touch()
        record = sup.wait(handle.id, timeout=60)
        assert cut.fired.is_set()
        assert record.status is Status.COMPLETED
        assert record.durable
        notice = sup.notifications().get(timeout=10)
        assert notice.id == handle.id
        with pytest.raises(wu.NoNotification):
            sup.notifications().get(timeout=0.5)
    with wu.connect(tmp_path / "look", ledger=ledgers.direct) as client:
        assert client.ledger.outbox.row_count() == 1


def test_a_claim_whose_commit_answer_is_lost_still_starts_its_unit(
    tmp_path: Path, ledgers: ProxiedLedger
) -> None:
    with _supervisor(tmp_path / "state", ledgers.proxied) as sup:
        cut = ledgers.proxy.arm(r"SKIP LOCKED")
        with wu.connect(tmp_path / "client", ledger=ledgers.direct) as client:
            handle = client.shell("echo claimed")
            record = client.wait(handle.id, timeout=60)  # not when the session ends
        assert cut.fired.is_set()
        assert record.status is Status.COMPLETED
        assert sup.get(handle.id).status is Status.COMPLETED


def test_a_takeover_whose_commit_answer_is_lost_resumes_the_dead_sessions_units(
    tmp_path: Path, ledgers: ProxiedLedger
) -> None:
    host = Host("pg_host", str(tmp_path / "dead"), ledgers.direct)
    try:
        answer = host.read()
    finally:
        host.sigkill()
        host.close()
    cut = ledgers.proxy.arm(r"SET recovered_by")
    with _supervisor(tmp_path / "state", ledgers.proxied) as sup:
        eventually(cut.fired.is_set, what="the takeover's COMMIT cut", timeout=60)
        unit = answer["id"]
        eventually(
            lambda: (
                sup.get(unit).attempt == 2
                and sup.get(unit).progress_message == "waiting for approval"
            ),
            what="the unit resumed by the takeover",
            timeout=60,
        )
        sup.signal(unit, "approval", "yes")
        record = sup.wait(unit, timeout=60)
    assert record.status is Status.COMPLETED
    assert [(a.attempt, a.reason) for a in record.attempts] == [(1, wu.Reason.LOST)]


@pytest.mark.parametrize("mode", ["after", "before"])
def test_a_firing_whose_commit_answer_is_lost_starts_its_unit_once(
    tmp_path: Path, ledgers: ProxiedLedger, mode: str
) -> None:
    with _supervisor(tmp_path / "state", ledgers.proxied) as sup:
        cut = ledgers.proxy.arm(r"INSERT INTO schedule_firings", mode=mode)
        sup.schedule("everysec", "* * * * * *", "shell", "true")
        eventually(cut.fired.is_set, what="a firing's COMMIT cut", timeout=30)
        with wu.connect(tmp_path / "look", ledger=ledgers.direct) as client:
            firing = eventually(
                lambda: next(
                    (f for f in client.ledger.schedules.firings("everysec") if f.unit is not None),
                    None,
                ),
                what="the firing recorded",
            )
        assert firing.unit is not None
        record = sup.wait(firing.unit, timeout=60)  # in memory: admitted once read back
        assert record.status is Status.COMPLETED
    with wu.connect(tmp_path / "look", ledger=ledgers.direct) as client:
        firings = client.ledger.schedules.firings("everysec")
        units = [
            r for r in client.ledger.units.list() if (r.key or "").startswith("schedule:everysec:")
        ]
    assert len({f.due_at for f in firings}) == len(firings)
    assert sorted(f.unit for f in firings if f.unit) == sorted(u.id for u in units)


def test_an_acknowledgement_whose_commit_answer_is_lost_is_not_delivered_again(
    tmp_path: Path, ledgers: ProxiedLedger
) -> None:
    with (
        _supervisor(tmp_path / "state", ledgers.direct),
        wu.connect(tmp_path / "client", ledger=ledgers.proxied) as client,
    ):
        handle = client.shell("true")
        client.wait(handle.id, timeout=60)
        cut = ledgers.proxy.arm(r"SET delivered_at = \S+, claim_until = NULL")
        with client.notifications().take(timeout=10) as notice:
            assert notice.id == handle.id
        assert cut.fired.is_set()
        with pytest.raises(wu.NoNotification), client.notifications().take(timeout=1):
            pass
        assert client.get(handle.id).acknowledged
