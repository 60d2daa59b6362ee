"""Bodies for the durability tests, importable by reference (so they can resume)."""

from __future__ import annotations

import os
import time

import workunits as wu

GROUPS = 6


def migrate_group(log: str, group: int, seconds: float) -> int:
    time.sleep(seconds)
    with open(log, "a") as f:
        f.write(f"{group} {wu.current().attempt} {os.getpid()}\n")
    return group


def migrate(log: str, seconds: float) -> list[int]:
    ctx = wu.current()
    done = []
    for group in range(GROUPS):
        done.append(ctx.step(f"group-{group}", migrate_group, log, group, seconds))
        ctx.progress((group + 1) / GROUPS, f"group {group + 1}/{GROUPS}")
    return done


def sleep_long() -> None:
    wu.current().progress(0.0, "asleep")
    time.sleep(600)
