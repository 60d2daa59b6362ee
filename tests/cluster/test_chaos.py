"""The cluster under faults: three supervisors, four clients, two notice consumers, one Postgres.

Clients (``client.py``, each its own process) submit keyed shells, agents and
workflows (``bodies.py``) and cancel some at random; consumers
(``consumer.py``) claim and acknowledge every notice. Mid-run one supervisor
is SIGKILLed and another SIGSTOPped until its session is taken over, then
continued; a process manager's restart of each follows. Then: every unit
ended once with one notice, acknowledged once; no key names two units; no
body ran more often than its attempts allow; the stopped supervisor's
session was refused (exit 75, SESSION LOST); and nothing is left running.

``WORKUNITS_CLUSTER_SCALE`` (default 1, the CI size: well under a minute)
multiplies the submits.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import workunits as wu
from tests.cluster.client import kind_of
from tests.cluster.host import Host, cluster_key, marked_env, share_key, survivors
from tests.conftest import eventually
from workunits._cli.serve import EXIT_SESSION_LOST
from workunits._core.status import is_terminal
from workunits._ledger import Ledger

SCALE = int(os.environ.get("WORKUNITS_CLUSTER_SCALE", "1"))
# Long enough that a live supervisor's heartbeat, late on a CI machine running four
# test processes on two cores, is not taken for a dead one; short enough to wait out.
LEASE = 4.0
CLIENTS = 4
CONSUMERS = 2
SUBMITS = 15 * SCALE  # per client
KEYS = 40 * SCALE  # shared by the clients: about a third of the submits repeat a key


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """What the test starts, stopped (continued, then interrupted) whatever happens."""
    started: dict[str, Any] = {"hosts": [], "procs": []}
    yield started
    for proc in started["procs"]:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    for host in started["hosts"]:
        host.close()


def _state(tmp_path: Path, name: str) -> Path:
    share_key(tmp_path / name, cluster_key(tmp_path))
    return tmp_path / name


def _script(module: str, *args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", f"tests.cluster.{module}", *args], env=env)


def _running_on(ledger: Ledger, session: str) -> bool:
    return any(r.session == session for r in ledger.units.list(status=wu.Status.RUNNING))


def _json_lines(paths: list[Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for path in paths for line in path.read_text().splitlines()]


@pytest.mark.timeout(240 * SCALE)
def test_the_cluster_keeps_its_promises_through_a_kill_and_a_stop(
    tmp_path: Path, postgres_url: str, cluster: dict[str, Any]
) -> None:
    marker = secrets.token_hex(8)
    env = marked_env(marker)
    hosts: list[Host] = cluster["hosts"]
    procs: list[subprocess.Popen[bytes]] = cluster["procs"]
    supervisor_pids: set[int] = set()

    def start(name: str) -> Host:
        host = Host.start(tmp_path / name, postgres_url, lease=LEASE, env=env)
        hosts.append(host)
        supervisor_pids.add(host.proc.pid)
        return host

    killed, stopped, _steady = (start(f"s{i}") for i in range(3))
    effects = tmp_path / "effects"
    stop = tmp_path / "stop"
    consumed = [tmp_path / f"consumer{i}.jsonl" for i in range(CONSUMERS)]
    consumers = [
        _script(
            "consumer", str(_state(tmp_path, f"c{i}")), postgres_url, str(out), str(stop), env=env
        )
        for i, out in enumerate(consumed)
    ]
    submitted = [tmp_path / f"client{i}.jsonl" for i in range(CLIENTS)]
    clients = [
        _script(
            "client",
            str(_state(tmp_path, f"client{i}")),
            postgres_url,
            str(effects),
            str(out),
            f"--seed={i}",
            f"--units={SUBMITS}",
            f"--keys={KEYS}",
            env=env,
        )
        for i, out in enumerate(submitted)
    ]
    procs += consumers + clients
    ledger = Ledger(_state(tmp_path, "reader"), ledger=postgres_url)
    try:
        # Mid-run: both victims hold running units.
        eventually(lambda: _running_on(ledger, killed.session), 60, "units on the one to kill")
        eventually(lambda: _running_on(ledger, stopped.session), 60, "units on the one to stop")
        killed.signal(signal.SIGKILL)
        killed.proc.wait(10)
        start("s0")  # as a restarting process manager would, on the same state dir
        stopped.signal(signal.SIGSTOP)
        taken = eventually(
            lambda: ledger.sessions.get(stopped.session).recovered_by,  # type: ignore[union-attr]
            LEASE + 30,
            "the stopped supervisor's session to be taken over",
        )
        assert taken != stopped.session
        stopped.signal(signal.SIGCONT)
        # At its next heartbeat it finds its session gone, kills its units, exits.
        assert stopped.proc.wait(30) == EXIT_SESSION_LOST
        assert "SESSION LOST" in stopped.log.read_text()
        start("s1")

        for proc in clients:
            assert proc.wait(90 * SCALE) == 0
        entries = _json_lines(submitted)
        ids = {e["id"] for e in entries if e["op"] == "submit"}
        eventually(
            lambda: all(is_terminal(ledger.units.require(i).status) for i in ids),
            90 * SCALE,
            "every unit to end",
        )
        stop.touch()
        for proc in consumers:
            assert proc.wait(30) == 0
        for host in hosts[-3:]:  # the live ones: steady and the two restarted
            host.close()
            assert host.proc.returncode == 0, host.log.read_text()[-2000:]
        rows = {row.id: row for row in ledger.units.list()}
        taken_at = {}
        for victim in (killed, stopped):
            session = ledger.sessions.get(victim.session)
            assert session is not None
            assert session.recovered_at is not None, f"{victim.session} was not taken over"
            taken_at[victim.session] = session.recovered_at
    finally:
        ledger.close()

    # No key names two units: every client got the same ID for a key, and the ledger agrees.
    by_key: dict[str, set[str]] = defaultdict(set)
    for e in entries:
        if e["op"] == "submit":
            by_key[e["key"]].add(e["id"])
    assert {k: v for k, v in by_key.items() if len(v) > 1} == {}
    assert set(rows) == ids
    assert any(not e["created"] for e in entries if e["op"] == "submit"), "no key was repeated"
    # The faults hit running units: some were resumed or failed as lost.
    assert any(r.attempt > 1 or r.reason == wu.Reason.LOST for r in rows.values())
    assert Counter(r.key for r in rows.values()).most_common(1)[0][1] == 1

    # Every unit ended, once: terminal, and one notice in the outbox, delivered.
    cancelled = {e["id"] for e in entries if e["op"] == "cancel" and e["sent"]}
    with psycopg.connect(postgres_url) as conn:
        outbox = conn.execute(
            "SELECT id, count(*), count(delivered_at) FROM notifications GROUP BY id"
        ).fetchall()
    assert {i: (n, d) for i, n, d in outbox} == {i: (1, 1) for i in ids}
    for row in rows.values():
        assert is_terminal(row.status), row
        # A taken-over session wrote nothing after the takeover (its running
        # units moved to the taker; it may have ended others before).
        if row.session in taken_at:
            assert row.ended_at is not None
            assert row.ended_at <= taken_at[row.session], row
        if row.id in cancelled or row.status == wu.Status.COMPLETED:
            continue
        # Not cancelled, not completed: lost with a host, and out of attempts
        # (a shell without on_lost="restart" has one).
        assert (row.status, row.reason) == (wu.Status.FAILED, wu.Reason.LOST), row
        assert row.attempt == row.max_attempts, row

    # Every notice acknowledged exactly once, across the consumer processes.
    claims = _json_lines(consumed)
    acks = Counter(c["id"] for c in claims if c["acked"])
    assert acks == Counter(dict.fromkeys(ids, 1))
    assert [c for c in claims if not c["acked"]] == []

    # No body ran more often than its attempts allow: one run per attempt.
    _check_effects(effects.read_text().splitlines(), rows)

    # Nothing survives: no supervisor, zygote, unit, or anything a unit started.
    unit_pids = {row.pid for row in rows.values() if row.pid}
    assert survivors(marker, supervisor_pids | unit_pids) == []


def _check_effects(lines: list[str], rows: dict[str, Any]) -> None:
    by_key = {row.key: row for row in rows.values()}
    runs: Counter[tuple[str, ...]] = Counter()
    for line in lines:
        what, *rest = line.split()
        runs[(what, *rest)] += 1
    assert [run for run, n in runs.items() if n > 1 and run[0] != "shell"] == [], (
        "a body or step ran twice in one attempt"
    )
    per_unit: Counter[str] = Counter()
    for run, n in runs.items():
        match run:
            case ("shell", key):
                row = by_key[key]
                assert n <= row.attempt, f"shell {key} ran {n} times in {row.attempt} attempts"
                assert kind_of(int(key[1:])).startswith("shell")
            case ("agent" | "workflow", unit, attempt):
                row = rows[unit]
                assert 1 <= int(attempt) <= row.attempt, run
                per_unit[unit] += 1
            case ("step", unit, attempt, _):
                assert 1 <= int(attempt) <= rows[unit].attempt, run
            case _:
                pytest.fail(f"unexpected side effect {run}")
    for unit, n in per_unit.items():
        assert n <= rows[unit].attempt
    for row in rows.values():
        if row.started_at is None:
            assert per_unit[row.id] == 0, f"{row.id} never started, yet its body ran"
        if row.status == wu.Status.COMPLETED and row.kind in ("agent", "workflow"):
            assert (row.kind, row.id, str(row.attempt)) in runs, "its last attempt did not run"
        if row.status == wu.Status.COMPLETED and row.kind == "workflow":
            done = {run[3] for run in runs if run[0] == "step" and run[1] == row.id}
            assert done == {"s0", "s1", "s2"}, row
