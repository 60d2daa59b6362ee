"""Notices over HTTP: the ledger client's take / get / claim contract on leased claims.

``HttpClient.notifications()`` returns :class:`HttpNotices`. A claim made over
HTTP (``GET /v1/notifications``) holds for a lease; while this process holds
it, a daemon thread renews it (``PUT .../claims/{token}``) every third of the
lease, so it lives as long as its holder, as a local consumer's claim lives as
long as its process. ``ack()`` and ``release()`` stop the renewing first; the
client's ``close()`` releases every claim it still holds, so their notices go
back at once instead of when the lease lapses. A process that dies holding a
claim stops renewing: its notice comes back after the lease, ``redelivered``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import httpx

from workunits._core.claim import Claim, NoticeSource
from workunits._core.errors import ClientClosed, NoNotification, WorkunitsError
from workunits._core.record import Notification
from workunits._core.seconds import MAX_CLAIM_LEASE, seconds, wait_timeout

DEFAULT_CLAIM_LEASE = 30.0  # seconds a claim holds between two renewals
WAIT_SLICE = 30.0  # one long-poll lasts at most this; longer waits repeat it


class NoticeCalls(Protocol):
    """What ``HttpNotices`` calls on its client (an ``HttpClient``), which it does not import:
    the client imports this module, and is given to it."""

    url: str
    _lease_keeper: LeaseKeeper

    def _check_open(self) -> None: ...

    def take_notice(
        self, timeout: float = ..., lease: float = ...
    ) -> tuple[Notification, str] | None: ...

    def ack_notice(self, work_id: str, token: str) -> bool: ...

    def release_notice(self, work_id: str, token: str) -> bool: ...

    def renew_notice(self, work_id: str, token: str, lease: float = ...) -> bool: ...


class LeaseKeeper:
    """The renewing threads of one client's held claims; ``close`` releases what is left.

    Its lock guards ``_held`` and ``_closed``: an insert, a removal or a copy, O(1).
    """

    def __init__(self) -> None:
        self._held: dict[int, tuple[Claim[Notification], threading.Event]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def keep(
        self, claim: Claim[Notification], lease: float, renew: Callable[[], bool]
    ) -> threading.Event:
        """Renew ``claim`` every third of ``lease`` until the returned event is set."""
        stop = threading.Event()
        with self._lock:
            if self._closed:
                raise ClientClosed("the client is closed")
            self._held[id(claim)] = (claim, stop)

        def renew_until_settled() -> None:
            while not stop.wait(lease / 3):
                try:
                    if not renew():
                        return  # lost (the lease lapsed meanwhile): nothing left to keep
                except ClientClosed:
                    return
                except (httpx.TransportError, WorkunitsError):
                    continue  # the server may be back before the lease runs out
            return

        threading.Thread(
            target=renew_until_settled,
            name=f"workunits-notice-lease-{claim.notice.id}",
            daemon=True,
        ).start()
        return stop

    def drop(self, claim: Claim[Notification]) -> None:
        with self._lock:
            held = self._held.pop(id(claim), None)
        if held is not None:
            held[1].set()

    def close(self) -> None:
        """Release every claim still held (best effort: the lease ends it otherwise)."""
        with self._lock:
            self._closed = True
            held = list(self._held.values())
        for claim, _stop in held:
            # If the release fails, its renewing has stopped anyway: the lease
            # lapses and the notice comes back.
            with contextlib.suppress(httpx.HTTPError, WorkunitsError):
                claim.release()


class HttpNotices(NoticeSource[Notification], Iterator[Notification]):
    """Notices of top-level units from a ``serve --http`` API, each to one consumer.

    Consumers share them with every other consumer of the same supervisor
    (other HTTP clients, ``wu.connect(state_dir)`` clients): a notice one of
    them holds or acknowledged is not handed to the others. Iteration takes
    with ``get`` and ends when the client closes. A ``Notification`` from here
    has no output tail (``output_tail`` is empty): read the output with
    ``client.stream(notice.id)``.
    """

    def __init__(self, client: NoticeCalls, *, lease: float = DEFAULT_CLAIM_LEASE) -> None:
        self._client = client
        self.lease = seconds("lease", lease, most=MAX_CLAIM_LEASE)

    def __repr__(self) -> str:
        return f"<HttpNotices {self._client.url} lease {self.lease:g} s>"

    def claim_nowait(self) -> Claim[Notification] | None:
        """Claim the next notice if one is waiting, else None; ClientClosed once closed."""
        return self._claim_within(0.0)

    def claim(self, timeout: float | None = None) -> Claim[Notification]:
        """The next notice, claimed (and renewed while held); NoNotification (a
        TimeoutError) after ``timeout`` s, ClientClosed once closed."""
        timeout = wait_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else deadline - time.monotonic()
            claim = self._claim_within(max(0.0, min(WAIT_SLICE, left)))
            if claim is not None:
                return claim
            if deadline is not None and time.monotonic() >= deadline:
                raise NoNotification(f"no notification within {timeout} s")

    def _claim_within(self, wait: float) -> Claim[Notification] | None:
        client = self._client
        client._check_open()
        try:
            taken = client.take_notice(timeout=wait, lease=self.lease)
        except (httpx.HTTPError, RuntimeError):
            client._check_open()  # close() from another thread ends a long-poll this way
            raise
        if taken is None:
            return None
        notice, token = taken
        work_id, lease, keeper = notice.id, self.lease, client._lease_keeper

        def settle(verb: Callable[[str, str], bool]) -> Callable[[], bool]:
            def settled() -> bool:
                keeper.drop(claim)  # stop renewing first: the settled claim is not renewed
                return verb(work_id, token)

            return settled

        claim: Claim[Notification] = Claim(
            notice,
            ack=settle(client.ack_notice),
            release=settle(client.release_notice),
            renew=lambda seconds: client.renew_notice(work_id, token, seconds),
        )
        keeper.keep(claim, lease, lambda: client.renew_notice(work_id, token, lease))
        return claim

    def __next__(self) -> Notification:
        try:
            return self.get()
        except ClientClosed:
            raise StopIteration from None
