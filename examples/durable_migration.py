"""A long migration that outlives its supervisor: SIGKILL mid-run, resume, cancel.

1. A supervisor process starts the migration (eight dependency groups, each a
   durable step) and is SIGKILLed in the middle.
2. A new supervisor on the same state dir resumes it: same ID, attempt 2, no
   group that had finished runs again; resubmitting with the same key returns
   the same unit instead of a duplicate.
3. A second migration is cancelled from another process (as the command line
   does) before its final write phase: it ends ``killed``, reason ``cancelled``.

    python examples/durable_migration.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import workunits as wu

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the job module lives beside this script

from migration_job import GROUPS, migrate  # noqa: E402


def host(state: str, key: str, log: str, seconds: float) -> None:
    """A supervisor process: submit (or find) the migration under ``key``, wait, report."""
    with wu.Supervisor(state) as sup:
        unit = sup.workflow(migrate, "big-repo", log, seconds, key=key, description=key)
        print(json.dumps({"id": unit.id, "recovered": sup.recovered}), flush=True)
        try:
            value = sup.result(unit.id, timeout=120)
            print(json.dumps({"status": "completed", "result": value}), flush=True)
        except wu.WorkKilled as exc:
            record = exc.record
            reason = record.reason.value if record.reason else None
            print(json.dumps({"status": "killed", "reason": reason}), flush=True)


def start_host(state: str, key: str, log: str, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--host", state, key, log, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )


def read(proc: subprocess.Popen[str]) -> dict[str, object]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit("the supervisor process ended without answering")
    answer: dict[str, object] = json.loads(line)
    return answer


def wait_for_progress(state: str, work_id: str, fraction: float) -> None:
    """Watch the ledger from this process until the unit has got that far."""
    pause = threading.Event()
    with wu.connect(state) as client:
        while (client.get(work_id).progress or 0.0) < fraction:
            pause.wait(0.05)


def main(state: str) -> int:
    # Beside the state dir, not in it: no unit can reach the state dir.
    beside = os.path.dirname(os.path.abspath(state))
    log = os.path.join(beside, "migration.log")
    print("1. start the migration and SIGKILL its supervisor in the middle")
    first = start_host(state, "migrate-big-repo", log, 0.4)
    work_id = str(read(first)["id"])
    print(f"   the caller got {work_id} at once")
    wait_for_progress(state, work_id, 3 / (GROUPS + 1))
    first.send_signal(signal.SIGKILL)
    first.wait()
    if first.stdout:
        first.stdout.close()
    print(f"   supervisor killed with: {Path(log).read_text().strip().splitlines()}")

    print("2. a new supervisor on the same state dir resumes it")
    second = start_host(state, "migrate-big-repo", log, 0.4)
    hello = read(second)
    print(f"   same key, same unit: {hello['id']} (recovered: {hello['recovered']})")
    done = read(second)
    second.wait()
    if second.stdout:
        second.stdout.close()
    print(f"   {done['status']}: {done.get('result')}")
    for line in Path(log).read_text().splitlines():
        print(f"   | {line}")

    print("3. another migration, cancelled from another process before its final write")
    log2 = os.path.join(beside, "migration-2.log")
    third = start_host(state, "migrate-second-repo", log2, 0.2)
    other = str(read(third)["id"])
    wait_for_progress(state, other, (GROUPS - 1) / (GROUPS + 1))
    with wu.connect(state) as client:
        print(f"   cancel {other}: requested={client.cancel(other, grace=10)}")
    ended = read(third)
    third.wait()
    if third.stdout:
        third.stdout.close()
    final = "final write" in Path(log2).read_text()
    print(f"   {ended['status']}, reason {ended.get('reason')}; final write happened: {final}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--host"]:
        host(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
        sys.exit(0)
    with tempfile.TemporaryDirectory(prefix="workunits-migration-") as tmp:
        sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else tmp))
