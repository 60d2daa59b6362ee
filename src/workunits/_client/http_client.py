"""``wu.connect("http://host:port", token=...)``: the Client calls over the HTTP API.

The same calls as a ledger client (``_client.ledger_client.Client``), taking the same
parameters -- shell, agent, workflow, retry, get, list, wait, result, signal,
cancel, kill, stream, retain, notifications, closed -- with the same results
and the same errors: a problem document's ``title`` names the Python error and
its ``detail`` is that error's message. Each call has an ``_async`` twin where
the ledger client has one. Needs the ``workunits[http]`` extra (httpx).

Absent, because they are the ledger itself: ``ledger``, ``row``/``rows``/
``row_async`` (the ledger's full rows), ``request``/``request_result`` (the
ledger's request queue: use ``cancel``/``kill``, which the server applies at
once), ``readonly`` and ``supervisor_running`` (a server that answers is its
supervisor). A test (tests/test_public_api.py) lists them and checks the rest.

Threads: the sync calls share one ``httpx.Client`` (thread-safe); the async
twins use one ``httpx.AsyncClient``, made on first use, bound to that loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any, TypeVar, cast
from urllib.parse import quote

try:
    import httpx
except ModuleNotFoundError as missing:  # the optional extra: say which one
    raise ModuleNotFoundError(
        "the HTTP client needs httpx: pip install 'workunits[http]'", name="httpx"
    ) from missing

from workunits._client import http_wire
from workunits._client.http_notices import HttpNotices, LeaseKeeper
from workunits._client.http_stream import HttpOutputStream, SseParser
from workunits._core import ids
from workunits._core.errors import (
    ClientClosed,
    ServerUnreachable,
    SpecError,
)
from workunits._core.record import Notification, WorkRecord
from workunits._core.retain import HeldRetains
from workunits._core.sandbox import Sandbox
from workunits._core.seconds import DEFAULT_CLAIM_LEASE, MAX_CLAIM_LEASE, seconds
from workunits._core.status import Reason, Status
from workunits._surface import batch, ops
from workunits._surface._generated import HttpClientVerbs, HttpHandleVerbs
from workunits._surface.submission import Submission

R = TypeVar("R")


class HttpHandle(HttpHandleVerbs):
    """What ``HttpClient.shell``/``agent`` return: the unit's ID, and ``created``."""

    __slots__ = ()

    def __init__(self, client: HttpClient, work_id: str, *, created: bool = True) -> None:
        super().__init__(client, work_id, created=created)

    @property
    def client(self) -> HttpClient:
        """The client the unit was submitted through."""
        return self._surface


class _Session(httpx.Client):
    """The sync connection pool: a request after ``close()`` raises ClientClosed."""

    def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        if self.is_closed:
            raise ClientClosed("the client is closed")
        try:
            return super().send(request, **kwargs)
        except httpx.TransportError as exc:
            raise _unreachable(request, exc) from exc


class _AsyncSession(httpx.AsyncClient):
    """The async connection pool: a request after ``aclose()`` raises ClientClosed."""

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        if self.is_closed:
            raise ClientClosed("the client is closed")
        try:
            return await super().send(request, **kwargs)
        except httpx.TransportError as exc:
            raise _unreachable(request, exc) from exc


def _unreachable(request: httpx.Request, exc: httpx.TransportError) -> ServerUnreachable:
    return ServerUnreachable(
        f"{request.method} {request.url.path} on {request.url.scheme}://{request.url.netloc.decode()}"
        f": {type(exc).__name__}: {exc or 'no answer'}; is `workunits serve --http` running there?"
    )


class HttpClient(HttpClientVerbs):
    """Work units through a ``workunits serve --http`` API, with the ledger client's calls.

    Its verbs are every surface's (``workunits._surface``), carried out as HTTP
    requests (``http_wire``); what it lacks of the ledger client's -- the
    ledger itself: ``ledger``, ``row``, ``rows``, ``request``... -- and what it
    adds (``parent=``, ``notifications(lease=)``, ``events``, ``aclose``) are
    listed in ``workunits._surface.surfaces``.
    """

    def __init__(self, url: str, *, token: str, timeout: float = 60.0) -> None:
        if not isinstance(token, str) or not token.strip() or not token.isprintable():
            raise SpecError(
                f"token must be the server's bearer token (the state dir's http.token, "
                f"non-empty printable text), got {token!r:.40}"
            )
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = timeout = seconds("timeout", timeout)
        self._http = _Session(base_url=self.url, headers=self._headers, timeout=timeout)
        # The connection pool of an ``async with client`` block, bound to its loop;
        # outside one, each async call has a pool of its own (see _AsyncCalls).
        self._async: httpx.AsyncClient | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        self._closed = threading.Event()
        self._lease_keeper = LeaseKeeper()  # renews the notice claims held through this client
        self._held = HeldRetains()  # leases retain() gave out: release(id) ends them

    def __repr__(self) -> str:
        return f"<workunits.HttpClient {self.url!r}{' closed' if self.closed else ''}>"

    @property
    def closed(self) -> bool:
        """True once ``close()`` (or ``aclose()``) was called."""
        return self._closed.is_set()

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise ClientClosed("the client is closed")

    def _aclient(self) -> _AsyncCalls:
        self._check_open()
        return _AsyncCalls(self)

    def _shared_async(self) -> httpx.AsyncClient | None:
        """The ``async with`` block's pool when called on its loop, else None."""
        if self._async is not None and self._async_loop is asyncio.get_running_loop():
            return self._async
        return None

    def _new_async(self) -> httpx.AsyncClient:
        return _AsyncSession(base_url=self.url, headers=self._headers, timeout=self._timeout)

    # -- the transport of its verbs (``workunits._surface``): HTTP requests --------------

    def _drive(self, steps: http_wire.Steps[R]) -> R:
        """Carry out an operation's requests (``http_wire``) on the blocking connections."""
        try:
            call = next(steps)
            while True:
                method, path, kwargs = _request_of(call, self._timeout)
                call = steps.send(self._http.request(method, path, **kwargs))
        except StopIteration as done:
            return cast("R", done.value)

    async def _drive_async(self, steps: http_wire.Steps[R]) -> R:
        """``_drive`` on the caller's loop, with the async connections."""
        try:
            call = next(steps)
            while True:
                method, path, kwargs = _request_of(call, self._timeout)
                call = steps.send(await self._aclient().request(method, path, **kwargs))
        except StopIteration as done:
            return cast("R", done.value)

    def _run(self, op: ops.Op[R]) -> R:
        return cast("R", self._drive(http_wire.steps_for(op)))

    async def _run_async(self, op: ops.Op[R]) -> R:
        return cast("R", await self._drive_async(http_wire.steps_for(op)))

    def _submit(self, submission: Submission) -> HttpHandle:
        """``POST /v1/units``; ``key`` is its Idempotency-Key."""
        return self._handle(self._drive(http_wire.submit(submission)))

    async def map_async(
        self,
        fn: Callable[..., Any] | str,
        *iterables: Iterable[Any],
        timeout: float | None = None,
        max_workers: int | None = None,
        reuse: bool = False,
        sandbox: Sandbox | None = None,
    ) -> AsyncGenerator[Any, None]:
        """Like ``map``, as an async iterator: ``async for value in client.map_async(...)``."""
        end = batch.deadline(timeout)
        handles = await self.submit_many_async(
            batch.calls_of(fn, iterables), max_workers=max_workers, reuse=reuse, sandbox=sandbox
        )
        ids = [h.id for h in handles]
        async for value in batch.results_async(ids, end, self.result_async, self.kill_async):
            yield value

    def map(
        self,
        fn: Callable[..., Any] | str,
        *iterables: Iterable[Any],
        timeout: float | None = None,
        max_workers: int | None = None,
        reuse: bool = False,
        sandbox: Sandbox | None = None,
    ) -> Generator[Any, None, None]:
        """``fn`` over the zipped items as agent units, one batch; results in order, as
        ``Executor.map`` (a failure raised at its place, ``timeout`` for the whole map).
        Leaving the loop early kills the units whose results were not read."""
        end = batch.deadline(timeout)
        handles = self.submit_many(
            batch.calls_of(fn, iterables), max_workers=max_workers, reuse=reuse, sandbox=sandbox
        )
        return batch.results([h.id for h in handles], end, self.result, self.kill)

    async def _submit_async(self, submission: Submission) -> HttpHandle:
        return self._handle(await self._drive_async(http_wire.submit(submission)))

    def _submit_batch(
        self, submissions: list[Submission], max_workers: int | None
    ) -> list[HttpHandle | BaseException]:
        """``POST /v1/units:batch``: one request, one transaction on the server."""
        answers = self._drive(http_wire.submit_batch(submissions, max_workers))
        return [a if isinstance(a, BaseException) else self._handle(a) for a in answers]

    async def _submit_batch_async(
        self, submissions: list[Submission], max_workers: int | None
    ) -> list[HttpHandle | BaseException]:
        answers = await self._drive_async(http_wire.submit_batch(submissions, max_workers))
        return [a if isinstance(a, BaseException) else self._handle(a) for a in answers]

    def _handle(self, submitted: ops.Submitted) -> HttpHandle:
        return HttpHandle(self, submitted.id, created=submitted.created)

    def _wait(self, work_id: str, timeout: float | None) -> WorkRecord:
        """Long-poll ``/result`` until the unit is terminal; NotFinished after ``timeout``."""
        return self._drive(http_wire.finish(work_id, timeout, for_result=False))[0]

    async def _wait_async(self, work_id: str, timeout: float | None) -> WorkRecord:
        return (await self._drive_async(http_wire.finish(work_id, timeout, for_result=False)))[0]

    def _result(self, work_id: str, timeout: float | None) -> Any:
        return http_wire.value_of(self._drive(http_wire.finish(work_id, timeout, for_result=True)))

    async def _result_async(self, work_id: str, timeout: float | None) -> Any:
        found = await self._drive_async(http_wire.finish(work_id, timeout, for_result=True))
        return http_wire.value_of(found)

    def _stream(self, work_id: str, follow: bool, poll: float) -> HttpOutputStream:
        """Follows ``/events`` (resuming after a dropped connection); with ``follow=False``,
        reads ``/output`` for only what has been written so far. UnknownWork here, not at
        the first ``next()``."""
        response = self._http.get(http_wire.unit_path(work_id))
        if response.status_code != 410:  # an expired unit's tail is still served
            http_wire.checked(response)
        return self._stream_async(work_id, follow, poll)

    def _stream_async(self, work_id: str, follow: bool, poll: float) -> HttpOutputStream:
        """An unknown ID raises at the first step."""
        self._check_open()
        return HttpOutputStream(self, work_id, follow=follow)

    def _notifications(self, lease: float) -> HttpNotices:
        """A claim holds for ``lease`` seconds at a time and this client renews it while
        it is held, so it lasts as long as this process (or ``close()``)."""
        self._check_open()
        return HttpNotices(self, lease=lease)

    async def _notifications_async(self, lease: float) -> HttpNotices:
        return self._notifications(lease)

    # -- what ``HttpOutputStream`` and ``HttpNotices`` call --------------------------------

    def _stream_events(
        self, work_id: str, headers: dict[str, str]
    ) -> AbstractContextManager[httpx.Response]:
        """The ``/events`` response, checked (for ``HttpOutputStream``)."""
        return _checked_stream(
            self._http.stream(
                "GET", http_wire.unit_path(work_id, "/events"), headers=headers, timeout=None
            )
        )

    def _stream_events_async(
        self, work_id: str, headers: dict[str, str]
    ) -> AbstractAsyncContextManager[httpx.Response]:
        return _checked_stream_async(
            self._aclient().stream(
                "GET", http_wire.unit_path(work_id, "/events"), headers=headers, timeout=None
            )
        )

    def _read_output(self, work_id: str, offset: int, limit: int) -> httpx.Response:
        return self._drive(http_wire.output(work_id, offset, limit))

    async def _read_output_async(self, work_id: str, offset: int, limit: int) -> httpx.Response:
        return await self._drive_async(http_wire.output(work_id, offset, limit))

    def events(
        self, work_id: str, after: str | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(type, data)`` of each SSE event until ``end``, resuming after a dropped connection."""
        import json  # noqa: PLC0415

        last = after
        while True:
            headers = {} if last is None else {"Last-Event-ID": last}
            with self._http.stream(
                "GET", http_wire.unit_path(work_id, "/events"), headers=headers, timeout=None
            ) as r:
                _check_stream(r)
                try:
                    for event, data, event_id in _events_in(r.iter_lines()):
                        last = event_id or last
                        yield event, json.loads(data)
                        if event == "end":
                            return
                except (httpx.TransportError, ServerUnreachable):
                    continue  # reconnect from the last event seen

    # -- its own: the HTTP API's leases and claims ------------------------------------------

    def renew_retain(self, work_id: str, lease_id: str, lease: float = 30.0) -> bool:
        """Renew a retain lease by its ID; False once it lapsed or was released."""
        lease = seconds("lease", lease, most=MAX_CLAIM_LEASE)
        return self._run(ops.RenewLease(work_id, lease_id, lease))

    def take_notice(
        self, timeout: float = 0.0, lease: float = 30.0
    ) -> tuple[Notification, str] | None:
        """Claim the next application notice (None if none within ``timeout``): the notice
        and the token that acks (``ack_notice``) or releases (``release_notice``) it."""
        r = http_wire.checked(
            self._http.get(
                "/v1/notifications",
                params={"wait": timeout, "lease": lease},
                timeout=timeout + self._timeout,
            )
        )
        if r.status_code == 204:
            return None
        n = r.json()
        notice = Notification(
            id=n["id"],
            kind=n["kind"],
            status=Status(n["status"]),
            exit_code=n["exit_code"],
            signal=n["signal"],
            error=n["error"],
            reason=None if n["reason"] is None else Reason(n["reason"]),
            description=n["description"],
            output_tail=b"",
            ended_at=n["ended_at"],
            redelivered=n["redelivered"],
        )
        return notice, n["token"]

    def renew_notice(self, work_id: str, token: str, lease: float = DEFAULT_CLAIM_LEASE) -> bool:
        """Extend a claim (from ``take_notice``) by ``lease`` seconds; False if it was lost."""
        lease = seconds("lease", lease, most=MAX_CLAIM_LEASE)
        response = self._http.put(
            f"/v1/notifications/{ids.validate(work_id)}/claims/{quote(token, safe='')}",
            json={"token": token, "lease": lease},
        )
        if response.status_code == 409:
            return False
        http_wire.checked(response)
        return True

    def ack_notice(self, work_id: str, token: str) -> bool:
        """Acknowledge a claimed notice; False if the claim was lost."""
        return (
            self._http.post(
                f"/v1/notifications/{ids.validate(work_id)}/ack", json={"token": token}
            ).status_code
            == 200
        )

    def release_notice(self, work_id: str, token: str) -> bool:
        """Give a claimed notice back for redelivery; False if the claim was lost."""
        return (
            self._http.delete(
                f"/v1/notifications/{ids.validate(work_id)}/claims/{quote(token, safe='')}"
            ).status_code
            == 204
        )

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Release the notice claims still held, then close the connections. Idempotent."""
        if self._closed.is_set():
            return
        self._lease_keeper.close()
        self._closed.set()
        self._http.close()
        # An ``async with`` block's pool is closed by its ``__aexit__``; async calls
        # outside one hold no connection between calls, so nothing is left here.

    async def aclose(self) -> None:
        """``close`` on an event loop (closes the async connections too)."""
        if not self._closed.is_set():
            await asyncio.to_thread(self._lease_keeper.close)
            self._closed.set()
        self._http.close()
        if self._async is not None and self._shared_async() is not None:
            client, self._async = self._async, None
            await client.aclose()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> HttpClient:
        """``async with``: the async calls in the block share one pool of connections."""
        self._check_open()
        if self._async is None:
            self._async, self._async_loop = self._new_async(), asyncio.get_running_loop()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _AsyncCalls:
    """One async request: on the ``async with`` block's pool, else on a pool of its own.

    A pool of its own is bound to no loop after the call, so a client used from
    ``asyncio.run`` after ``asyncio.run`` leaves no connection on a closed loop.
    """

    __slots__ = ("_client",)

    def __init__(self, client: HttpClient) -> None:
        self._client = client

    async def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return await self.request("GET", url, **kwargs)

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        shared = self._client._shared_async()
        if shared is not None:
            return await shared.request(method, url, **kwargs)
        async with self._client._new_async() as http:
            return await http.request(method, url, **kwargs)

    @asynccontextmanager
    async def stream(self, method: str, url: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        shared = self._client._shared_async()
        if shared is not None:
            async with shared.stream(method, url, **kwargs) as response:
                yield response
            return
        async with self._client._new_async() as http, http.stream(method, url, **kwargs) as r:
            yield r


@contextmanager
def _checked_stream(
    opened: AbstractContextManager[httpx.Response],
) -> Iterator[httpx.Response]:
    with opened as response:
        _check_stream(response)
        yield response


@asynccontextmanager
async def _checked_stream_async(
    opened: AbstractAsyncContextManager[httpx.Response],
) -> AsyncIterator[httpx.Response]:
    async with opened as response:
        if response.status_code >= 400:
            await response.aread()
            raise http_wire.error_of(response)
        yield response


def _check_stream(response: httpx.Response) -> None:
    if response.status_code >= 400:
        response.read()
        raise http_wire.error_of(response)


def _request_of(call: http_wire.Call, timeout: float) -> tuple[str, str, dict[str, Any]]:
    """An ``http_wire.Call`` as httpx's ``request`` takes it (a long-poll's wait added)."""
    kwargs: dict[str, Any] = {}
    if call.json is not None:
        kwargs["json"] = call.json
    if call.params is not None:
        kwargs["params"] = call.params
    if call.headers:
        kwargs["headers"] = dict(call.headers)
    if call.timeout is not None:
        kwargs["timeout"] = call.timeout + timeout
    return call.method, call.path, kwargs


def _events_in(lines: Iterator[str]) -> Iterator[tuple[str, str, str | None]]:
    """``(event, data, id)`` of each event in a text/event-stream (comments skipped)."""
    parser = SseParser()
    for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event
