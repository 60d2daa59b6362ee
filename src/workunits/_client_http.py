"""``wu.connect("http://host:port", token=...)``: the Client calls over the HTTP API.

The same calls as a ledger client (``_client.Client``) -- shell, agent, get,
list, wait, result, cancel, kill, stream, retain, notifications -- with the
same results and the same errors: a problem document's ``title`` names the
Python error and its ``detail`` is that error's message. Each call has an
``_async`` twin. Needs the ``workunits[http]`` extra (httpx).

Threads: the sync calls share one ``httpx.Client`` (thread-safe); the async
twins use one ``httpx.AsyncClient``, made on first use, bound to that loop.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from workunits import _errors
from workunits._errors import NotFinished, SpecError, WorkunitsError
from workunits._record import Notification, WorkRecord
from workunits._status import Reason, Status

_RECORD_ERRORS = (_errors.WorkFailed, _errors.WorkKilled, _errors.WorkExpired)
WAIT_SLICE = 30.0  # one long-poll lasts at most this; longer waits repeat it


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
    body = _check(response).json()
    return record_of(body["unit"]), body


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
        return self.client.get(self.id)

    def wait(self, timeout: float | None = None) -> WorkRecord:
        return self.client.wait(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        return self.client.result(self.id, timeout)

    def cancel(self, grace: float = 5.0) -> bool:
        return self.client.cancel(self.id, grace)

    def kill(self) -> bool:
        return self.client.kill(self.id)

    def stream(self) -> Iterator[bytes]:
        return self.client.stream(self.id)


class HttpClient:
    """Work units through a ``workunits serve --http`` API, with the ledger client's calls."""

    def __init__(self, url: str, *, token: str, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = timeout
        self._http = httpx.Client(base_url=self.url, headers=self._headers, timeout=timeout)
        self._async: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"<workunits.HttpClient {self.url!r}>"

    def _aclient(self) -> httpx.AsyncClient:
        if self._async is None:
            self._async = httpx.AsyncClient(
                base_url=self.url, headers=self._headers, timeout=self._timeout
            )
        return self._async

    # -- submitting ----------------------------------------------------------------

    def shell(
        self,
        cmd: str | Sequence[str],
        *,
        key: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        description: str | None = None,
        parent: str | None = None,
    ) -> HttpHandle:
        """Submit a shell unit (``POST /v1/units``); ``key`` is the Idempotency-Key."""
        options = {
            "cwd": cwd,
            "env": env,
            "timeout": timeout,
            "description": description,
            "parent": parent,
        }
        return self._submit(_shell_body(cmd, options), key)

    def agent(
        self,
        fn: Any,
        *args: Any,
        key: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        **kwargs: Any,
    ) -> HttpHandle:
        """Submit ``fn`` (importable, or ``"module:qualname"``) with JSON arguments."""
        options = {
            "description": description,
            "timeout": timeout,
            "max_attempts": max_attempts,
            "kwargs": kwargs,
        }
        return self._submit(_call_body("agent", fn, args, options), key)

    def workflow(self, fn: Any, *args: Any, key: str | None = None, **kwargs: Any) -> HttpHandle:
        """Submit a workflow (``w``), named like an agent."""
        return self._submit(_call_body("workflow", fn, args, {"kwargs": kwargs}), key)

    def _submit(self, body: dict[str, Any], key: str | None) -> HttpHandle:
        headers = {} if key is None else {"Idempotency-Key": key}
        response = _check(self._http.post("/v1/units", json=body, headers=headers))
        return HttpHandle(self, response.json()["id"], created=response.status_code == 201)

    async def shell_async(
        self, cmd: str | Sequence[str], *, key: str | None = None, **options: Any
    ) -> HttpHandle:
        """Like ``shell`` without blocking the event loop."""
        return await self._submit_async(_shell_body(cmd, options), key)

    async def agent_async(
        self, fn: Any, *args: Any, key: str | None = None, **kwargs: Any
    ) -> HttpHandle:
        """Like ``agent`` without blocking the event loop."""
        options = {k: kwargs.pop(k, None) for k in ("description", "timeout", "max_attempts")}
        options["kwargs"] = kwargs
        return await self._submit_async(_call_body("agent", fn, args, options), key)

    async def _submit_async(self, body: dict[str, Any], key: str | None) -> HttpHandle:
        headers = {} if key is None else {"Idempotency-Key": key}
        response = _check(await self._aclient().post("/v1/units", json=body, headers=headers))
        return HttpHandle(self, response.json()["id"], created=response.status_code == 201)

    # -- reading ---------------------------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        return record_of(_check(self._http.get(f"/v1/units/{work_id}")).json())

    async def get_async(self, work_id: str) -> WorkRecord:
        return record_of(_check(await self._aclient().get(f"/v1/units/{work_id}")).json())

    def list(
        self, status: str | None = None, kind: str | None = None, parent: str | None = None
    ) -> builtins.list[WorkRecord]:
        """Every unit matching the filters, oldest first (all pages)."""
        records: builtins.list[WorkRecord] = []
        after: str | None = None
        while True:
            params = {
                k: v
                for k, v in (
                    ("status", status),
                    ("kind", kind),
                    ("parent", parent),
                    ("after", after),
                )
                if v
            }
            params["limit"] = "1000"
            page = _check(self._http.get("/v1/units", params=params)).json()
            records.extend(record_of(u) for u in page["items"])
            after = page["next"]
            if after is None:
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
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = (
                WAIT_SLICE
                if deadline is None
                else max(0.0, min(WAIT_SLICE, deadline - time.monotonic()))
            )
            response = self._http.get(
                f"/v1/units/{work_id}/result", params={"wait": left}, timeout=left + self._timeout
            )
            found = _settle(response, timeout, deadline, for_result)
            if found is not None:
                return found

    async def wait_async(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        return (await self._finish_async(work_id, timeout, for_result=False))[0]

    async def result_async(self, work_id: str, timeout: float | None = None) -> Any:
        record, body = await self._finish_async(work_id, timeout, for_result=True)
        assert body is not None
        return body["value"] if body["has_value"] else record

    async def _finish_async(
        self, work_id: str, timeout: float | None, *, for_result: bool
    ) -> tuple[WorkRecord, dict[str, Any] | None]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = (
                WAIT_SLICE
                if deadline is None
                else max(0.0, min(WAIT_SLICE, deadline - time.monotonic()))
            )
            response = await self._aclient().get(
                f"/v1/units/{work_id}/result", params={"wait": left}, timeout=left + self._timeout
            )
            found = _settle(response, timeout, deadline, for_result)
            if found is not None:
                return found

    # -- output ----------------------------------------------------------------------

    def stream(self, work_id: str) -> Iterator[bytes]:
        """The unit's output bytes, once each, until it ends (follows ``/events``)."""
        import base64  # noqa: PLC0415

        for event, data in self.events(work_id):
            if event == "output":
                yield data["text"].encode() if "text" in data else base64.b64decode(data["base64"])

    def events(
        self, work_id: str, after: str | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(type, data)`` of each SSE event until ``end``, resuming after a dropped connection."""
        import json  # noqa: PLC0415

        last = after
        while True:
            headers = {} if last is None else {"Last-Event-ID": last}
            with self._http.stream(
                "GET", f"/v1/units/{work_id}/events", headers=headers, timeout=None
            ) as r:
                _check_stream(r)
                try:
                    for event, data, event_id in _sse(r.iter_lines()):
                        last = event_id or last
                        yield event, json.loads(data)
                        if event == "end":
                            return
                except httpx.TransportError:
                    continue  # reconnect from the last event seen

    # -- ending work --------------------------------------------------------------------

    def cancel(self, work_id: str, grace: float = 5.0) -> bool:
        r = _check(self._http.post(f"/v1/units/{work_id}/cancel", json={"grace": grace}))
        return bool(r.json()["changed"])

    def kill(self, work_id: str) -> bool:
        return bool(_check(self._http.post(f"/v1/units/{work_id}/kill")).json()["changed"])

    async def cancel_async(self, work_id: str, grace: float = 5.0) -> bool:
        r = _check(await self._aclient().post(f"/v1/units/{work_id}/cancel", json={"grace": grace}))
        return bool(r.json()["changed"])

    async def kill_async(self, work_id: str) -> bool:
        r = _check(await self._aclient().post(f"/v1/units/{work_id}/kill"))
        return bool(r.json()["changed"])

    # -- retain and notices -------------------------------------------------------------

    def retain(self, work_id: str, lease: float = 30.0) -> str:
        """Retain the unit with a lease; its ID (renew with ``renew_retain``)."""
        return str(
            _check(self._http.post(f"/v1/units/{work_id}/retain", json={"lease": lease})).json()[
                "lease_id"
            ]
        )

    def renew_retain(self, work_id: str, lease_id: str, lease: float = 30.0) -> bool:
        r = self._http.put(f"/v1/units/{work_id}/retain/{lease_id}", json={"lease": lease})
        return r.status_code == 200

    def release(self, work_id: str, lease_id: str) -> bool:
        return self._http.delete(f"/v1/units/{work_id}/retain/{lease_id}").status_code == 204

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

    def ack_notice(self, work_id: str, token: str) -> bool:
        return (
            self._http.post(f"/v1/notifications/{work_id}/ack", json={"token": token}).status_code
            == 200
        )

    def release_notice(self, work_id: str, token: str) -> bool:
        return (
            self._http.delete(
                f"/v1/notifications/{work_id}/claims/{quote(token, safe='')}"
            ).status_code
            == 204
        )

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()
        if self._async is not None:
            client, self._async = self._async, None
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                asyncio.run(client.aclose())
            else:
                raise RuntimeError("inside an event loop, close with `await client.aclose()`")

    async def aclose(self) -> None:
        self._http.close()
        if self._async is not None:
            client, self._async = self._async, None
            await client.aclose()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


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
