"""Every tool call, logged with the unit it touched: one JSON line each.

On stderr by default (stdout carries nothing but JSON-RPC on stdio), or in a
file (``workunits mcp --log-file PATH``, appended, 0600). A line says when,
which session, which tool, which units, whether it succeeded (or the error
sentence the model got), and how long it took. Arguments are not logged
whole: a command or an agent's arguments may hold what a log should not.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import IO, Any

import orjson


class CallLog:
    """Appends one line per tool call; thread-safe (a lock around each write)."""

    def __init__(self, path: str | None = None) -> None:
        self._lock = threading.Lock()  # guards writes to _out: one line at a time
        self._own = path is not None
        if path is None:
            self._out: IO[bytes] = sys.stderr.buffer
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            self._out = os.fdopen(fd, "ab")

    def write(
        self,
        *,
        session: str,
        tool: str,
        units: list[str],
        ok: bool,
        started: float,
        error: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        line: dict[str, Any] = {
            "at": round(time.time(), 3),
            "session": session,
            "tool": tool,
            "units": units,
            "ok": ok,
            "ms": round((time.monotonic() - started) * 1000, 1),
        }
        if error is not None:
            line["error"] = error
        if detail:
            line.update(detail)
        data = orjson.dumps(line) + b"\n"
        # A closed stderr must not fail the call the line describes.
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._out.write(data)
            self._out.flush()

    def close(self) -> None:
        if self._own:
            with self._lock:
                self._out.close()
