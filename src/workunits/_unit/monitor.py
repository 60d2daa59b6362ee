"""The body of a monitor's unit process: run the source, match its lines, send events.

``watch`` is the callable of an ``m`` unit's payload. A reader thread takes lines
from the source — a command's merged stdout and stderr, or the iterable a
callable returns — and queues them; the unit's main thread matches each against
the pattern and sends the matches that pass the rate limit over the channel.
The regex work stays in this process: the supervisor only relays events.

A command runs in the unit's own process group, so killing the monitor takes
the command with it. The monitor ends ``completed`` when its source ends.

Rate limiting (a token bucket) counts the matches it drops and keeps the latest
of them: the next event carries the count in ``suppressed``; when matches stop,
the latest dropped line goes out as soon as the bucket allows, or at the
source's end. So ``sum(1 + suppressed)`` over the events is the number of
matches, and the newest matching line is never lost.
"""

from __future__ import annotations

import contextlib
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from workunits._core.errors import Cancelled, WrongType
from workunits._unit.context import UnitContext, current
from workunits._unit.ratelimit import TokenBucket
from workunits._wire import frames as m

READ_LIMIT = 1 << 16  # a longer line of a command is matched on its first this many bytes
EVENT_LINE_LIMIT = 8192  # characters of a line kept in its event

Source = tuple[str, ...] | Callable[[], Iterable[str | bytes]]


@dataclass(frozen=True, slots=True)
class _Line:
    text: str
    at: float


@dataclass(frozen=True, slots=True)
class _End:
    exit_code: int | None
    error: BaseException | None = None


def watch(source: Source, pattern: str, flags: int, rate_limit: float | None) -> dict[str, Any]:
    """Run until the source ends; returns counts (and a command's exit code) as the result."""
    ctx = current()
    inbox = ctx.open_inbox()
    regex = re.compile(pattern, flags)
    proc = None
    if isinstance(source, tuple):
        proc = subprocess.Popen(  # same process group as this unit: a kill takes it too
            list(source), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    reader = threading.Thread(
        target=_read, args=(proc or source, inbox), name="workunits-monitor-source", daemon=True
    )
    reader.start()
    try:
        return _Matcher(ctx, regex, rate_limit).run(inbox)
    finally:
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


def _read(
    source: subprocess.Popen[bytes] | Callable[[], Iterable[str | bytes]], inbox: Any
) -> None:
    """The reader thread: queue every line of the source, then its end."""
    try:
        if isinstance(source, subprocess.Popen):
            stdout = source.stdout
            assert stdout is not None, "the command was started with stdout=PIPE"
            for raw in iter(lambda: stdout.readline(READ_LIMIT), b""):
                if not raw.endswith(b"\n"):
                    # A line longer than READ_LIMIT is matched on its first part; the
                    # rest of it is skipped, so no match begins in the middle of a line.
                    while (rest := stdout.readline(READ_LIMIT)) and not rest.endswith(b"\n"):
                        pass
                inbox.put(_Line(_text(raw), time.time()))
            stdout.close()
            inbox.put(_End(source.wait()))
            return
        for item in source():
            inbox.put(_Line(_text(_checked(item)), time.time()))
        inbox.put(_End(None))
    except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
        inbox.put(_End(None, exc))


def _checked(item: object) -> str | bytes:
    if not isinstance(item, str | bytes):
        raise WrongType(f"a monitor's source yields str or bytes, got {type(item).__name__}")
    return item


def _text(raw: str | bytes) -> str:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return text.rstrip("\r\n")


class _Matcher:
    """The main thread's loop: match, rate-limit, send."""

    def __init__(self, ctx: UnitContext, regex: re.Pattern[str], rate: float | None) -> None:
        self.ctx = ctx
        self.regex = regex
        self.bucket = None if rate is None else TokenBucket(rate, rate, time.monotonic())
        self.held: _Line | None = None  # the latest suppressed match, sent when a token frees
        self.suppressed = 0  # matches dropped since the last event, ``held`` included
        self.lines = self.matches = self.events = 0

    def run(self, inbox: queue.SimpleQueue[Any]) -> dict[str, Any]:
        while True:
            wait = None
            if self.held is not None and self.bucket is not None:
                now = time.monotonic()
                # A rate of one event in ages: no wait longer than the clock's bound.
                wait = min(self.bucket.next_at(now) - now, threading.TIMEOUT_MAX)
            try:
                item = inbox.get(timeout=wait)
            except queue.Empty:
                item = None
            if self.ctx.cancelled:
                raise Cancelled(f"{self.ctx.id} was cancelled")
            if isinstance(item, _Line):
                self._line(item)
            elif isinstance(item, _End):
                self._flush()
                if item.error is not None:
                    raise item.error
                return {
                    "lines": self.lines,
                    "matches": self.matches,
                    "events": self.events,
                    "exit_code": item.exit_code,
                }
            elif item is None and self.bucket is not None and self.bucket.take(time.monotonic()):
                self._flush()  # matches stopped and the bucket refilled: send the held one

    def _line(self, line: _Line) -> None:
        self.lines += 1
        if self.regex.search(line.text) is None:
            return
        self.matches += 1
        if self.bucket is None or self.bucket.take(time.monotonic()):
            self._send(line, self.suppressed)
        else:
            self.suppressed += 1
            self.held = line

    def _flush(self) -> None:
        if self.held is not None:
            self._send(self.held, self.suppressed - 1)

    def _send(self, line: _Line, suppressed: int) -> None:
        text = line.text[:EVENT_LINE_LIMIT]
        self.ctx.send(m.MonitorMatch(text, line.at, suppressed))
        self.ctx._transcript.write("match", line=text, suppressed=suppressed)
        self.events += 1
        self.held = None
        self.suppressed = 0
