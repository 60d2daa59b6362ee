"""LISTEN/NOTIFY on a PostgreSQL ledger: a client's request reaches its supervisor at once.

The supervisor ticks every two minutes here, so anything that lands within
seconds was carried by a notification, not by a tick (real server, real
client processes).
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import workunits as wu
from tests.conftest import eventually
from workunits._ledger.postgres.listen import APPLICATION_NAME

LONG_TICK = 120.0  # far past every test's timeout: only a wake-up can act in time
PROMPT = 5.0  # what "at once" must beat, with a loaded 2-core machine's slack

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """The secret file every process of the test shares (clients sign what it verifies)."""
    path = tmp_path / "secret"
    path.write_text(secrets.token_urlsafe(32))
    path.chmod(0o600)
    return path


@pytest.fixture
def slow_sup(
    postgres_url: str, tmp_path: Path, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[wu.Supervisor]:
    monkeypatch.setenv("WORKUNITS_SECRET_FILE", str(secret))  # for the client processes too
    with wu.Supervisor(
        tmp_path / "sup",
        ledger=postgres_url,
        tick_interval=LONG_TICK,
        install_signal_handlers=False,
    ) as sup:
        yield sup


def _client(postgres_url: str, state_dir: Path, code: str) -> None:
    """Run ``code`` with ``client`` connected, in a process of its own; fail on its error."""
    script = (
        "import sys, workunits as wu\n"
        "client = wu.connect(sys.argv[1], ledger=sys.argv[2])\n"
        f"{code}\n"
        "client.close()\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(state_dir), postgres_url], check=True, timeout=60
    )


def _listener_pids(url: str) -> set[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
            "AND datname = current_database()",
            (APPLICATION_NAME,),
        ).fetchall()
    return {int(row[0]) for row in rows}


def _kill_lands_promptly(
    sup: wu.Supervisor, postgres_url: str, client_dir: Path
) -> tuple[wu.WorkRecord, float]:
    unit = sup.shell("sleep 600")
    eventually(lambda: sup.get(unit.id).status == wu.Status.RUNNING, what="the unit to run")
    _client(postgres_url, client_dir, f"assert client.kill({unit.id!r}) is True")
    sent = time.monotonic()
    record = sup.wait(unit.id, timeout=PROMPT * 4)
    return record, time.monotonic() - sent


def test_a_client_kill_reaches_a_slow_ticking_supervisor_at_once(
    slow_sup: wu.Supervisor, postgres_url: str, tmp_path: Path
) -> None:
    record, took = _kill_lands_promptly(slow_sup, postgres_url, tmp_path / "client")
    assert record.status == wu.Status.KILLED
    assert took < PROMPT, f"the kill took {took:.2f} s: no wake-up, it waited for a tick"


def test_a_client_submit_is_adopted_and_a_signal_routed_without_a_tick(
    slow_sup: wu.Supervisor, postgres_url: str, tmp_path: Path
) -> None:
    from tests.signal_jobs import approve  # noqa: PLC0415 - a job module

    with wu.connect(tmp_path / "client", ledger=postgres_url) as client:
        handle = client.agent(approve)
        eventually(
            lambda: slow_sup.get(handle.id).status == wu.Status.RUNNING,
            timeout=PROMPT,
            what="the pending unit to be adopted by a wake-up",
        )
        assert client.signal(handle.id, "approval", "yes") is True
        assert client.result(handle.id, timeout=PROMPT) == "yes"


def test_the_listener_reconnects_after_its_connection_is_terminated(
    slow_sup: wu.Supervisor, postgres_url: str, tmp_path: Path
) -> None:
    (old,) = eventually(lambda: _listener_pids(postgres_url), what="the listener to connect")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (old,))
    eventually(
        lambda: (pids := _listener_pids(postgres_url)) and old not in pids,
        what="a new listening connection",
    )
    record, took = _kill_lands_promptly(slow_sup, postgres_url, tmp_path / "client")
    assert record.status == wu.Status.KILLED
    assert took < PROMPT, f"the kill took {took:.2f} s after a reconnect"


def test_closing_the_supervisor_closes_its_listener(postgres_url: str, tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "sup", ledger=postgres_url, install_signal_handlers=False) as sup:
        sup.shell("true")
        eventually(lambda: _listener_pids(postgres_url), what="the listener to connect")
    eventually(lambda: not _listener_pids(postgres_url), what="the listener to disconnect")


def test_a_kill_reaches_the_supervisor_that_runs_the_unit_not_another(
    slow_sup: wu.Supervisor, postgres_url: str, tmp_path: Path
) -> None:
    units = [slow_sup.shell("sleep 600") for _ in range(4)]

    def all_running() -> bool:
        return all(slow_sup.get(u.id).status == wu.Status.RUNNING for u in units)

    eventually(all_running, what="the units to run")
    # Another supervisor on the ledger, ticking fast: it must leave the requests alone.
    with (
        wu.Supervisor(tmp_path / "other", ledger=postgres_url, install_signal_handlers=False),
        wu.connect(tmp_path / "client", ledger=postgres_url) as client,
    ):
        for unit in units:
            assert client.kill(unit.id) is True
        for unit in units:
            # Ended by its own supervisor: its record in memory, its process gone.
            record = slow_sup.wait(unit.id, timeout=PROMPT * 2)
            assert record.status == wu.Status.KILLED
