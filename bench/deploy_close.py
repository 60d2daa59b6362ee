"""How long ``close(deploy=True)`` takes with units that checkpoint every 50 ms.

A deploy asks each resumable unit to stop (an agent at its next checkpoint) and
returns once all have stopped; ``shutdown_grace`` is only the most it waits.
Printed: the close's time for 1 and 8 such agents, each beside the grace, in one
run (``python bench/deploy_close.py``; ``--grace`` to change it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import workunits as wu

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.deploy_jobs import count_with_checkpoints  # importable by reference: resumable


def one(n: int, grace: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        sup = wu.Supervisor(state, install_signal_handlers=False, shutdown_grace=grace)
        never = os.path.join(tmp, "never")
        handles = [sup.agent(count_with_checkpoints, never) for _ in range(n)]
        with wu.connect(state) as client:
            for h in handles:
                while client.row(h.id).checkpoint is None:
                    threading.Event().wait(0.01)
        started = time.perf_counter()
        sup.close(deploy=True)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grace", type=float, default=5.0)
    args = parser.parse_args()
    for n in (1, 8):
        took = one(n, args.grace)
        print(
            f"{n} agent(s) checkpointing every 50 ms: close(deploy=True) {took:.3f} s "
            f"(grace {args.grace:g} s, ratio {took / args.grace:.3f})"
        )


if __name__ == "__main__":
    main()
