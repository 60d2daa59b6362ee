"""Several shell commands at once: stream output, kill one by ID, print every notice.

python examples/shell_fanout.py
"""

from __future__ import annotations

import sys
import tempfile

import workunits as wu


def main(state_dir: str) -> int:
    with wu.Supervisor(state_dir) as sup:
        builds = [
            sup.shell(f"for i in 1 2 3; do echo 'build {n}: step '$i; sleep 0.1; done")
            for n in range(3)
        ]
        stuck = sup.shell("echo waiting forever; sleep 600", description="stuck job")
        failing = sup.shell(["ls", "/no/such/dir"], description="failing ls")
        for chunk in sup.stream(builds[0].id):
            print(f"[{builds[0].id}] {chunk.decode().rstrip()}")
        print(f"killing {stuck.id}: {sup.kill(stuck.id)}")
        inbox = sup.notifications()
        for _ in range(len(builds) + 2):
            n = inbox.get(timeout=30)
            assert isinstance(n, wu.Notification)  # no monitors here, so no monitor events
            why = f" ({n.reason.value})" if n.reason else f" (exit {n.exit_code})"
            print(f"notice {n.id} {n.status.value}{why} {n.description!r}")
        print(f"failing ls: {sup.get(failing.id).describe_end()}")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="workunits-fanout-") as tmp:
        sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else tmp))
