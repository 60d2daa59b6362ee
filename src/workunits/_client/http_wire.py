"""The HTTP API's requests and answers, without I/O: what ``HttpClient`` sends and reads.

Each operation is written once as *steps*: a generator that yields the
requests it needs (``Call``) and is sent each response, then returns the
operation's answer (the sans-I/O shape). ``HttpClient`` drives the steps on
its ``httpx.Client`` for a blocking call and on its ``AsyncClient`` for the
``_async`` twin, so the two cannot differ in what they ask or how they read
the answer -- a long-poll that repeats, the pages of a listing, included.

Errors: a problem document's ``title`` names the Python error and its
``detail`` is that error's message (``error_of``).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from workunits._core import errors as _errors
from workunits._core import ids
from workunits._core.errors import NotFinished, SpecError, WorkunitsError
from workunits._core.query import Query
from workunits._core.record import WorkRecord
from workunits._core.status import Reason, Status
from workunits._surface import batch, ops
from workunits._surface.options import OPTIONS, Json
from workunits._surface.submission import Submission

R = TypeVar("R")

_RECORD_ERRORS = (_errors.WorkFailed, _errors.WorkKilled, _errors.WorkExpired)
WAIT_SLICE = 30.0  # one long-poll lasts at most this; longer waits repeat it
LIST_PAGE = 1000  # units asked for per ``GET /v1/units`` page (the server's maximum)


@dataclass(frozen=True, slots=True)
class Call:
    """One request: ``timeout`` adds to the client's own (a long-poll's wait)."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None


Steps = Generator[Call, httpx.Response, R]


def unit_path(work_id: str, tail: str = "") -> str:
    """``/v1/units/{id}...`` once the ID is well-formed (InvalidWorkId otherwise).

    Unchecked, ``"a…/../b…"`` would have named another unit's route: the one
    regex checks every ID before it touches a path (DESIGN §2.1).
    """
    return f"/v1/units/{ids.validate(work_id)}{tail}"


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


def checked(response: httpx.Response) -> httpx.Response:
    """The response, or the error its problem document names, raised."""
    if response.status_code >= 400:
        raise error_of(response)
    return response


# -- the operations ---------------------------------------------------------------------------


def steps_for(op: ops.Op[Any]) -> Steps[Any]:
    """The requests that carry ``op`` out over the HTTP API, and how its answer is read."""
    match op:
        case ops.Get(work_id):
            return _one(Call("GET", unit_path(work_id)), lambda r: record_of(checked(r).json()))
        case ops.List(q):
            return _page(q)
        case ops.Kill(work_id):
            return _one(Call("POST", unit_path(work_id, "/kill")), _changed)
        case ops.Cancel(work_id, grace):
            call = Call("POST", unit_path(work_id, "/cancel"), json={"grace": grace})
            return _one(call, _changed)
        case ops.Retry(work_id):
            return _one(Call("POST", unit_path(work_id, "/retry")), _submitted)
        case ops.Signal(work_id, name, value):
            body = {"name": name, "value": value}
            return _one(Call("POST", unit_path(work_id, "/signals"), json=body), _signalled)
        case ops.SendInput(work_id, data, eof):
            return _input(unit_path(work_id, "/input"), data, eof)
        case ops.Lease(work_id, lease):
            call = Call("POST", unit_path(work_id, "/retain"), json={"lease": lease})
            return _one(call, lambda r: str(checked(r).json()["lease_id"]))
        case ops.RenewLease(work_id, lease_id, lease):
            path = unit_path(work_id, f"/retain/{quote(lease_id, safe='')}")
            return _one(Call("PUT", path, json={"lease": lease}), lambda r: r.status_code == 200)
        case ops.EndLease(work_id, lease_id):
            path = unit_path(work_id, f"/retain/{quote(lease_id, safe='')}")
            return _one(Call("DELETE", path), lambda r: r.status_code == 204)
    raise SpecError(f"the HTTP API has no {type(op).__name__} operation")


def _one(call: Call, read: Callable[[httpx.Response], R]) -> Steps[R]:
    return read((yield call))


def _changed(response: httpx.Response) -> bool:
    return bool(checked(response).json()["changed"])


def _submitted(response: httpx.Response) -> ops.Submitted:
    return ops.Submitted(checked(response).json()["id"], response.status_code == 201)


def _signalled(response: httpx.Response) -> bool:
    if response.status_code == 409 and response.json().get("title") == "WorkEnded":
        return False
    checked(response)
    return True


INPUT_CHUNK = 3 << 18  # bytes per ``/input`` request: 1 MiB of base64, the body's most


def _input(path: str, data: bytes, eof: bool) -> Steps[bool]:
    """``POST .../input``, a request per ``INPUT_CHUNK`` in order, ``eof`` with the last."""
    offsets = range(0, max(len(data), 1), INPUT_CHUNK)
    for start in offsets:
        chunk = data[start : start + INPUT_CHUNK]
        last = start == offsets[-1]
        body = {
            "data": base64.b64encode(chunk).decode("ascii"),
            "encoding": "base64",
            "eof": eof and last,
        }
        if not _signalled((yield Call("POST", path, json=body))):
            return False  # it ended: the rest is not written
    return True


def _page(q: Query) -> Steps[list[WorkRecord]]:
    """The page ``q`` asks for: ``LIST_PAGE`` units a request, as many requests as it takes."""
    records: list[WorkRecord] = []
    mark = q.after
    while True:
        want = LIST_PAGE if q.limit is None else min(LIST_PAGE, q.limit - len(records))
        page = checked((yield Call("GET", "/v1/units", params=_list_params(q, mark, want)))).json()
        records.extend(record_of(u) for u in page["items"])
        mark = page["next"]
        if mark is None or (q.limit is not None and len(records) >= q.limit):
            return records


def _list_params(q: Query, after: str | None, limit: int) -> dict[str, str]:
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


def finish(
    work_id: str, timeout: float | None, *, for_result: bool
) -> Steps[tuple[WorkRecord, dict[str, Any] | None]]:
    """Long-poll ``/result`` until the unit is terminal; NotFinished after ``timeout``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    path = unit_path(work_id, "/result")
    while True:
        left = (
            WAIT_SLICE
            if deadline is None
            else max(0.0, min(WAIT_SLICE, deadline - time.monotonic()))
        )
        response = yield Call("GET", path, params={"wait": left}, timeout=left)
        found = _settle(response, timeout, deadline, for_result)
        if found is not None:
            return found


def value_of(found: tuple[WorkRecord, dict[str, Any] | None]) -> Any:
    """A result's value, or the record of a unit without one (a shell)."""
    record, body = found
    assert body is not None, "a result response that did not raise has a body"
    return body["value"] if body["has_value"] else record


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
    body = checked(response).json()
    return record_of(body["unit"]), body


def output(work_id: str, offset: int, limit: int) -> Steps[httpx.Response]:
    """``/output`` from ``offset``: at most ``limit`` bytes (``HttpOutputStream``'s reads)."""
    call = Call("GET", unit_path(work_id, "/output"), params={"offset": offset, "limit": limit})
    return _one(call, checked)


def submit(submission: Submission) -> Steps[ops.Submitted]:
    """``POST /v1/units``: each option the caller gave (not its default) in its JSON form."""
    body, headers = submit_body(submission)
    return _one(Call("POST", "/v1/units", json=body, headers=headers), _submitted)


def submit_batch(
    submissions: list[Submission], max_workers: int | None
) -> Steps[list[ops.Submitted | BaseException]]:
    """``POST /v1/units:batch``: each submission's body (an error names its item), their
    keys beside them; per item its unit, or the error that item alone met."""
    bodies = batch.each_item(submissions, submit_body)
    keys = [sub.unit.key for sub in submissions]
    body: dict[str, Any] = {"units": [b for b, _ in bodies]}
    if any(k is not None for k in keys):
        body["keys"] = keys
    if max_workers is not None:
        body["max_workers"] = max_workers
    return _one(Call("POST", "/v1/units:batch", json=body), _batch_answers)


def _batch_answers(response: httpx.Response) -> list[ops.Submitted | BaseException]:
    return [
        WorkunitsError(item["error"])
        if item["error"] is not None
        else ops.Submitted(item["unit"]["id"], item["created"])
        for item in checked(response).json()["units"]
    ]


def submit_body(sub: Submission) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and headers of a submit. Options at their defaults are left out, so an
    older server that lacks one still takes the submit."""
    body: dict[str, Any] = {"kind": sub.verb}
    if sub.verb == "shell":
        if isinstance(sub.target, str):
            body["command"] = sub.target
        else:
            body["argv"] = list(sub.target)
    else:
        body.update(target=_reference(sub.target), args=list(sub.args), kwargs=dict(sub.kwargs))
    headers: dict[str, str] = {}
    for option in OPTIONS:
        if sub.verb not in option.verbs or not isinstance(option.http, Json):
            continue
        value = getattr(sub.unit, option.name) if option.unit else sub.spec[option.name]
        if value is None or value == option.default:
            continue
        encoded = value if option.http.encode is None else option.http.encode(value)
        if encoded is None:
            continue
        if option.http.header is not None:
            headers[option.http.header] = str(encoded)
        else:
            body[option.name] = encoded
    return body, headers


def _reference(fn: Any) -> str:
    """A callable as the ``module:qualname`` the server imports."""
    if isinstance(fn, str):
        return fn
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        raise SpecError(
            f"over HTTP an agent is named by import reference: {fn!r} has none "
            "(define it at module level in an importable module)"
        )
    return f"{module}:{qualname}"
