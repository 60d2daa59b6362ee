"""A supervisor started under a low soft RLIMIT_NOFILE, for the units' limit test.

Usage: python -m tests.faults.nofile_units_host STATE_DIR SOFT

Lowers the soft limit to SOFT (the hard one stays), starts a Supervisor (which
raises its own soft limit), then runs a shell unit and an agent that report the
limit they were started with, and prints one JSON line: the supervisor's limits,
what each unit saw, and the supervisor's log lines.
"""

from __future__ import annotations

import json
import logging
import resource
import sys

import workunits as wu


def limits_here() -> list[int]:
    """The agent's body: its own RLIMIT_NOFILE (soft, hard)."""
    return list(resource.getrlimit(resource.RLIMIT_NOFILE))


def main(state_dir: str, soft: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.getLogger("workunits").addHandler(Keep())
    logging.getLogger("workunits").setLevel(logging.INFO)
    with wu.Supervisor(state_dir, install_signal_handlers=False) as sup:
        shell = sup.shell(["sh", "-c", 'ulimit -Sn; echo "${WORKUNITS_UNIT_NOFILE:-unset}"'])
        sup.wait(shell.id, timeout=30)
        shown = sup.get(shell.id).output_tail.decode().split()
        agent = sup.result(sup.agent(limits_here).id, timeout=30)
        report = {
            "supervisor": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
            "shell": shown,
            "agent": agent,
            "log": lines,
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
