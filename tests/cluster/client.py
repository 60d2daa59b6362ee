"""A client process of the chaos test: submits keyed units to the cluster and cancels some.

``python -m tests.cluster.client STATE URL EFFECTS OUT --seed N --units N --keys N``

Keys are drawn from one range shared by every client, so several clients
submit the same key, sometimes at the same moment: the key decides the kind
and the arguments, so a repeat is the same unit (never IdempotencyConflict).
Each submit and each cancel is written to ``OUT`` as a JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
from pathlib import Path
from typing import Any

import workunits as wu

KINDS = ("shell", "shell-restart", "agent", "workflow")


def kind_of(key: int) -> str:
    return KINDS[key % len(KINDS)]


def seconds_of(key: int) -> float:
    return 0.3 + (key * 37 % 13) / 10  # 0.3 .. 1.5 s


def submit(client: wu.Client, key: int, effects: str) -> wu.ClientHandle:
    name, seconds = f"k{key}", seconds_of(key)
    match kind_of(key):
        case "shell":
            return client.shell(f"echo shell {name} >> {effects}; sleep {seconds}", key=name)
        case "shell-restart":
            cmd = f"echo shell {name} >> {effects}; sleep {seconds}"
            return client.shell(cmd, key=name, on_lost="restart")
        case "agent":
            return client.agent("tests.cluster.bodies:agent", effects, seconds, key=name)
        case _:
            return client.workflow(
                "tests.cluster.bodies:workflow", effects, 3, seconds / 3, key=name
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("state")
    parser.add_argument("url")
    parser.add_argument("effects")
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--units", type=int, required=True)
    parser.add_argument("--keys", type=int, required=True)
    parser.add_argument("--cancels", type=float, default=0.15)
    args = parser.parse_args()
    rng = random.Random(args.seed)  # noqa: S311 - a reproducible test schedule, not a secret
    pace = threading.Event()  # never set: a timed pause that spreads submits over the run
    mine: list[str] = []
    with wu.connect(args.state, ledger=args.url) as client, Path(args.out).open("w") as out:

        def note(entry: dict[str, Any]) -> None:
            out.write(json.dumps(entry) + "\n")
            out.flush()

        for _ in range(args.units):
            key = rng.randrange(args.keys)
            handle = submit(client, key, args.effects)
            note({"op": "submit", "key": f"k{key}", "id": handle.id, "created": handle.created})
            mine.append(handle.id)
            if rng.random() < args.cancels:
                target = rng.choice(mine)
                if rng.random() < 0.5:
                    sent = client.cancel(target, grace=1.0)
                else:
                    sent = client.kill(target)
                note({"op": "cancel", "id": target, "sent": sent})
            pace.wait(rng.uniform(0.0, 0.1))


if __name__ == "__main__":
    main()
