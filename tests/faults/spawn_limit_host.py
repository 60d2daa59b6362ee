"""A supervisor whose zygote the test starves of processes, for the fork-failure test.

Usage (unprivileged): python -m tests.faults.spawn_limit_host STATE_DIR GATE

Speaks JSON lines: prints the zygote's pid once three units run (two agents and
a shell waiting for the file GATE); on "limited" from stdin starts an agent and
a shell, which the starved zygote cannot fork, and prints how they ended; on
"unlimited" opens the gate, prints how the first three ended, and starts one
more agent to show the zygote still forks.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import cloudpickle

import workunits as wu

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def gated(gate: str) -> str:
    pause = threading.Event()
    while not os.path.exists(gate):
        pause.wait(0.02)
    return "released"


def answer() -> int:
    return 42


def emit(obj: Any) -> None:
    print(json.dumps(obj), flush=True)


def expect(word: str) -> None:
    line = sys.stdin.readline().strip()
    if line != word:
        raise SystemExit(f"expected {word!r} on stdin, got {line!r}")


def ended(sup: wu.Supervisor, ids: list[str]) -> list[list[Any]]:
    records = [sup.wait(i, timeout=30) for i in ids]
    return [[r.status.value, r.error] for r in records]


def main(state: str, gate: str) -> None:
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        waiting = f"while [ ! -e '{gate}' ]; do sleep 0.02; done"
        running = [sup.agent(gated, gate).id, sup.agent(gated, gate).id, sup.shell(waiting).id]
        deadline = time.monotonic() + 30
        while not all(sup.get(i).pid for i in running):
            if time.monotonic() > deadline:
                raise SystemExit("the first units did not start")
            threading.Event().wait(0.01)
        emit({"zygote": sup._machinery.zygote.pid, "uid": os.getuid()})
        expect("limited")
        starved = [sup.agent(answer).id, sup.shell(["true"]).id, sup.agent(answer).id]
        emit(
            {"starved": ended(sup, starved), "running": [sup.get(i).status.value for i in running]}
        )
        expect("unlimited")
        with open(gate, "w"):
            pass
        after = sup.agent(answer)
        emit({"released": ended(sup, running), "after": sup.result(after.id, timeout=30)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
