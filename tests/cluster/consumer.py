"""A notice consumer of the chaos test: claims and acknowledges notices until told to stop.

``python -m tests.cluster.consumer STATE URL OUT STOP``

Each claim is written to ``OUT`` (a JSON line: the unit, whether it was
redelivered, and what ``ack()`` returned). Once the file ``STOP`` exists and
no notice is waiting, it exits: the test creates ``STOP`` after every unit
ended, and a terminal write commits with its notice, so none comes later.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import workunits as wu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("state")
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("stop")
    args = parser.parse_args()
    stop = Path(args.stop)
    with wu.connect(args.state, ledger=args.url) as client, Path(args.out).open("w") as out:
        notices = client.notifications()
        while True:
            try:
                claim = notices.claim(timeout=0.2)
            except wu.NoNotification:
                if stop.exists():
                    return
                continue
            notice = claim.notice
            acked = claim.ack()
            entry = {"id": notice.id, "redelivered": notice.redelivered, "acked": acked}
            out.write(json.dumps(entry) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
