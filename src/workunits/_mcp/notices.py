"""Notices per MCP session: one mailbox consumer for the server, claims per session.

Every session of one server takes ends from the same consumer (the fleet's
mailbox of top-level units, ``workunits._core.claim``), so two sessions never
both hold an end. A session *claims* what ``take_notices`` returns and holds
it until it acknowledges: at its next ``take_notices`` (it has seen the batch
and acted on it) or with ``ack_notices``. A session that ends -- the stdio
client goes away, an HTTP client deletes its session or lets it idle out, the
server stops -- releases what it still holds, and the next taker gets those
ends again marked ``redelivered``. So a model's acknowledge-after-acting
keeps invariant 11's exactly-once.

Runs in the server's event loop; each claim, acknowledgement or release is a
short call in a worker thread (a ledger write or an HTTP request). The lock
guards ``_held`` only, never across those calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from workunits._core.claim import Claim, NoticeSource
from workunits._core.record import MailboxItem, Notification

POLL = 0.05  # seconds between looks while take_notices waits for an end


@dataclass
class _Session:
    held: dict[str, Claim[Any]] = field(default_factory=dict)  # notice ID -> its claim
    seen: float = field(default_factory=time.monotonic)


class NoticeDesk:
    """The server's one consumer of ends, and what each session holds of them."""

    def __init__(self, source: NoticeSource[MailboxItem] | NoticeSource[Notification]) -> None:
        self._source: NoticeSource[Any] = source
        self._lock = threading.Lock()  # guards _sessions
        self._sessions: dict[str, _Session] = {}

    def _session(self, key: str) -> _Session:
        with self._lock:
            session = self._sessions.setdefault(key, _Session())
            session.seen = time.monotonic()
            return session

    def touch(self, key: str) -> None:
        """The session made a request: it is alive (see ``end_idle``)."""
        with self._lock:
            session = self._sessions.get(key)
            if session is not None:
                session.seen = time.monotonic()

    def held(self, key: str) -> list[str]:
        with self._lock:
            session = self._sessions.get(key)
            return [] if session is None else list(session.held)

    async def take(self, key: str, most: int, wait: float) -> tuple[list[Any], list[str]]:
        """Acknowledge what ``key`` holds, then claim up to ``most`` ends for it.

        Waits up to ``wait`` seconds for the first one. Returns the notices and
        the IDs just acknowledged. Cancelled (the client gave up on the call),
        it gives back what it claimed: the model never saw those ends, so they
        must not be acknowledged at its next take.
        """
        acked = await self.ack(key, None)
        session = self._session(key)
        taken: list[Any] = []
        mine: list[str] = []  # the IDs this call claimed and kept for the session
        deadline = time.monotonic() + wait
        try:
            while len(taken) < most:
                # Shielded: a claim made in the thread must reach the session, or it
                # would stay claimed by this process with nobody holding it.
                with anyio.CancelScope(shield=True):
                    claim = await anyio.to_thread.run_sync(self._source.claim_nowait)
                    if claim is not None and self._keep(key, session, claim):
                        mine.append(claim.notice.id)
                if claim is not None:
                    taken.append(claim.notice)
                    continue
                if taken or time.monotonic() >= deadline:
                    break
                await anyio.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._give_back, session, mine)
            raise
        return taken, acked

    def _keep(self, key: str, session: _Session, claim: Claim[Any]) -> bool:
        """Hold ``claim`` for the session; False for what needs no holding (or was given back)."""
        notice = claim.notice
        if not isinstance(notice, Notification):
            claim.ack()  # a monitor's event: nothing to hold
            return False
        with self._lock:
            if self._sessions.get(key) is session:
                session.held[notice.id] = claim
                return True
        # The session ended while this claim was being made: give it back at once.
        claim.release()
        return False

    def _give_back(self, session: _Session, ids: list[str]) -> None:
        with self._lock:
            claims = [session.held.pop(i) for i in ids if i in session.held]
        for claim in claims:
            claim.release()

    async def ack(self, key: str, ids: list[str] | None) -> list[str]:
        """Acknowledge the ends ``key`` holds (``ids``: those only); the IDs acknowledged."""
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return []
            wanted = list(session.held) if ids is None else [i for i in ids if i in session.held]
            claims = [(i, session.held.pop(i)) for i in wanted]
        done: list[str] = []
        # Shielded: the claims are out of the session now, and must be settled.
        with anyio.CancelScope(shield=True):
            for work_id, claim in claims:
                if await anyio.to_thread.run_sync(claim.ack):
                    done.append(work_id)
        return done

    def end(self, key: str) -> int:
        """The session is gone: give back what it holds (delivered again, ``redelivered``).

        Blocking (a ledger write per claim): call it in a worker thread, or at shutdown.
        """
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is None:
            return 0
        for claim in session.held.values():
            claim.release()
        return len(session.held)

    def end_idle(self, idle: float, gone: Callable[[str], None] | None = None) -> None:
        """End sessions not seen for ``idle`` seconds (an HTTP client that left unannounced)."""
        now = time.monotonic()
        with self._lock:
            stale = [k for k, s in self._sessions.items() if now - s.seen > idle]
        for key in stale:
            self.end(key)
            if gone is not None:
                gone(key)

    def end_all(self) -> None:
        with self._lock:
            keys = list(self._sessions)
        for key in keys:
            self.end(key)
