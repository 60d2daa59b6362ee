"""One of several client processes for the concurrent-clients test.

Usage: python -m tests.faults.client_worker STATE_DIR SEED JOBS KEYS

Submits JOBS shell units through ``wu.connect`` with keys drawn from KEYS
shared keys (the command is a function of the key, so a resubmit is the same
submit), cancels about a third of them at random, and prints one JSON line:
the ID each key gave and, for each cancel, the request's answer.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import workunits as wu


def command(key: int) -> list[str]:
    # Half the keys end at once, half take a moment, so cancels land both ways.
    return ["true"] if key % 2 else ["sleep", "0.3"]


def main(state: str, seed: int, jobs: int, keys: int) -> dict[str, Any]:
    rng = random.Random(seed)  # noqa: S311 - a reproducible load, not a secret
    ids: dict[str, str] = {}
    cancels: list[dict[str, Any]] = []
    with wu.connect(state) as client:
        for _ in range(jobs):
            key = rng.randrange(keys)
            handle = client.shell(command(key), key=f"key-{key}")
            assert ids.setdefault(str(key), handle.id) == handle.id
            if rng.random() < 0.33:
                seq = client.request("cancel", handle.id, {"grace": 0.0})
                cancels.append({"id": handle.id, "seq": seq})
        for cancel in cancels:
            if cancel["seq"] is not None:
                cancel["result"] = client.request_result(cancel["seq"], timeout=60)
    return {"ids": ids, "cancels": cancels}


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(main(args[0], int(args[1]), int(args[2]), int(args[3]))), flush=True)
