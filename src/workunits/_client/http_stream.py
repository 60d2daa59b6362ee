"""A unit's output over HTTP, once each byte, for ``for`` and ``async for`` alike.

What ``HttpClient.stream`` / ``stream_async`` return: the HTTP twin of the
ledger client's ``LedgerStream``. Following (``follow=True``) reads the unit's
Server-Sent Events and keeps only ``output``; a dropped connection resumes from
the last event's ID (``Last-Event-ID``), so nothing is lost or repeated. Without
following it reads ``/output`` from its own offset until it has what is there now.

Threads: the sync iteration runs in the caller's thread on the client's
``httpx.Client``; ``async for`` runs on the caller's loop on its ``AsyncClient``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol

import httpx

from workunits._core.errors import ServerUnreachable


class OutputCalls(Protocol):
    """What ``HttpOutputStream`` calls on its client (an ``HttpClient``), which it does not
    import: the client imports this module, and is given to it."""

    def _check_open(self) -> None: ...

    def _stream_events(
        self, work_id: str, headers: dict[str, str]
    ) -> AbstractContextManager[httpx.Response]: ...

    def _stream_events_async(
        self, work_id: str, headers: dict[str, str]
    ) -> AbstractAsyncContextManager[httpx.Response]: ...

    def _read_output(self, work_id: str, offset: int, limit: int) -> httpx.Response: ...

    async def _read_output_async(self, work_id: str, offset: int, limit: int) -> httpx.Response: ...


OUTPUT_LIMIT = 1 << 20  # bytes asked for per ``/output`` read (the server's maximum)
RECONNECTS = 10  # connections in a row that may drop before the stream gives up
RECONNECT_DELAY = 0.05  # seconds before the first reconnect, doubled at each, up to:
RECONNECT_MAX_DELAY = 2.0  # ten tries span ~11 s: a server's restart, not only a blip


class SseParser:
    """Text/event-stream lines in, ``(event, data, id)`` out (comments skipped).

    Fed one line at a time, so the sync and the async reader share it.
    """

    def __init__(self) -> None:
        self.event = "message"
        self.data: list[str] = []
        self.id: str | None = None

    def feed(self, line: str) -> tuple[str, str, str | None] | None:
        """The event that an empty ``line`` completes, else None."""
        if not line:
            done = (self.event, "\n".join(self.data), self.id) if self.data else None
            self.event, self.data = "message", []
            return done
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self.event = value
        elif field == "data":
            self.data.append(value)
        elif field == "id":
            self.id = value
        return None


def output_bytes(data: dict[str, Any]) -> bytes:
    """The bytes an ``output`` event carries (text, or base64 when not UTF-8)."""
    return data["text"].encode() if "text" in data else base64.b64decode(data["base64"])


class HttpOutputStream(Iterator[bytes]):
    """Every byte of one unit's output, once, in order, until the unit ends.

    With ``follow=False`` it ends as soon as it has read what is there now.
    ``offset`` counts the bytes this stream has returned; a unit whose early
    output is no longer held (it ended, and only its tail is kept) starts at
    the tail, as the ledger client's stream does.
    """

    def __init__(self, client: OutputCalls, work_id: str, *, follow: bool = True) -> None:
        self.id = work_id
        self.follow = follow
        self.offset = 0
        self._client = client
        self._last_event: str | None = None  # the SSE cursor to resume after
        self._next_offset = 0  # where the next ``/output`` read starts
        self._sync: Generator[bytes, None, None] | None = None
        self._open = True

    def __repr__(self) -> str:
        return f"<HttpOutputStream {self.id} at {self.offset}>"

    # -- for chunk in stream ----------------------------------------------------------

    def __next__(self) -> bytes:
        if self._sync is None:
            self._sync = self._follow() if self.follow else self._read_now()
        if not self._open:
            raise StopIteration
        data = next(self._sync)
        self.offset += len(data)
        return data

    def _follow(self) -> Generator[bytes, None, None]:
        failures = 0
        while True:
            headers = {} if self._last_event is None else {"Last-Event-ID": self._last_event}
            try:
                with self._client._stream_events(self.id, headers) as response:
                    parser = SseParser()
                    for line in response.iter_lines():
                        failures = 0
                        data = self._take(parser.feed(line))
                        if data:
                            yield data
                        if not self._open:
                            return
            except (httpx.TransportError, ServerUnreachable) as exc:
                failures = self._reconnecting(failures, exc)
                time.sleep(_delay(failures))

    def _read_now(self) -> Generator[bytes, None, None]:
        while True:
            response = self._client._read_output(self.id, self._next_offset, OUTPUT_LIMIT)
            self._next_offset = int(response.headers["X-Next-Offset"])
            if not response.content:
                return
            yield response.content

    # -- async for chunk in stream ------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._afollow() if self.follow else self._aread_now()

    async def _afollow(self) -> AsyncIterator[bytes]:
        failures = 0
        while self._open:
            headers = {} if self._last_event is None else {"Last-Event-ID": self._last_event}
            try:
                async with self._client._stream_events_async(self.id, headers) as response:
                    parser = SseParser()
                    async for line in response.aiter_lines():
                        failures = 0
                        data = self._take(parser.feed(line))
                        if data:
                            self.offset += len(data)
                            yield data
                        if not self._open:
                            return
            except (httpx.TransportError, ServerUnreachable) as exc:
                failures = self._reconnecting(failures, exc)
                await asyncio.sleep(_delay(failures))

    async def _aread_now(self) -> AsyncIterator[bytes]:
        while self._open:
            response = await self._client._read_output_async(
                self.id, self._next_offset, OUTPUT_LIMIT
            )
            self._next_offset = int(response.headers["X-Next-Offset"])
            if not response.content:
                return
            self.offset += len(response.content)
            yield response.content

    # -- both ------------------------------------------------------------------------

    def _take(self, event: tuple[str, str, str | None] | None) -> bytes | None:
        """An event's output bytes; None for other events (``end`` closes the stream)."""
        if event is None:
            return None
        kind, data, event_id = event
        self._last_event = event_id or self._last_event
        if kind == "end":
            self._open = False
        elif kind == "output":
            return output_bytes(json.loads(data))
        return None

    def _reconnecting(self, failures: int, error: Exception) -> int:
        """After a dropped connection: one more failure, or ServerUnreachable once there
        were enough."""
        self._client._check_open()  # ClientClosed: the client closed under the stream
        if failures >= RECONNECTS:
            if isinstance(error, ServerUnreachable):
                raise error
            raise ServerUnreachable(
                f"the output stream of {self.id} was cut and could not resume after "
                f"{RECONNECTS} tries: {type(error).__name__}: {error}"
            ) from error
        return failures + 1

    def close(self) -> None:
        """Stop following (closes the connection); the next step ends the iteration."""
        self._open = False
        if self._sync is not None:
            self._sync.close()

    def __enter__(self) -> HttpOutputStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _delay(failures: int) -> float:
    """Seconds before the ``failures``-th reconnect in a row."""
    return float(min(RECONNECT_DELAY * 2.0 ** (failures - 1), RECONNECT_MAX_DELAY))
