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
import builtins
import datetime
import os
import threading
import time
from collections.abc import (
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any
from urllib.parse import quote

try:
    import httpx
except ModuleNotFoundError as missing:  # the optional extra: say which one
    raise ModuleNotFoundError(
        "the HTTP client needs httpx: pip install 'workunits[http]'", name="httpx"
    ) from missing

from workunits._client.http_notices import DEFAULT_CLAIM_LEASE, HttpNotices, LeaseKeeper
from workunits._client.http_stream import HttpOutputStream
from workunits._core import errors as _errors
from workunits._core import ids
from workunits._core.errors import (
    BatchItemsFailed,
    ClientClosed,
    NotFinished,
    ServerUnreachable,
    SpecError,
    WorkunitsError,
    WrongType,
)
from workunits._core.record import Notification, WorkRecord
from workunits._core.retain import HeldRetains, Retain
from workunits._core.retry import Retry, check_retry
from workunits._core.seconds import MAX_CLAIM_LEASE, seconds, wait_timeout
from workunits._core.status import Reason, Status
from workunits._ledger import listing
from workunits._ledger.retains import check_lease
from workunits._wire.agent_call import AgentCall
from workunits._wire.specs import DEFAULT_OUTPUT_CAP
from workunits._wire.submits import check_not_before

_RECORD_ERRORS = (_errors.WorkFailed, _errors.WorkKilled, _errors.WorkExpired)
WAIT_SLICE = 30.0  # one long-poll lasts at most this; longer waits repeat it
LIST_PAGE = 1000  # units asked for per ``GET /v1/units`` page (the server's maximum)
DEFAULT_LEASE = 30.0  # seconds a retain lease lasts unless renewed (as the ledger client's)


def record_of(unit: dict[str, Any]) -> WorkRecord:
    """The ``WorkRecord`` a unit's JSON describes (without output tail, result or cause)."""
    return WorkRecord(
        id=unit["id"],
        kind=unit["kind"],
        status=Status(unit["status"]),
        parent=unit["parent"],
        description=unit["description"],
        created_at=unit["created_at"],
        started_at=unit["started_at"],
        ended_at=unit["ended_at"],
        exit_code=unit["exit_code"],
        signal=unit["signal"],
        error=unit["error"],
        reason=None if unit["reason"] is None else Reason(unit["reason"]),
        attempt=unit["attempt"],
        progress=unit["progress"],
        progress_message=unit["progress_message"],
        output_bytes=unit["output_bytes"],
        retain=unit["retain"],
        expired_at=unit["ended_at"] if unit.get("expired") else None,
    )


def error_of(response: httpx.Response) -> WorkunitsError:
    """The Python error a problem response stands for (WorkunitsError if it names none)."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    title = str(body.get("title", ""))
    detail = str(body.get("detail", response.text or response.reason_phrase))
    if title == "ValidationError":
        return SpecError(detail)  # the request's arguments, checked by the server's models
    cls = getattr(_errors, title, None)
    if isinstance(cls, type) and issubclass(cls, WorkunitsError):
        unit = body.get("unit")
        if issubclass(cls, _RECORD_ERRORS) and unit is not None:
            return cls(record_of(unit))
        try:
            return cls(detail)
        except TypeError:
            pass
    return WorkunitsError(f"HTTP {response.status_code} {title}: {detail}")


def _check(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        raise error_of(response)
    return response


def _settle(
    response: httpx.Response, timeout: float | None, deadline: float | None, for_result: bool
) -> tuple[WorkRecord, dict[str, Any] | None] | None:
    """A long-poll's answer: None to poll again, else the record (and the result body)."""
    if response.status_code == 202:
        record = record_of(response.json())
        if deadline is not None and time.monotonic() >= deadline:
            raise NotFinished(record, timeout)
        return None
    if response.status_code == 409:
        error = error_of(response)
        if not for_result and isinstance(error, _errors.WorkFailed | _errors.WorkKilled):
            return error.record, None
        raise error
    if response.status_code == 406 and not for_result:
        # Completed with a value JSON cannot carry: a wait needs only the record.
        return record_of(response.json()["unit"]), None
    body = _check(response).json()
    return record_of(body["unit"]), body


def _not_before(not_before: float | datetime.datetime | None) -> str | None:
    """``not_before`` as the API takes it: an ISO 8601 time with its offset (checked here,
    with the ledger client's message; a naive datetime is local time, as there)."""
    at = check_not_before(not_before, time.time())
    return None if at is None else datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat()


def _shell_options(  # noqa: PLR0917 - private; one per option of shell()
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    output_cap: int,
    on_lost: str,
    log: str | os.PathLike[str] | None,
    keep_output: bool,
) -> dict[str, Any]:
    """The shell-only fields, sent only when not their defaults (older servers lack them).

    A relative ``log`` is made absolute here, against this process's directory,
    as ``Client.shell`` does: the server takes absolute paths only.
    """
    if isinstance(log, str | os.PathLike) and isinstance(text := os.fspath(log), str):
        log = os.path.abspath(text)  # anything else is sent as it is, for the server to refuse
    return {
        "cwd": None if cwd is None else os.fspath(cwd),
        "env": None if env is None else dict(env),
        "output_cap": None if output_cap == DEFAULT_OUTPUT_CAP else output_cap,
        "on_lost": None if on_lost == "fail" else on_lost,
        "log": log,
        "keep_output": keep_output or None,
    }


def _shell_body(cmd: str | Sequence[str], options: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "shell"}
    if isinstance(cmd, str):
        body["command"] = cmd
    else:
        body["argv"] = list(cmd)
    body.update({k: v for k, v in options.items() if v is not None})
    return body


def _call_body(
    kind: str, fn: Any, args: tuple[Any, ...], options: dict[str, Any]
) -> dict[str, Any]:
    if not isinstance(fn, str):
        module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
        if not module or module == "__main__" or "<" in qualname:
            raise SpecError(
                f"over HTTP an agent is named by import reference: {fn!r} has none "
                "(define it at module level in an importable module)"
            )
        fn = f"{module}:{qualname}"
    kwargs = options.pop("kwargs")
    body = {"kind": kind, "target": fn, "args": list(args), "kwargs": kwargs}
    body.update({k: v for k, v in options.items() if v is not None})
    return body


def _call_options(  # noqa: PLR0917 - the submit options, passed on in one place
    description: str | None,
    timeout: float | None,
    max_attempts: int | None,
    memory_limit: int | None,
    output_cap: int,
    not_before: float | datetime.datetime | None,
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    return {
        "description": description,
        "timeout": timeout,
        "max_attempts": max_attempts,
        "memory_limit": memory_limit,
        "output_cap": None if output_cap == DEFAULT_OUTPUT_CAP else output_cap,
        "not_before": _not_before(not_before),
        "kwargs": kwargs,
    }


def _policy(retry: Retry | None, stall_after: float | None) -> dict[str, Any]:
    """``retry`` and ``stall_after`` as ``POST /v1/units`` takes them."""
    return {"retry": _retry_body(retry), "stall_after": stall_after}


def _retry_body(retry: Retry | None) -> dict[str, Any] | None:
    if check_retry(retry) is None:
        return None
    assert retry is not None
    if tuple(retry.on) != (Exception,):
        raise SpecError(
            "over HTTP a Retry retries any exception (or exit_codes): its on= names Python "
            "types the server cannot take; drop on=, or submit with the Python API on the host"
        )
    return {
        "max_attempts": retry.max_attempts,
        "backoff": retry.backoff,
        "initial": retry.initial,
        "max_delay": retry.max_delay,
        "jitter": retry.jitter,
        "exit_codes": None if retry.exit_codes is None else list(retry.exit_codes),
    }


class HttpHandle:
    """What ``HttpClient.shell``/``agent`` return: the unit's ID, and ``created``."""

    __slots__ = ("client", "created", "id")

    def __init__(self, client: HttpClient, work_id: str, *, created: bool) -> None:
        self.client = client
        self.id = work_id
        self.created = created

    def __repr__(self) -> str:
        return f"<HttpHandle {self.id}{'' if self.created else ' (existing)'}>"

    def __str__(self) -> str:
        return self.id

    def get(self) -> WorkRecord:
        """The unit's record (``HttpClient.get``)."""
        return self.client.get(self.id)

    def wait(self, timeout: float | None = None) -> WorkRecord:
        """Block until the unit is terminal (``HttpClient.wait``)."""
        return self.client.wait(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The unit's result, or its failure raised (``HttpClient.result``)."""
        return self.client.result(self.id, timeout)

    def cancel(self, grace: float = 5.0) -> bool:
        """Cancel it, SIGKILL after ``grace`` (``HttpClient.cancel``)."""
        return self.client.cancel(self.id, grace)

    def kill(self) -> bool:
        """Kill it (``HttpClient.kill``)."""
        return self.client.kill(self.id)

    def stream(self) -> HttpOutputStream:
        """The unit's output as it is written (``HttpClient.stream``)."""
        return self.client.stream(self.id)

    async def get_async(self) -> WorkRecord:
        """Like ``get`` without blocking the event loop."""
        return await self.client.get_async(self.id)

    async def wait_async(self, timeout: float | None = None) -> WorkRecord:
        """Like ``wait`` without blocking the event loop."""
        return await self.client.wait_async(self.id, timeout)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Like ``result`` without blocking the event loop."""
        return await self.client.result_async(self.id, timeout)

    async def cancel_async(self, grace: float = 5.0) -> bool:
        """Like ``cancel`` without blocking the event loop."""
        return await self.client.cancel_async(self.id, grace)

    async def kill_async(self) -> bool:
        """Like ``kill`` without blocking the event loop."""
        return await self.client.kill_async(self.id)

    def stream_async(self) -> HttpOutputStream:
        """Like ``stream``, for ``async for`` (``HttpClient.stream_async``)."""
        return self.client.stream_async(self.id)


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


class HttpClient:
    """Work units through a ``workunits serve --http`` API, with the ledger client's calls.

    Every call the ledger client (``wu.connect(state_dir)``) offers is here with
    the same parameters, except those that are the ledger itself: ``ledger``,
    ``row``, ``rows``, ``row_async``, ``request``, ``request_result``,
    ``readonly`` and ``supervisor_running``. Extras: ``shell(parent=...)``,
    ``notifications(lease=...)``, ``events`` (the raw SSE events) and ``aclose``.
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

    # -- submitting ----------------------------------------------------------------

    def shell(
        self,
        cmd: str | Sequence[str],
        *,
        key: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        description: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        on_lost: str = "fail",
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        log: str | os.PathLike[str] | None = None,
        keep_output: bool = False,
        parent: str | None = None,
    ) -> HttpHandle:
        """Submit a shell unit (``POST /v1/units``); ``key`` is the Idempotency-Key.

        As ``Client.shell``; ``parent`` (HTTP only) makes it a child of a unit.
        """
        options = {
            **_shell_options(cwd, env, output_cap, on_lost, log, keep_output),
            "timeout": timeout,
            "description": description,
            "not_before": _not_before(not_before),
            "parent": parent,
            **_policy(retry, stall_after),
        }
        return self._submit(_shell_body(cmd, options), key)

    def agent(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        key: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        **kwargs: Any,
    ) -> HttpHandle:
        """Submit ``fn`` (importable, or ``"module:qualname"``) with JSON arguments."""
        options = _call_options(
            description, timeout, max_attempts, memory_limit, output_cap, not_before, kwargs
        ) | _policy(retry, stall_after)
        return self._submit(_call_body("agent", fn, args, options), key)

    def workflow(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        key: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        **kwargs: Any,
    ) -> HttpHandle:
        """Submit a workflow (``w``), named like an agent."""
        options = _call_options(
            description, timeout, max_attempts, memory_limit, DEFAULT_OUTPUT_CAP, not_before, kwargs
        ) | _policy(retry, stall_after)
        return self._submit(_call_body("workflow", fn, args, options), key)

    def submit_many(
        self,
        calls: Iterable[AgentCall],
        *,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        retry: Retry | None = None,
    ) -> list[HttpHandle]:
        """Submit agent units as one batch (``POST /v1/units:batch``); their handles.

        As ``Client.submit_many``: each ``fn`` named by import reference; a bad item
        fails the batch, named by its index, before anything is written; one whose key
        is taken with other arguments fails alone (``BatchItemsFailed``).
        """
        bodies, keys = [], []
        for index, call in enumerate(calls):
            try:
                if not isinstance(call, AgentCall):
                    raise WrongType(
                        f"submit_many takes wu.AgentCall items, got {type(call).__name__}: "
                        f"wrap it as wu.AgentCall(fn, args, kwargs)"
                    )
                options = _call_options(
                    call.description,
                    call.timeout,
                    max_attempts,
                    memory_limit,
                    output_cap,
                    None,
                    dict(call.kwargs),
                ) | _policy(retry, None)
                bodies.append(_call_body("agent", call.fn, call.args, options))
            except WorkunitsError as exc:
                raise type(exc)(f"item {index} of the batch: {exc}") from exc
            keys.append(call.key)
        body: dict[str, Any] = {"units": bodies}
        if any(k is not None for k in keys):
            body["keys"] = keys
        items = _check(self._http.post("/v1/units:batch", json=body)).json()["units"]
        results: list[HttpHandle | BaseException] = [
            WorkunitsError(item["error"])
            if item["error"] is not None
            else HttpHandle(self, item["unit"]["id"], created=item["created"])
            for item in items
        ]
        if any(isinstance(r, BaseException) for r in results):
            raise BatchItemsFailed(results)
        return [r for r in results if isinstance(r, HttpHandle)]

    def map(
        self, fn: Callable[..., Any] | str, *iterables: Iterable[Any], timeout: float | None = None
    ) -> Generator[Any, None, None]:
        """``fn`` over the zipped items as agent units, one batch; results in order, as
        ``Executor.map`` (a failure raised at its place, ``timeout`` for the whole map).
        Leaving the loop early kills the units whose results were not read."""
        timeout = wait_timeout(timeout)
        end = None if timeout is None else time.monotonic() + timeout
        handles = self.submit_many(
            AgentCall(fn, tuple(args)) for args in zip(*iterables, strict=False)
        )
        return self._results(handles, end)

    def _results(self, handles: list[HttpHandle], end: float | None) -> Generator[Any, None, None]:
        done = 0
        try:
            for handle in handles:
                left = None if end is None else max(0.0, end - time.monotonic())
                value = self.result(handle.id, timeout=left)
                done += 1
                yield value
        finally:
            for handle in handles[done:]:  # abandoned: their units end, started or not
                self.kill(handle.id)

    def _submit(self, body: dict[str, Any], key: str | None) -> HttpHandle:
        headers = {} if key is None else {"Idempotency-Key": key}
        response = _check(self._http.post("/v1/units", json=body, headers=headers))
        return HttpHandle(self, response.json()["id"], created=response.status_code == 201)

    async def shell_async(
        self,
        cmd: str | Sequence[str],
        *,
        key: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        description: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        on_lost: str = "fail",
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        log: str | os.PathLike[str] | None = None,
        keep_output: bool = False,
        parent: str | None = None,
    ) -> HttpHandle:
        """Like ``shell`` without blocking the event loop."""
        options = {
            **_shell_options(cwd, env, output_cap, on_lost, log, keep_output),
            "timeout": timeout,
            "description": description,
            "not_before": _not_before(not_before),
            "parent": parent,
            **_policy(retry, stall_after),
        }
        return await self._submit_async(_shell_body(cmd, options), key)

    async def agent_async(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        key: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        **kwargs: Any,
    ) -> HttpHandle:
        """Like ``agent`` without blocking the event loop."""
        options = _call_options(
            description, timeout, max_attempts, memory_limit, output_cap, not_before, kwargs
        ) | _policy(retry, stall_after)
        return await self._submit_async(_call_body("agent", fn, args, options), key)

    async def workflow_async(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        key: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        **kwargs: Any,
    ) -> HttpHandle:
        """Like ``workflow`` without blocking the event loop."""
        options = _call_options(
            description, timeout, max_attempts, memory_limit, DEFAULT_OUTPUT_CAP, not_before, kwargs
        ) | _policy(retry, stall_after)
        return await self._submit_async(_call_body("workflow", fn, args, options), key)

    async def _submit_async(self, body: dict[str, Any], key: str | None) -> HttpHandle:
        headers = {} if key is None else {"Idempotency-Key": key}
        response = _check(await self._aclient().post("/v1/units", json=body, headers=headers))
        return HttpHandle(self, response.json()["id"], created=response.status_code == 201)

    def retry(self, work_id: str) -> HttpHandle:
        """Start a unit that ended ``failed`` or ``killed`` again, as a new unit
        (``POST /v1/units/{id}/retry``); a second call returns the same new unit
        (``created`` False). NotRetryable for a unit that did not fail."""
        return self._retried(self._http.post(f"/v1/units/{_unit(work_id)}/retry"))

    async def retry_async(self, work_id: str) -> HttpHandle:
        """Like ``retry`` without blocking the event loop."""
        return self._retried(await self._aclient().post(f"/v1/units/{_unit(work_id)}/retry"))

    def _retried(self, response: httpx.Response) -> HttpHandle:
        again = _check(response).json()
        return HttpHandle(self, again["id"], created=response.status_code == 201)

    # -- reading ---------------------------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        """The unit's record; WorkExpired once its retention ran out (410)."""
        return record_of(_check(self._http.get(f"/v1/units/{_unit(work_id)}")).json())

    async def get_async(self, work_id: str) -> WorkRecord:
        """Like ``get`` without blocking the event loop."""
        return record_of(_check(await self._aclient().get(f"/v1/units/{_unit(work_id)}")).json())

    def list(
        self,
        status: str | None = None,
        kind: str | None = None,
        parent: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        key: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        search: str | None = None,
        order: str = "oldest",
    ) -> builtins.list[WorkRecord]:
        """The units matching the filters, as ``Supervisor.list``: one page with ``limit``,
        else every page in turn (``LIST_PAGE`` units a request)."""
        q = listing.query(
            status,
            kind,
            parent,
            limit=limit,
            after=after,
            key=key,
            created_after=created_after,
            created_before=created_before,
            search=search,
            order=order,
        )
        records: builtins.list[WorkRecord] = []
        mark = q.after
        while True:
            want = LIST_PAGE if q.limit is None else min(LIST_PAGE, q.limit - len(records))
            page = _check(self._http.get("/v1/units", params=_list_params(q, mark, want))).json()
            records.extend(record_of(u) for u in page["items"])
            mark = page["next"]
            if mark is None or (q.limit is not None and len(records) >= q.limit):
                return records

    async def list_async(
        self,
        status: str | None = None,
        kind: str | None = None,
        parent: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        key: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        search: str | None = None,
        order: str = "oldest",
    ) -> builtins.list[WorkRecord]:
        """Like ``list`` without blocking the event loop."""
        q = listing.query(
            status,
            kind,
            parent,
            limit=limit,
            after=after,
            key=key,
            created_after=created_after,
            created_before=created_before,
            search=search,
            order=order,
        )
        records: builtins.list[WorkRecord] = []
        mark = q.after
        while True:
            want = LIST_PAGE if q.limit is None else min(LIST_PAGE, q.limit - len(records))
            params = _list_params(q, mark, want)
            page = _check(await self._aclient().get("/v1/units", params=params)).json()
            records.extend(record_of(u) for u in page["items"])
            mark = page["next"]
            if mark is None or (q.limit is not None and len(records) >= q.limit):
                return records

    # -- waiting ---------------------------------------------------------------------

    def wait(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        """Long-poll ``/result`` until the unit is terminal; NotFinished after ``timeout``."""
        return self._finish(work_id, timeout, for_result=False)[0]

    def result(self, work_id: str, timeout: float | None = None) -> Any:
        """The value, the record of a value-less unit, or WorkFailed / WorkKilled raised."""
        record, body = self._finish(work_id, timeout, for_result=True)
        assert body is not None, "a result response that did not raise has a body"
        return body["value"] if body["has_value"] else record

    def _finish(
        self, work_id: str, timeout: float | None, *, for_result: bool
    ) -> tuple[WorkRecord, dict[str, Any] | None]:
        timeout = wait_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = (
                WAIT_SLICE
                if deadline is None
                else max(0.0, min(WAIT_SLICE, deadline - time.monotonic()))
            )
            response = self._http.get(
                f"/v1/units/{_unit(work_id)}/result",
                params={"wait": left},
                timeout=left + self._timeout,
            )
            found = _settle(response, timeout, deadline, for_result)
            if found is not None:
                return found

    async def wait_async(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        """Like ``wait`` without blocking the event loop."""
        return (await self._finish_async(work_id, timeout, for_result=False))[0]

    async def result_async(self, work_id: str, timeout: float | None = None) -> Any:
        """Like ``result`` without blocking the event loop."""
        record, body = await self._finish_async(work_id, timeout, for_result=True)
        assert body is not None
        return body["value"] if body["has_value"] else record

    async def _finish_async(
        self, work_id: str, timeout: float | None, *, for_result: bool
    ) -> tuple[WorkRecord, dict[str, Any] | None]:
        timeout = wait_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = (
                WAIT_SLICE
                if deadline is None
                else max(0.0, min(WAIT_SLICE, deadline - time.monotonic()))
            )
            response = await self._aclient().get(
                f"/v1/units/{_unit(work_id)}/result",
                params={"wait": left},
                timeout=left + self._timeout,
            )
            found = _settle(response, timeout, deadline, for_result)
            if found is not None:
                return found

    # -- output ----------------------------------------------------------------------

    def stream(self, work_id: str, *, follow: bool = True) -> HttpOutputStream:
        """Yield the unit's output from its start, every byte once, until it is terminal.

        Follows ``/events`` (resuming after a dropped connection); with
        ``follow=False``, reads ``/output`` for only what has been written so
        far. InvalidWorkId / UnknownWork here, not at the first ``next()``.
        """
        response = self._http.get(f"/v1/units/{_unit(work_id)}")
        if response.status_code != 410:  # an expired unit's tail is still served
            _check(response)
        return HttpOutputStream(self, work_id, follow=follow)

    def stream_async(self, work_id: str, *, follow: bool = True) -> HttpOutputStream:
        """Like ``stream``, for ``async for chunk in client.stream_async(id)``.

        A bad ID raises here; an unknown one at the first step.
        """
        ids.validate(work_id)
        self._check_open()
        return HttpOutputStream(self, work_id, follow=follow)

    def _stream_events(
        self, work_id: str, headers: dict[str, str]
    ) -> AbstractContextManager[httpx.Response]:
        """The ``/events`` response, checked (for ``HttpOutputStream``)."""
        return _checked_stream(
            self._http.stream(
                "GET", f"/v1/units/{_unit(work_id)}/events", headers=headers, timeout=None
            )
        )

    def _stream_events_async(
        self, work_id: str, headers: dict[str, str]
    ) -> AbstractAsyncContextManager[httpx.Response]:
        return _checked_stream_async(
            self._aclient().stream(
                "GET", f"/v1/units/{_unit(work_id)}/events", headers=headers, timeout=None
            )
        )

    def _read_output(self, work_id: str, offset: int, limit: int) -> httpx.Response:
        params = {"offset": offset, "limit": limit}
        return _check(self._http.get(f"/v1/units/{_unit(work_id)}/output", params=params))

    async def _read_output_async(self, work_id: str, offset: int, limit: int) -> httpx.Response:
        params = {"offset": offset, "limit": limit}
        return _check(
            await self._aclient().get(f"/v1/units/{_unit(work_id)}/output", params=params)
        )

    def events(
        self, work_id: str, after: str | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(type, data)`` of each SSE event until ``end``, resuming after a dropped connection."""
        import json  # noqa: PLC0415

        last = after
        while True:
            headers = {} if last is None else {"Last-Event-ID": last}
            with self._http.stream(
                "GET", f"/v1/units/{_unit(work_id)}/events", headers=headers, timeout=None
            ) as r:
                _check_stream(r)
                try:
                    for event, data, event_id in _sse(r.iter_lines()):
                        last = event_id or last
                        yield event, json.loads(data)
                        if event == "end":
                            return
                except (httpx.TransportError, ServerUnreachable):
                    continue  # reconnect from the last event seen

    # -- ending work --------------------------------------------------------------------

    def cancel(self, work_id: str, grace: float = 5.0) -> bool:
        """Cancel (SIGTERM or a cooperative cancel, SIGKILL after ``grace``); False if it
        had already ended."""
        grace = seconds("grace", grace, zero=True)
        r = _check(self._http.post(f"/v1/units/{_unit(work_id)}/cancel", json={"grace": grace}))
        return bool(r.json()["changed"])

    def kill(self, work_id: str) -> bool:
        """SIGKILL the unit's process group; False if it had already ended."""
        return bool(_check(self._http.post(f"/v1/units/{_unit(work_id)}/kill")).json()["changed"])

    async def cancel_async(self, work_id: str, grace: float = 5.0) -> bool:
        """Like ``cancel`` without blocking the event loop."""
        grace = seconds("grace", grace, zero=True)
        r = _check(
            await self._aclient().post(f"/v1/units/{_unit(work_id)}/cancel", json={"grace": grace})
        )
        return bool(r.json()["changed"])

    async def kill_async(self, work_id: str) -> bool:
        """Like ``kill`` without blocking the event loop."""
        r = _check(await self._aclient().post(f"/v1/units/{_unit(work_id)}/kill"))
        return bool(r.json()["changed"])

    def signal(self, work_id: str, name: str, value: Any = None) -> bool:
        """Send the signal ``name`` (a JSON ``value``) to the unit's ``ctx.wait_for(name)``.

        Kept in the ledger until the unit takes it. False, and nothing kept,
        when the unit has ended (409).
        """
        body = {"name": name, "value": value}
        return _signalled(self._http.post(f"/v1/units/{_unit(work_id)}/signals", json=body))

    async def signal_async(self, work_id: str, name: str, value: Any = None) -> bool:
        """Like ``signal`` without blocking the event loop."""
        body = {"name": name, "value": value}
        return _signalled(
            await self._aclient().post(f"/v1/units/{_unit(work_id)}/signals", json=body)
        )

    # -- retain and notices -------------------------------------------------------------

    def retain(self, work_id: str, lease: float = DEFAULT_LEASE) -> Retain:
        """Keep the unit visible while you look at it: a lease of ``lease`` seconds.

        As ``Client.retain``: ``renew()`` (a ``PUT``) before it runs out, or
        ``keep_renewing()``; ``release()`` (a ``DELETE``) or use it as a context
        manager. It lapses by itself when no longer renewed.
        """
        lease = check_lease(lease)
        response = self._http.post(f"/v1/units/{_unit(work_id)}/retain", json={"lease": lease})
        return self._retain(work_id, str(_check(response).json()["lease_id"]), lease)

    async def retain_async(self, work_id: str, lease: float = DEFAULT_LEASE) -> Retain:
        """Like ``retain`` without blocking the event loop (``renew`` and ``release``
        are short blocking requests: from the loop, run them with ``asyncio.to_thread``)."""
        lease = check_lease(lease)
        path = f"/v1/units/{_unit(work_id)}/retain"
        response = await self._aclient().post(path, json={"lease": lease})
        return self._retain(work_id, str(_check(response).json()["lease_id"]), lease)

    def _retain(self, work_id: str, lease_id: str, lease: float) -> Retain:
        return self._held.hold(
            work_id,
            lease_id,
            lease,
            renew=lambda seconds: self.renew_retain(work_id, lease_id, seconds),
            release=lambda: self.release(work_id, lease_id),
        )

    def renew_retain(self, work_id: str, lease_id: str, lease: float = 30.0) -> bool:
        """Renew a retain lease by its ID; False once it lapsed or was released."""
        lease = seconds("lease", lease, most=MAX_CLAIM_LEASE)
        r = self._http.put(
            f"/v1/units/{_unit(work_id)}/retain/{quote(lease_id, safe='')}", json={"lease": lease}
        )
        return r.status_code == 200

    def release(self, work_id: str, lease_id: str | None = None) -> bool:
        """Release a retain lease by its ID; False if it had already gone.

        Without ``lease_id``: every lease this client's ``retain`` took on the
        unit and did not release yet, as ``Client.release`` does.
        """
        if lease_id is None:
            _unit(work_id)
            return self._held.release(work_id)
        return (
            self._http.delete(
                f"/v1/units/{_unit(work_id)}/retain/{quote(lease_id, safe='')}"
            ).status_code
            == 204
        )

    async def release_async(self, work_id: str, lease_id: str | None = None) -> bool:
        """Like ``release`` without blocking the event loop."""
        return await asyncio.to_thread(self.release, work_id, lease_id)

    def take_notice(
        self, timeout: float = 0.0, lease: float = 30.0
    ) -> tuple[Notification, str] | None:
        """Claim the next application notice (None if none within ``timeout``): the notice
        and the token that acks (``ack_notice``) or releases (``release_notice``) it."""
        r = _check(
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

    def notifications(self, *, lease: float = DEFAULT_CLAIM_LEASE) -> HttpNotices:
        """Notices of top-level units as they end; each goes to one consumer, once.

        As ``Client.notifications``: ``take`` / ``get`` / ``claim``. Over HTTP a
        claim holds for ``lease`` seconds at a time and this client renews it
        while it is held, so it lasts as long as this process (or ``close()``).
        """
        self._check_open()
        return HttpNotices(self, lease=lease)

    def renew_notice(self, work_id: str, token: str, lease: float = DEFAULT_CLAIM_LEASE) -> bool:
        """Extend a claim (from ``take_notice``) by ``lease`` seconds; False if it was lost."""
        lease = seconds("lease", lease, most=MAX_CLAIM_LEASE)
        response = self._http.put(
            f"/v1/notifications/{_unit(work_id)}/claims/{quote(token, safe='')}",
            json={"token": token, "lease": lease},
        )
        if response.status_code == 409:
            return False
        _check(response)
        return True

    def ack_notice(self, work_id: str, token: str) -> bool:
        """Acknowledge a claimed notice; False if the claim was lost."""
        return (
            self._http.post(
                f"/v1/notifications/{_unit(work_id)}/ack", json={"token": token}
            ).status_code
            == 200
        )

    def release_notice(self, work_id: str, token: str) -> bool:
        """Give a claimed notice back for redelivery; False if the claim was lost."""
        return (
            self._http.delete(
                f"/v1/notifications/{_unit(work_id)}/claims/{quote(token, safe='')}"
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
        return await self._send("GET", url, **kwargs)

    async def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return await self._send("POST", url, **kwargs)

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
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


def _signalled(response: httpx.Response) -> bool:
    if response.status_code == 409 and response.json().get("title") == "WorkEnded":
        return False
    _check(response)
    return True


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
            raise error_of(response)
        yield response


def _check_stream(response: httpx.Response) -> None:
    if response.status_code >= 400:
        response.read()
        raise error_of(response)


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, str, str | None]]:
    """``(event, data, id)`` of each event in a text/event-stream (comments skipped)."""
    event, event_id = "message", None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data), event_id
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            event_id = value


def _unit(work_id: str) -> str:
    """``work_id`` for a URL path, once it is a well-formed ID (InvalidWorkId otherwise).

    Unchecked, ``"a…/../b…"`` would have named another unit's route: the one
    regex checks every ID before it touches a path (DESIGN §2.1).
    """
    return ids.validate(work_id)


def _list_params(q: listing.Query, after: str | None, limit: int) -> dict[str, str]:
    """``GET /v1/units``'s query string for a page of ``q``."""
    f = q.found
    given = {
        "status": f.status,
        "kind": f.kind,
        "parent": f.parent,
        "key": f.key,
        "created_after": None if f.created_after is None else repr(float(f.created_after)),
        "created_before": None if f.created_before is None else repr(float(f.created_before)),
        "q": f.text,
        "after": after,
        "order": "newest" if q.newest else None,
        "limit": str(limit),
    }
    return {k: v for k, v in given.items() if v is not None}
