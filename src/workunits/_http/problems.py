"""Errors as RFC 9457 problems: each Python error maps to one HTTP status.

The problem's ``title`` is the error's class name and its ``detail`` the
error's own message, so a client (``workunits._client.http_client``) raises the same
error with the same text as the Python API would have.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from workunits._core import errors as e
from workunits._http.models import Unit

PROBLEM_TYPE = "application/problem+json"

# Most specific first: the first class an error is an instance of decides.
STATUS_OF: tuple[tuple[type[e.WorkunitsError], int], ...] = (
    (e.InvalidWorkId, 400),
    (e.WorkExpired, 410),
    (e.UnknownWork, 404),
    (e.UnknownKind, 404),
    (e.IdempotencyConflict, 409),
    (e.NotRetryable, 409),
    (e.WorkFailed, 409),
    (e.WorkKilled, 409),
    (e.NotFinished, 202),
    (e.InvalidArgument, 400),  # SpecError too
    (e.WrongType, 400),
    (e.UnstorableValue, 400),
    (e.UnloadableValue, 500),
    (e.SupervisorClosed, 503),
    (e.SupervisorBusy, 503),
    (e.LedgerFull, 507),
)


def status_of(exc: e.WorkunitsError) -> int:
    for cls, status in STATUS_OF:
        if isinstance(exc, cls):
            return status
    return 500


def problem(
    status: int,
    title: str,
    detail: str,
    *,
    unit: Unit | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {
        "type": f"urn:workunits:error:{title}",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if unit is not None:
        body["unit"] = unit.model_dump()
    return Response(orjson.dumps(body), status, headers=headers, media_type=PROBLEM_TYPE)


def of_error(exc: e.WorkunitsError) -> Response:
    record = getattr(exc, "record", None)
    unit = Unit.of(record) if record is not None else None
    return problem(status_of(exc), type(exc).__name__, str(exc), unit=unit)


def install(app: FastAPI) -> None:
    """Every error the app answers with is a problem document."""

    async def on_workunits_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, e.WorkunitsError)
        return of_error(exc)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        parts = []
        for err in exc.errors():
            if err.get("type") == "json_invalid":  # the body did not parse at all
                at = err.get("loc", ("body", "?"))[-1]
                at = at + 1 if isinstance(at, int) else at  # an offset: the 1st is 0
                why = err.get("ctx", {}).get("error", "")
                parts.append(
                    f"the request body is not valid JSON ({why} at character {at}); "
                    f"send one JSON object"
                )
                continue
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
        return problem(422, "ValidationError", "; ".join(parts) or "invalid request")

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return problem(
            exc.status_code, "HTTPError", str(exc.detail), headers=dict(exc.headers or {})
        )

    app.add_exception_handler(e.WorkunitsError, on_workunits_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
