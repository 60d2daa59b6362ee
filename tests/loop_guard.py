"""A watchdog for async tests: the event loop's thread must never block.

``LoopGuard.run(main)`` runs ``main()`` on a fresh loop (debug mode) and, while
it runs, records every blocking call made *on the loop's thread*:

- a wait on a ``threading.Event`` or ``threading.Condition`` (pykka futures,
  queues, ``Event.wait``), except the instant one ``Thread.start()`` makes;
- a ledger read or write (``SqliteDatabase.read`` / ``write``: SQLite on disk);
- the audit events of blocking I/O: ``open`` under the test's directory,
  ``sqlite3.connect``, ``time.sleep``, ``subprocess.Popen``, ``socket.connect``;
- a loop step slower than ``slow`` seconds (asyncio debug's slow-callback
  warning), and a ticking coroutine's lag over ``max_lag``: the backstop for
  blocking the hooks above do not see.

Any of these fails the test, naming the call. The hooks are instrumentation
around the real code, not stand-ins: everything still runs.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from workunits._ledger.sqlite.db import SqliteDatabase

T = TypeVar("T")

_AUDITED = {"sqlite3.connect", "time.sleep", "subprocess.Popen", "socket.connect"}
_state: dict[str, Any] = {"guard": None}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    guard = _state["guard"]
    if guard is None or threading.get_ident() != guard.loop_thread:
        return
    if event in _AUDITED:
        guard.blocked(f"{event}{args!r}")
    elif (
        event == "open"
        and args
        and isinstance(args[0], str | bytes | Path)
        and str(args[0]).startswith(guard.root)
    ):
        guard.blocked(f"open({args[0]!r})")


sys.addaudithook(_audit)  # audit hooks cannot be removed: it checks _state on each event


class LoopGuard:
    def __init__(self, root: Path, *, slow: float, max_lag: float) -> None:
        self.root = str(root)
        self.slow = slow
        self.max_lag = max_lag
        self.loop_thread: int | None = None
        self.violations: list[str] = []
        self.lags: list[float] = []

    def blocked(self, what: str) -> None:
        where = "".join(traceback.format_stack(limit=9)[:-3])
        self.violations.append(f"{what}, from:\n{where}")

    def run(self, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``main()`` on a new loop under the watchdog; fail on any blocking call."""
        with self._hooks():
            result = asyncio.run(self._watched(main), debug=True)
        assert self.violations == [], "the event loop's thread blocked:\n" + "\n".join(
            self.violations
        )
        worst = max(self.lags, default=0.0)
        assert worst < self.max_lag, f"the loop lagged {worst * 1000:.0f} ms"
        return result

    async def _watched(self, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
        loop = asyncio.get_running_loop()
        loop.slow_callback_duration = self.slow
        self.loop_thread = threading.get_ident()
        ticker = asyncio.create_task(self._tick())
        try:
            return await main()
        finally:
            ticker.cancel()
            self.loop_thread = None

    async def _tick(self) -> None:
        interval = 0.001
        while True:
            start = time.perf_counter()
            await asyncio.sleep(interval)
            self.lags.append(time.perf_counter() - start - interval)

    @contextmanager
    def _hooks(self) -> Iterator[None]:
        guard = self
        originals: list[tuple[Any, str, Any]] = []

        def wrap(owner: Any, name: str, allowed: Callable[[tuple[Any, ...]], bool]) -> None:
            original = getattr(owner, name)

            def checked(*args: Any, **kwargs: Any) -> Any:
                seen = (*args, kwargs["timeout"]) if "timeout" in kwargs else args
                if threading.get_ident() == guard.loop_thread and not allowed(seen):
                    guard.blocked(f"{owner.__qualname__}.{name}")
                return original(*args, **kwargs)

            originals.append((owner, name, original))
            setattr(owner, name, checked)

        start_code = threading.Thread.start.__code__
        event_wait_code = threading.Event.wait.__code__  # judged by its own wrapper

        def wait_allowed(args: tuple[Any, ...]) -> bool:
            timeout = args[1] if len(args) > 1 else None
            if timeout is not None and timeout <= 0:
                return True  # a look, not a wait
            frame = sys._getframe(2)  # the caller of the wrapper
            # Thread.start() waits for "started", which is instant.
            return frame.f_code in {start_code, event_wait_code}

        wrap(threading.Event, "wait", wait_allowed)
        wrap(threading.Condition, "wait", wait_allowed)
        wrap(SqliteDatabase, "read", lambda args: False)
        wrap(SqliteDatabase, "write", lambda args: False)

        class SlowStep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                message = record.getMessage()
                if "took" in message and "seconds" in message:
                    guard.blocked(f"slow loop step: {message}")

        handler = SlowStep(logging.WARNING)
        asyncio_log = logging.getLogger("asyncio")
        asyncio_log.addHandler(handler)
        _state["guard"] = self
        try:
            yield
        finally:
            _state["guard"] = None
            asyncio_log.removeHandler(handler)
            for owner, name, original in reversed(originals):
                setattr(owner, name, original)


@pytest.fixture
def guard(tmp_path: Path) -> LoopGuard:
    """Run async code with ``guard.run(main)``: the test fails if the loop's thread blocks."""
    # The exact hooks above catch a blocking call whatever it costs; the step and
    # lag bounds are only a backstop against what no hook covers. A loop step was
    # seen to take 1.4 s on a 2-core machine running the whole suite with no
    # blocking call the hooks know of (being descheduled, a full GC): the bounds
    # sit well above that, so the backstop reports hangs, not a busy machine.
    return LoopGuard(tmp_path, slow=5.0, max_lag=10.0)
