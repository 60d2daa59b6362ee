"""Issue 20's figures: a PostgreSQL ledger against SQLite and DBOS, and a cluster's timings.

    python bench/failover_bench.py [--units N] [--reps N]

Starts its own PostgreSQL server (as the tests do: tests/postgres_server.py)
and prints Markdown: submits, ledger writes and end-to-end shell units per
second on PostgreSQL and on SQLite, DBOS on the same PostgreSQL, the time from
a supervisor's SIGKILL to its unit's recovery on another for several leases,
and the latency of a kill from a client to a unit another supervisor runs
(main's path: the request row, taken at the owner's next tick).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.host import Host, cluster_key, share_key  # noqa: E402
from tests.postgres_server import PostgresServer, why_not_available  # noqa: E402

import workunits as wu  # noqa: E402


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s"


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {statistics.median(values) * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms"


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _state(root: Path, name: str) -> Path:
    share_key(root / name, cluster_key(root))
    return root / name


def _status_is(client: wu.Client, unit: str, status: wu.Status) -> Callable[[], bool]:
    return lambda: client.get(unit).status == status


def until(check: Callable[[], bool], timeout: float, pause: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    waiter = threading.Event()
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout} s")
        waiter.wait(pause)


def workunits_rates(root: Path, url: str | None, units: int) -> dict[str, str]:
    """Submits (a client, no supervisor), ledger writes, end-to-end shells (one supervisor)."""
    name = "pg" if url else "sqlite"
    state = _state(root, name)  # one for both: the SQLite ledger lives in it
    with wu.connect(state, ledger=url) as client:
        ids: list[str] = []
        seconds = _timed(lambda: ids.extend(client.shell("true").id for _ in range(units)))
        submits = _rate(units, seconds)
        ledger = client.ledger
        target = ids[0]
        seconds = _timed(
            lambda: [
                ledger.attempts.write(target, attempt=1, progress=i / units) for i in range(units)
            ]
        )
        writes = _rate(units, seconds)
        for work_id in ids:
            client.cancel(work_id)
    with wu.Supervisor(state, ledger=url, install_signal_handlers=False) as sup:
        for work_id in ids:  # the cancels above: applied before anything runs
            sup.wait(work_id, timeout=60)
        handles: list[str] = []

        def run() -> None:
            handles.extend(sup.shell("true").id for _ in range(units))
            for work_id in handles:
                sup.wait(work_id, timeout=120)

        e2e = _rate(units, _timed(run))
    return {"submits": submits, "writes": writes, "e2e": e2e}


def dbos_rates(url: str, units: int) -> dict[str, str]:
    try:
        from dbos import DBOS  # noqa: PLC0415 - a peer, in the [bench] extra
    except ImportError as exc:
        return {"submits": f"n/a ({exc})", "writes": "n/a", "e2e": "n/a"}

    @DBOS.workflow()
    def trivial() -> int:
        return 1

    DBOS(config={"name": "wu-cluster-bench", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()
    try:
        handles: list[object] = []
        seconds = _timed(lambda: handles.extend(DBOS.start_workflow(trivial) for _ in range(units)))
        submits = _rate(units, seconds)
        for handle in handles:
            handle.get_result()  # type: ignore[attr-defined]

        def run() -> None:
            started = [DBOS.start_workflow(trivial) for _ in range(units)]
            for handle in started:
                handle.get_result()

        e2e = _rate(units, _timed(run))
    finally:
        DBOS.destroy()
    return {"submits": submits, "writes": "-", "e2e": e2e}


@contextlib.contextmanager
def _hosts() -> Iterator[list[Host]]:
    started: list[Host] = []
    try:
        yield started
    finally:
        for host in started:
            host.close()


def recovery(root: Path, url: str, lease: float, reps: int) -> list[float]:
    """SIGKILL a supervisor running a unit; seconds until another ended it ``lost``."""
    spans = []
    for rep in range(reps):
        base = root / f"recovery-{lease}-{rep}"
        base.mkdir()
        with _hosts() as hosts, wu.connect(_state(base, "client"), ledger=url) as client:
            first = Host.start(base / "a", url, lease=lease)
            hosts.append(first)
            unit = client.shell("sleep 600").id
            until(_status_is(client, unit, wu.Status.RUNNING), 30)
            hosts.append(Host.start(base / "b", url, lease=lease))
            first.signal(signal.SIGKILL)
            first.proc.wait(10)
            killed = time.monotonic()
            until(_status_is(client, unit, wu.Status.FAILED), lease + 30, 0.01)
            spans.append(time.monotonic() - killed)
    return spans


def kill_latency(root: Path, url: str, reps: int) -> list[float]:
    """A client's kill of a unit another supervisor runs: seconds until the ledger says killed."""
    base = root / "kill"
    base.mkdir()
    spans = []
    with _hosts() as hosts, wu.connect(_state(base, "client"), ledger=url) as client:
        hosts.append(Host.start(base / "owner", url, lease=10.0))
        units = [client.shell("sleep 600").id for _ in range(reps)]
        until(lambda: all(client.get(u).pid for u in units), 60)
        hosts.append(Host.start(base / "other", url, lease=10.0))
        for unit in units:
            start = time.monotonic()
            client.kill(unit)
            until(_status_is(client, unit, wu.Status.KILLED), 30, 0.002)
            spans.append(time.monotonic() - start)
    return spans


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units", type=int, default=300)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    reason = why_not_available()
    if reason is not None:
        sys.exit(f"cluster bench: {reason}")
    load_before = os.getloadavg()
    # durable: fsync on, as SQLite's full sync.
    with tempfile.TemporaryDirectory() as tmp, PostgresServer(durable=True) as server:
        root = Path(tmp)
        rows = {}
        with server.database() as url:
            rows["workunits, PostgreSQL"] = workunits_rates(root, url, args.units)
        rows["workunits, SQLite"] = workunits_rates(root, None, args.units)
        with server.database() as url:
            rows["DBOS, same PostgreSQL"] = dbos_rates(url, args.units)
        leases = {}
        for lease in (1.0, 2.0, 4.0):
            with server.database() as url:
                leases[lease] = recovery(root, url, lease, args.reps)
        with server.database() as url:
            kills = kill_latency(root, url, 10 * args.reps)
    load_after = os.getloadavg()
    print(
        f"{args.units} units per rate; load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after (2 cores)\n"
    )
    print("| ledger | submits | ledger writes | end-to-end shell units |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['submits']} | {row['writes']} | {row['e2e']} |")
    print("\n| session lease | SIGKILL to recovery (unit ended lost on another supervisor) |")
    print("|---|---|")
    for lease, spans in leases.items():
        print(f"| {lease:.0f} s | {_ms(spans)} ({len(spans)} runs) |")
    print(
        f"\nKill from a client to a unit on another supervisor (tick path, "
        f"{len(kills)} units): {_ms(kills)}"
    )


if __name__ == "__main__":
    main()
