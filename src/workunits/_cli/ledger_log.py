"""``serve``'s stderr while the ledger is away: one line per distinct failure, then one when
it answers again.

A PostgreSQL ledger that restarts (or fails over) makes every part of a
supervisor fail at once and again at each tick: the connection pool, the
wake-up listener, the schedules, the signals, the writes kept for a retry.
Each of those logs what it met, some with a traceback, and psycopg's messages
run over several lines. An operator needs to know that the ledger is away,
why, and when it is back -- not a screenful per tick. So the handler ``serve``
installs (``install``) passes a record about a transient ledger failure once,
as its first line (with the exception's first line when it carried one, and
never a traceback), drops the ones that say the same again, and forgets what
it said when the supervisor reports the ledger answers again (a record with
``ledger_recovered``). Every other record passes as it is.
"""

from __future__ import annotations

import logging
import re
import sys
import threading

from workunits._ledger.settle import transient

_ADDRESS = re.compile(r"0x[0-9a-f]+")
# Loggers whose every warning is about reaching the database.
_LEDGER_LOGGERS = ("psycopg", "workunits._ledger.postgres.listen")


class OneLinePerFailure(logging.Filter):
    """The filter; safe from any thread (the lock guards ``_said``, a set)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "ledger_recovered", False):
            with self._lock:
                self._said.clear()
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if not (
            (exc is not None and transient(exc))
            or getattr(record, "ledger_failure", False)
            or record.name.startswith(_LEDGER_LOGGERS)
        ):
            return True
        line = _first_line(record.getMessage())
        if exc is not None:
            line += f" ({type(exc).__name__}: {_first_line(str(exc))})"
        # One connection's address differs from the next one's: the same failure.
        key = f"{record.name}: {_ADDRESS.sub('0x', line)}"
        with self._lock:
            if key in self._said:
                return False
            self._said.add(key)
        record.msg, record.args = line, None
        record.exc_info = record.exc_text = record.stack_info = None
        return True


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].rstrip() if lines else ""


def install() -> None:
    """Route warnings and errors to stderr through the filter, unless the program has set
    up logging itself (a handler on the root logger)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(OneLinePerFailure())
    handler.setLevel(logging.WARNING)
    root.addHandler(handler)
