"""A supervisor process for the large-value tests: submit one resumable agent, wait.

Usage: python -m tests.large_values_host STATE SIZE GATE
"""

from __future__ import annotations

import json
import sys
import threading

import workunits as wu
from tests.large_values_jobs import resume_from_big_checkpoint


def main(state: str, size: int, gate: str) -> None:
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        unit = sup.agent(resume_from_big_checkpoint, "s" * size, gate, key="big")
        print(json.dumps({"id": unit.id}), flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
