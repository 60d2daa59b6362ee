"""Errors as RFC 9457 problems: each Python error maps to one HTTP status.

The problem's ``title`` is the error's class name and its ``detail`` the
error's own message, so a client (``workunits._client.http_client``) raises the same
error with the same text as the Python API would have.
"""

from __future__ import annotations

from typing import Any

import orjson
import pykka
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

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


class ShuttingDown(Exception):
    """The server is shutting down: a request in flight is answered 503, to be retried."""


RETRY_SECONDS = "5"


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
    status = status_of(exc)
    retry = {"Retry-After": RETRY_SECONDS} if status == 503 else None
    return problem(status, type(exc).__name__, str(exc), unit=unit, headers=retry)


def routes(app: FastAPI) -> list[BaseRoute]:
    """The app's routes, those of included routers in place of the routers."""
    out: list[BaseRoute] = []
    pending = list(app.router.routes)
    while pending:
        route = pending.pop(0)
        inner = getattr(route, "original_router", None)  # FastAPI's included router
        if inner is not None:
            pending[:0] = list(inner.routes)
        else:
            out.append(route)
    return out


def allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """Every method some route of ``app`` takes at the request's path (HEAD with GET)."""
    methods: set[str] = set()
    for route in routes(app):
        match, _ = route.matches({**scope, "method": "GET"})
        if match is Match.NONE:
            continue
        found = getattr(route, "methods", None)
        methods |= set(found) if found else {"GET", "HEAD"}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


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
        headers = dict(exc.headers or {})
        detail = str(exc.detail)
        if exc.status_code == 405:
            # Starlette names the methods of the first route that matched the path;
            # several routes share a path here (GET and DELETE of a retain...).
            allowed = allowed_methods(app, request.scope)
            headers["Allow"] = ", ".join(allowed)
            detail = f"{request.method} is not allowed here; allowed: {', '.join(allowed)}"
        return problem(exc.status_code, "HTTPError", detail, headers=headers)

    async def on_shutting_down(request: Request, exc: Exception) -> Response:
        detail = "the server is shutting down: retry in a moment (its next run answers)"
        return problem(503, "ShuttingDown", detail, headers={"Retry-After": RETRY_SECONDS})

    async def on_actor_gone(request: Request, exc: Exception) -> Response:
        # The supervisor stopped under a request in flight (a shutdown): not a bug.
        detail = "the supervisor has stopped: retry in a moment (its next run answers)"
        return problem(503, "SupervisorClosed", detail, headers={"Retry-After": RETRY_SECONDS})

    app.add_exception_handler(ShuttingDown, on_shutting_down)
    app.add_exception_handler(pykka.ActorDeadError, on_actor_gone)
    app.add_exception_handler(e.WorkunitsError, on_workunits_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
