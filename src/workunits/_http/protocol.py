"""uvicorn's HTTP/1.1 protocol with the read timeouts and per-client cap it lacks.

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) and caps
concurrency for the whole server, but it waits for ever for a request's
headers and for its body, and lets one client hold any number of
connections: 3,000 slow-header connections stayed open, and a request that
announced 1,000,000 bytes and sent 1,000 waited for the rest until the
client gave up. Its ``http=`` setting takes a protocol class, so this one
adds, per connection (all of it on the server's event loop thread):

- a **header timeout**: a request's headers must arrive within
  ``header_timeout`` seconds of its first byte (of the connection, for the
  first request); otherwise 408 and the connection closes;
- a **body timeout**: its body must arrive within ``body_timeout`` seconds of
  its headers; otherwise the connection closes (the app's ``receive`` sees a
  disconnect, and 408 goes out if no response had started);
- a **cap per client address**: at most ``max_per_client`` connections; a new
  one past the cap first closes that client's oldest idle connection, and
  is refused with 503 when none of them is idle.

Changing the server was the other way (hypercorn has read timeouts); the
rest of the HTTP front is uvicorn's and stays so.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from workunits._core.errors import SpecError

HEADER_TIMEOUT = 10.0
BODY_TIMEOUT = 30.0
MAX_PER_CLIENT = 256


class Limits:
    """The settings and the per-address connection table one server's protocols share."""

    def __init__(
        self,
        header_timeout: float = HEADER_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
        max_per_client: int = MAX_PER_CLIENT,
    ) -> None:
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_per_client = max_per_client
        # Client address -> its open connections, oldest first (dicts keep order).
        self.by_client: defaultdict[str, dict[GuardedProtocol, None]] = defaultdict(dict)

    @classmethod
    def parse(cls, text: str) -> Limits:
        """``"HEADER,BODY,CONNECTIONS"`` (seconds, seconds, a count); SpecError otherwise."""
        parts = text.split(",")
        try:
            header, body, most = float(parts[0]), float(parts[1]), int(parts[2])
        except (ValueError, IndexError):
            raise SpecError(
                f"--http-limits takes HEADER,BODY,CONNECTIONS (e.g. 10,30,256), got {text!r}"
            ) from None
        if len(parts) != 3 or min(header, body) <= 0 or most < 1:
            raise SpecError(f"--http-limits wants positive numbers, got {text!r}")
        return cls(header, body, most)

    def protocol(self) -> type[GuardedProtocol]:
        """A protocol class bound to these limits, for ``uvicorn.Config(http=...)``."""
        limits = self

        class Bound(GuardedProtocol):
            _limits = limits

        return Bound


class GuardedProtocol(H11Protocol):
    """``H11Protocol`` with header and body timeouts and a cap per client address."""

    _limits: Limits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._deadline_is_body = False
        self._address = ""
        # Bytes of a request arrived, and its response has not gone out yet.
        self._mid_request = False

    # -- the connection -------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._address = self.client[0] if self.client else ""
        mine = self._limits.by_client[self._address]
        if len(mine) >= self._limits.max_per_client:
            idle = next((p for p in mine if p._idle()), None)
            if idle is None:
                self._refuse()
                return
            idle.transport.close()
            mine.pop(idle, None)
        mine[self] = None
        self._arm(self._limits.header_timeout, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        mine = self._limits.by_client.get(self._address)
        if mine is not None:
            mine.pop(self, None)
            if not mine:
                del self._limits.by_client[self._address]
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._mid_request = True
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            # The first bytes of the next request on a kept-alive connection.
            self._arm(self._limits.header_timeout, self._headers_late)
        super().data_received(data)
        self._follow_state()

    def on_response_complete(self) -> None:
        self._mid_request = False
        super().on_response_complete()
        self._follow_state()

    # -- deadlines ---------------------------------------------------------------

    def _follow_state(self) -> None:
        """Move the deadline on as the request does: headers in, then body in."""
        state = self.conn.their_state
        if state is h11.SEND_BODY and self._waiting_for != "body":
            self._arm(self._limits.body_timeout, self._body_late)
        elif (state is not h11.SEND_BODY and self._waiting_for == "body") or (
            state is not h11.IDLE and self._waiting_for == "headers"
        ):
            self._disarm()

    @property
    def _waiting_for(self) -> str:
        if self._deadline is None:
            return ""
        return "body" if self._deadline_is_body else "headers"

    def _arm(self, seconds: float, then: Any) -> None:
        self._disarm()
        self._deadline_is_body = then == self._body_late
        self._deadline = self.loop.call_later(seconds, then)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._send_and_close(408, b"the request's headers took too long")

    def _body_late(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_started:
            self._send_and_close(408, b"the request's body took too long")
        else:
            self.transport.close()

    def _idle(self) -> bool:
        """Waiting for a next request that has not begun (a kept-alive connection)."""
        return not self._mid_request

    def _refuse(self) -> None:
        self._send_and_close(503, b"too many connections from this address", retry=True)

    def _send_and_close(self, status: int, text: bytes, *, retry: bool = False) -> None:
        """A whole response written raw (h11 may be mid-request), then close."""
        reason = {408: b"Request Timeout", 503: b"Service Unavailable"}[status]
        head = [
            b"HTTP/1.1 %d %s" % (status, reason),
            b"content-type: text/plain; charset=utf-8",
            b"content-length: %d" % len(text),
            b"connection: close",
        ]
        if retry:
            head.append(b"retry-after: 1")
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + text)
        self.transport.close()
