"""Several ``workunits serve`` processes, each with its own state dir, on one Postgres ledger."""

from __future__ import annotations

import functools
import itertools
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.cluster.host import Host, cluster_key, marked_env, share_key
from tests.conftest import alive, eventually
from workunits._core.errors import SessionLost
from workunits._ledger import Ledger
from workunits._ledger.postgres.db import PostgresDatabase

LEASE = 2.0


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[Host]]:
    started: list[Host] = []
    yield started
    for host in started:
        host.close()


def _state(tmp_path: Path, name: str) -> Path:
    share_key(tmp_path / name, cluster_key(tmp_path))
    return tmp_path / name


def _client(tmp_path: Path, url: str) -> wu.Client:
    return wu.connect(_state(tmp_path, "client"), ledger=url)


def test_each_pending_unit_is_started_by_one_supervisor(
    tmp_path: Path, postgres_url: str, hosts: list[Host]
) -> None:
    hosts += [Host.start(tmp_path / f"s{i}", postgres_url) for i in range(2)]
    effects = tmp_path / "effects"
    client = _client(tmp_path, postgres_url)
    ids = [client.shell(f"echo u{i} >> {effects}").id for i in range(30)]
    for work_id in ids:
        record = client.wait(work_id, timeout=30)
        assert record.status == wu.Status.COMPLETED, record.error
    counts = Counter(effects.read_text().split())
    assert counts == {f"u{i}": 1 for i in range(30)}
    with Ledger(_state(tmp_path, "reader"), ledger=postgres_url) as ledger:
        sessions = {ledger.units.require(work_id).session for work_id in ids}
    assert sessions <= {h.session for h in hosts}


def test_each_supervisor_runs_no_more_than_its_concurrency(
    tmp_path: Path, postgres_url: str, hosts: list[Host]
) -> None:
    hosts += [Host.start(tmp_path / f"s{i}", postgres_url, limits=("shell=1",)) for i in range(2)]
    client = _client(tmp_path, postgres_url)
    ids = [client.shell("sleep 0.3").id for _ in range(6)]
    for work_id in ids:
        assert client.wait(work_id, timeout=30).status == wu.Status.COMPLETED
    with Ledger(_state(tmp_path, "reader"), ledger=postgres_url) as ledger:
        rows = [ledger.units.require(work_id) for work_id in ids]
    per_session: dict[str | None, list[tuple[float, float]]] = {}
    for row in rows:
        assert row.started_at is not None
        assert row.ended_at is not None
        per_session.setdefault(row.session, []).append((row.started_at, row.ended_at))
    assert set(per_session) <= {h.session for h in hosts}
    for spans in per_session.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, "two units of one supervisor ran at once with shell=1"


def test_a_killed_supervisors_units_are_recovered_by_another_within_its_lease(
    tmp_path: Path, postgres_url: str, hosts: list[Host]
) -> None:
    first = Host.start(tmp_path / "s0", postgres_url, lease=LEASE)
    hosts.append(first)
    client = _client(tmp_path, postgres_url)
    unit = client.shell("sleep 600").id
    eventually(lambda: client.get(unit).status == wu.Status.RUNNING, 20)
    hosts.append(Host.start(tmp_path / "s1", postgres_url, lease=LEASE))
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    killed_at = time.monotonic()
    record = client.wait(unit, timeout=LEASE + 15)
    assert record.status == wu.Status.FAILED
    assert record.reason == wu.Reason.LOST
    assert time.monotonic() - killed_at < LEASE + 5  # lease, a takeover look, ticks


def test_a_stopped_supervisor_loses_its_session_and_its_late_writes_are_refused(
    tmp_path: Path, postgres_url: str, hosts: list[Host]
) -> None:
    stopped = Host.start(tmp_path / "s0", postgres_url, lease=LEASE)
    hosts.append(stopped)
    effects = tmp_path / "effects"
    client = _client(tmp_path, postgres_url)
    unit = client.shell(f"echo ran >> {effects}; sleep 600").id
    eventually(lambda: client.get(unit).status == wu.Status.RUNNING, 20)
    other = Host.start(tmp_path / "s1", postgres_url, lease=LEASE)
    hosts.append(other)
    stopped.signal(signal.SIGSTOP)
    record = client.wait(unit, timeout=LEASE + 15)
    assert (record.status, record.reason) == (wu.Status.FAILED, wu.Reason.LOST)
    stopped.signal(signal.SIGCONT)
    # It notices at its next heartbeat, kills its unit's process and exits.
    assert stopped.proc.wait(20) == 75
    assert "SESSION LOST" in stopped.log.read_text()
    after = client.get(unit)
    assert (after.status, after.reason, after.ended_at) == (
        record.status,
        record.reason,
        record.ended_at,
    )
    assert effects.read_text().split() == ["ran"]  # a shell does not resume: once
    # Any write of the old session is refused by the ledger.
    with Ledger(_state(tmp_path, "late"), ledger=postgres_url) as late:
        late.fence(stopped.session)
        with pytest.raises(SessionLost, match="taken over"):
            late.attempts.write(unit, attempt=record.attempt, progress=0.5)
        with pytest.raises(SessionLost):
            late.sessions.heartbeat(stopped.session)
    assert other.proc.poll() is None


def test_a_kill_from_a_client_is_applied_by_the_supervisor_that_runs_the_unit(
    tmp_path: Path, postgres_url: str, hosts: list[Host]
) -> None:
    owner = Host.start(tmp_path / "s0", postgres_url, lease=LEASE)
    hosts.append(owner)
    client = _client(tmp_path, postgres_url)
    units = [client.shell("sleep 600").id for _ in range(6)]
    # Running, with its pid on record (pids are written a tick after the start).
    pids = {unit: eventually(functools.partial(_pid, client, unit), 20) for unit in units}
    # Another supervisor asks for requests too: it must leave these to their owner.
    hosts.append(Host.start(tmp_path / "s1", postgres_url, lease=LEASE))
    for unit in units:
        client.kill(unit)
    for unit in units:
        record = client.wait(unit, timeout=20)
        assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)
        pid = pids[unit]
        # Ended by the supervisor holding its process: the process is gone too.
        eventually(functools.partial(_gone, pid), 10, what=f"unit {unit}'s process to die")


def _pid(client: wu.Client, unit: str) -> int | None:
    return client.get(unit).pid


def _gone(pid: int) -> bool:
    return not alive(pid)


def test_a_key_submitted_through_two_supervisors_at_once_yields_one_unit(
    tmp_path: Path, postgres_url: str
) -> None:
    with (
        wu.Supervisor(
            _state(tmp_path, "a"), ledger=postgres_url, install_signal_handlers=False
        ) as a,
        wu.Supervisor(
            _state(tmp_path, "b"), ledger=postgres_url, install_signal_handlers=False
        ) as b,
    ):
        ids = {a.shell("true", key="job-1").id, b.shell("true", key="job-1").id}
        assert len(ids) == 1
        (work_id,) = ids
        assert a.wait(work_id, timeout=20).status == wu.Status.COMPLETED
        assert b.get(work_id).status == wu.Status.COMPLETED


def test_each_schedule_firing_is_taken_by_one_supervisor(tmp_path: Path, postgres_url: str) -> None:
    with (
        Ledger(_state(tmp_path, "a"), ledger=postgres_url) as a,
        Ledger(_state(tmp_path, "b"), ledger=postgres_url) as b,
    ):
        from workunits._ledger.schedules import ScheduleRow  # noqa: PLC0415

        row = ScheduleRow(
            name="nightly",
            cron="0 3 * * *",
            tz="UTC",
            catch_up="skip",
            letter="b",
            spec=a.schedules.encode_spec({"cmd": "true"}, "nightly"),
            options={},
            next_at=100.0,
            created_at=0.0,
        )
        a.schedules.put(row)
        results = [
            a.schedules.advance("nightly", 100.0, 200.0),
            b.schedules.advance("nightly", 100.0, 200.0),
        ]
        assert results == [True, False]
        assert b.schedules.advance("nightly", 200.0, 300.0)
        assert [r.next_at for r in a.schedules.all_rows()] == [300.0]


def test_a_writer_frozen_inside_its_transaction_does_not_hold_the_cluster_s_writes(
    postgres_url: str, tmp_path: Path
) -> None:
    # Every write takes the ledger's one write lock: a supervisor stopped while
    # holding it stalled every other writer, the takeover of its own session too.
    busy = 3.0
    frozen = subprocess.Popen(
        [sys.executable, "-m", "tests.cluster.frozen_writer", postgres_url, str(busy)],
        stdout=subprocess.PIPE,
        env=marked_env("frozen"),
    )
    try:
        assert frozen.stdout is not None
        assert frozen.stdout.readline() == b"in\n"
        eventually(lambda: _stopped(frozen.pid), 10, what="the writer to stop")
        db = PostgresDatabase(postgres_url, busy_timeout=busy)
        try:
            # Granted once the server ends the frozen writer's session (idle in
            # its transaction for longer than half the busy timeout).
            with db.write(durable=True) as conn:
                conn.execute("SELECT 1")
        finally:
            db.close()
    finally:
        frozen.kill()
        frozen.wait(10)
        if frozen.stdout is not None:
            frozen.stdout.close()


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rfind(b")") + 2 :].split()[0] == b"T"


def test_a_schedule_added_through_a_supervisor_that_is_gone_fires_on_another(
    tmp_path: Path, postgres_url: str
) -> None:
    from workunits.testing import ManualClock  # noqa: PLC0415 - only this test

    clock = ManualClock()  # 1_000_000: */10 minutes is first due at 1_000_200

    def opened(name: str) -> wu.Supervisor:
        return wu.Supervisor(
            _state(tmp_path, name),
            ledger=postgres_url,
            clock=clock,
            tick_interval=None,
            install_signal_handlers=False,
        )

    with opened("b") as survivor:
        with opened("a") as gone:
            gone.schedule("ten", "*/10 * * * *", "shell", "true")
        clock.set(1_000_200)
        survivor.tick()  # read the ledger's schedules again, and fire what is due
        with Ledger(_state(tmp_path, "reader"), ledger=postgres_url) as ledger:
            firings = ledger.schedules.firings("ten")
        assert [(f.due_at, f.outcome) for f in firings] == [(1_000_200, "fired")]
        unit = firings[0].unit
        assert unit is not None
        assert survivor.wait(unit, timeout=20).status == wu.Status.COMPLETED
