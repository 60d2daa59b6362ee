"""Kill latency from a client process to a unit run by a supervisor in another process.

    python bench/cluster_bench.py [--kills N] [--tick SECONDS] [--ledger URL] [--dir DIR]

For each ledger (PostgreSQL with LISTEN/NOTIFY, and SQLite in the state dir),
a supervisor runs in a process of its own; this process is the client. Each
round submits ``sleep 600`` through the client, waits until the supervisor
runs it, then asks for the kill (``Client.kill``: a request row, plus a NOTIFY
on PostgreSQL) and reads the unit's ``ended_at`` as the supervisor recorded it:
latency = ``ended_at`` - the wall-clock time just before the request. Both
stamps come from one host's clock, so the client's own polling does not count.

On PostgreSQL the client and the supervisor have different state dirs (what
two hosts would have) and share a secret file; on SQLite they share the state
dir, as they must. Without ``--ledger`` a PostgreSQL server is started for the
run (Debian's ``postgresql`` package, as the tests do: ``tests/postgres_server``).
``--tick`` is the supervisor's tick interval (default 0.05 s, the Supervisor's):
SQLite's figure follows it; PostgreSQL's does not. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

import workunits as wu  # noqa: E402 - after the path set-up

SUPERVISOR = """
import sys, workunits as wu
state, url, tick = sys.argv[1], sys.argv[2] or None, float(sys.argv[3])
with wu.Supervisor(state, ledger=url, tick_interval=tick, install_signal_handlers=False):
    print("ready", flush=True)
    sys.stdin.read()  # until the bench closes our stdin
"""


@contextlib.contextmanager
def supervisor(state_dir: Path, url: str | None, tick: float) -> Iterator[None]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(state_dir), url or "", str(tick)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the supervisor process did not start")
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)


def kill_latencies(client: wu.Client, kills: int) -> list[float]:
    found: list[float] = []
    for _ in range(kills):
        handle = client.shell("sleep 600")
        deadline = time.monotonic() + 30
        while client.get(handle.id).pid is None:  # running, its process started
            if time.monotonic() > deadline:
                raise RuntimeError(f"{handle.id} never started")
            time.sleep(0.002)
        sent = time.time()
        client.kill(handle.id)
        record = client.wait(handle.id, timeout=30)
        assert record.status == wu.Status.KILLED, record
        assert record.ended_at is not None
        found.append(record.ended_at - sent)
    return found


def measure(where: Path, url: str | None, kills: int, tick: float) -> list[float]:
    sup_dir = where / "supervisor"
    if url is None:
        with supervisor(sup_dir, None, tick), wu.connect(sup_dir) as client:
            return kill_latencies(client, kills)
    secret = where / "secret"
    secret.write_text(secrets.token_urlsafe(32))
    secret.chmod(0o600)
    os.environ["WORKUNITS_SECRET_FILE"] = str(secret)  # the supervisor process's too
    try:
        with (
            supervisor(sup_dir, url, tick),
            wu.connect(where / "client", ledger=url, secret_file=secret) as client,
        ):
            return kill_latencies(client, kills)
    finally:
        del os.environ["WORKUNITS_SECRET_FILE"]


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from tests.postgres_server import PostgresServer, why_not_available  # noqa: PLC0415

    reason = why_not_available()
    if reason is not None:
        raise SystemExit(f"no PostgreSQL for the bench: {reason}; or give --ledger URL")
    with PostgresServer(durable=True) as server, server.database() as made:
        yield made


def row(name: str, found: list[float]) -> str:
    ms = sorted(x * 1000 for x in found)
    p90 = ms[max(0, int(len(ms) * 0.9) - 1)]
    return f"| {name} | {len(ms)} | {statistics.median(ms):.1f} | {p90:.1f} | {ms[-1]:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--tick", type=float, default=0.05, help="the supervisor's tick (s)")
    parser.add_argument("--ledger", default=None, help="a postgresql:// URL (default: start one)")
    parser.add_argument("--dir", default=None, help="where the state dirs go (default: tmp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, postgres(args.ledger) as url:
        where = Path(tmp)
        (where / "pg").mkdir()
        (where / "sqlite").mkdir()
        pg = measure(where / "pg", url, args.kills, args.tick)
        lite = measure(where / "sqlite", None, args.kills, args.tick)
    print(f"kill latency, client process -> unit of a supervisor process (tick {args.tick:g} s)")
    print()
    print("| ledger | kills | median ms | p90 ms | max ms |")
    print("|---|---|---|---|---|")
    print(row("PostgreSQL, LISTEN/NOTIFY", pg))
    print(row("SQLite (polled each tick)", lite))


if __name__ == "__main__":
    main()
