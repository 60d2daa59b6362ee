"""The migration of the durable example, in a module of its own.

A unit stored by import reference (``migration_job:migrate``) can be loaded by a
later attempt in a new supervisor; a function defined in ``__main__`` could not.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import workunits as wu

GROUPS = 8


def migrate_group(log: str, group: int, seconds: float) -> dict[str, int]:
    """Rewrite one dependency group (here: take some time, then log that it is done)."""
    time.sleep(seconds)
    ctx = wu.current()
    with open(log, "a") as f:
        f.write(f"group {group} done by attempt {ctx.attempt} (pid {os.getpid()})\n")
    return {"group": group, "files": 100 + group}


def final_write(log: str) -> str:
    with open(log, "a") as f:
        f.write("final write\n")
    return "written"


def migrate(repo: str, log: str, seconds_per_group: float = 0.5) -> dict[str, object]:
    """Eight groups, each a durable step; then the final write phase."""
    ctx = wu.current()
    if ctx.attempt > 1:
        print(f"attempt {ctx.attempt}: resuming {repo} after the last finished group")
    files = 0
    for group in range(GROUPS):
        done = ctx.step(f"group-{group}", migrate_group, log, group, seconds_per_group)
        files += done["files"]
        ctx.progress((group + 1) / (GROUPS + 1), f"group {group + 1}/{GROUPS}")
    Path(log).touch()
    ctx.progress(GROUPS / (GROUPS + 1), "final write")
    written = ctx.step("final-write", final_write, log)
    return {"repo": repo, "files": files, "final": written, "attempt": ctx.attempt}
