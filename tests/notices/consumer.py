"""A consumer process for the competing-consumers tests: ``python -m tests.notices.consumer``.

    consumer.py STATE_DIR LOG

Takes application notices from ``wu.connect(STATE_DIR)`` with ``take``: inside
the block it *acts* -- appends ``<id> <redelivered>`` to LOG and fsyncs it --
and the notice is acknowledged when the block exits. So a SIGKILL between the
act and the acknowledgement leaves a logged notice that comes back
(redelivered), and no acknowledged notice is ever unlogged. Runs until killed.
"""

from __future__ import annotations

import os
import sys

import workunits as wu


def main(state_dir: str, log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with wu.connect(state_dir) as client:
        notices = client.notifications()
        print("ready", flush=True)
        while True:
            try:
                with notices.take(timeout=1.0) as notice:
                    os.write(fd, f"{notice.id} {int(notice.redelivered)}\n".encode())
                    os.fsync(fd)
            except wu.NoNotification:
                continue


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
