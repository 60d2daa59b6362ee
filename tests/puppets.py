"""Agents that do what a test tells them, through a FIFO named after their ID.

Kept free of test-only imports: a unit process imports this module to load the
body, and it should cost nothing.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys
import time
from pathlib import Path

import workunits as wu


def puppet(fifo_dir: str) -> str:
    """Run commands from ``<fifo_dir>/<id>.fifo``; log child notices to ``<id>.notices``."""
    ctx = wu.current()
    base = Path(fifo_dir)
    fifo = base / f"{ctx.id}.fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    # Keep a writer of our own open so EOF never spins the poll loop.
    keep = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    ctx.progress(0.0, "ready")
    buffer = b""
    notices = base / f"{ctx.id}.notices"
    while True:
        ready, _, _ = select.select([fd], [], [], 0.02)
        ctx.checkpoint({"alive": True})  # where a cancel is noticed
        inbox = ctx.notifications()
        while (notice := inbox.get_nowait()) is not None:
            assert isinstance(notice, wu.Notification)
            with notices.open("a") as f:
                f.write(f"{notice.id} {notice.status.value}\n")
        if not ready:
            continue
        buffer += os.read(fd, 4096)
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            command = line.decode()
            if command == "spawn":
                child = ctx.agent(puppet, fifo_dir)
                ctx.progress(0.5, f"spawned {child.id}")
            elif command == "complete":
                os.close(keep)
                return "ok"
            elif command == "raise":
                raise RuntimeError("told to fail")
            elif command == "exit":
                sys.exit(7)
            elif command == "segfault":
                ctypes.string_at(0)
            elif command == "hang":
                time.sleep(3600)


def send(fifo_dir: str, work_id: str, command: str) -> bool:
    """Write one command; False if the puppet is not listening (yet, or any more)."""
    try:
        fd = os.open(Path(fifo_dir) / f"{work_id}.fifo", os.O_WRONLY | os.O_NONBLOCK)
    except (FileNotFoundError, OSError):
        return False
    try:
        os.write(fd, command.encode() + b"\n")
    except OSError:
        return False
    finally:
        os.close(fd)
    return True
