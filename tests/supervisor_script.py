"""A supervisor in its own process, for tests that kill or signal it.

Usage: python -m tests.supervisor_script STATE_DIR MODE
Starts a mix of units, prints one JSON line {"supervisor": pid, "pids": [...]}
with every process that must not outlive it, then waits (MODE "wait") or
returns normally without closing (MODE "exit", the atexit path).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import workunits as wu


def escaping_agent(pidfile: str) -> None:
    """Starts a grandchild in a new session, so only the subreaper can find it."""
    proc = subprocess.Popen(["/bin/sleep", "600"], start_new_session=True)
    Path(pidfile).write_text(str(proc.pid))
    wu.current().progress(1.0, "grandchild started")
    while True:
        time.sleep(1)


def nested_agent() -> None:
    ctx = wu.current()
    ctx.agent(time.sleep, 600)
    ctx.progress(1.0, "child started")
    while True:
        time.sleep(1)


def wait_for(check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit("timed out starting units")
        time.sleep(0.01)


def main(state_dir: str, mode: str) -> None:
    # A background job starts with SIGINT ignored, and the supervisor leaves ignored
    # signals alone; this script is meant to die of SIGINT like a foreground program.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sup = wu.Supervisor(state_dir)
    # Beside the state dir, not in it: no unit can reach the state dir (invariant 15).
    pidfile = os.path.join(os.path.dirname(os.path.abspath(state_dir)), "grandchild.pid")
    units = [
        sup.shell("sleep 600"),
        sup.shell("sleep 600 & sleep 600 & wait"),
        sup.agent(time.sleep, 600),
        sup.agent(escaping_agent, pidfile),
        sup.agent(nested_agent),
    ]
    for unit in units:
        wait_for(lambda u=unit: sup.get(u.id).pid is not None)
    wait_for(lambda: os.path.exists(pidfile) and Path(pidfile).read_text())
    wait_for(lambda: sup.get(units[4].id).progress == 1.0)
    wait_for(lambda: all(c.pid for c in sup.list(parent=units[4].id)))
    pids = [sup.get(u.id).pid for u in units]
    pids += [sup.get(c.id).pid for c in sup.list(parent=units[4].id)]
    pids.append(int(Path(pidfile).read_text()))
    zygote = sup._machinery.zygote.pid
    print(json.dumps({"supervisor": os.getpid(), "zygote": zygote, "pids": pids}), flush=True)
    if mode == "wait":
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
