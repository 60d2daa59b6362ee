"""The OpenAPI document, made to say what the server does.

FastAPI's generated document leaves out what happens outside the routes'
own signatures: the bearer token the guard asks for, the problem documents
every error is, the statuses the errors map to (``problems.STATUS_OF``), and
the pattern every unit ID has. This adds them once, for every operation, so
clients generated from the document and schemathesis (run in the suite with
``--checks all``) find the server as documented.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from workunits._core import ids as _ids
from workunits._http.models import Problem

PROBLEM = "application/problem+json"
# A unit's ID as ``_ids`` validates it: a letter, then eight of 0-9a-z; ``s`` starts a
# session's ID, never a unit's.
ID_PATTERN = "^" + _ids.ID_REGEX.replace("[a-z]", "[a-rt-z]", 1) + "$"
# An event's ID (``supervisor.events.Cursor``).
CURSOR_PATTERN = r"^[0-9]{1,18}-[0-9]{1,18}(-[0-9]{1,9}(-[1-4])?)?$"


def _pattern(path: str, name: str) -> str | None:
    if name in ("work_id", "parent") or (name == "after" and path == "/v1/units"):
        return ID_PATTERN
    if name in ("after", "last-event-id") and path.endswith("/events"):
        return CURSOR_PATTERN
    return None


# What each status means here, whichever route answers it (problems.STATUS_OF).
ERRORS: dict[str, str] = {
    "400": "Malformed ID or invalid argument (InvalidWorkId, SpecError, ...)",
    "401": "No or wrong bearer token",
    "404": "No such unit, kind, lease or schedule (UnknownWork, UnknownKind, ...)",
    "409": "Conflicts with the unit's state (IdempotencyConflict, WorkFailed, ClaimLost, ...)",
    "410": "The unit has expired: its retention ran out (WorkExpired)",
    "422": "The request does not validate (ValidationError): a parameter or body field",
    "503": "Shutting down or busy (ShuttingDown, SupervisorClosed, SupervisorBusy): "
    "retry after Retry-After seconds",
}


def install(app: FastAPI) -> None:
    """Serve the amended document at ``/openapi.json`` (built once, on first use)."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                routes=app.routes,
            )
            amend(doc)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]


def amend(doc: dict[str, Any]) -> None:
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, schema in schemas["Problem"].pop("$defs", {}).items():
        schemas.setdefault(name, schema)
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    components["securitySchemes"] = {
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "The state dir's http.token (the web view logs in with a cookie)",
        }
    }
    doc["security"] = [{"bearerAuth": []}]
    problem = {"content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    for path, operations in doc.get("paths", {}).items():
        for operation in operations.values():
            _amend_operation(path, operation, problem)


def _amend_operation(path: str, operation: dict[str, Any], problem: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", ()):
        schema = parameter.get("schema", {})
        if parameter.get("in") == "header" and "anyOf" in schema:
            # A header is there or not: it is never JSON null (FastAPI writes str | None).
            (kept,) = [o for o in schema.pop("anyOf") if o.get("type") != "null"]
            schema.update(kept)
        pattern = _pattern(path, str(parameter.get("name", "")).lower())
        if pattern is not None:
            schema = parameter.setdefault("schema", {})
            for option in schema.get("anyOf", [schema]):
                if option.get("type") == "string":
                    option["pattern"] = pattern
    responses = operation.setdefault("responses", {})
    if path == "/healthz":
        operation["security"] = []  # the one path without the token
        return
    for status, description in ERRORS.items():
        responses[status] = {"description": description, **problem}
    responses["default"] = {"description": "Any other error, as a problem document", **problem}
    headers = {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds"}}
    responses["503"]["headers"] = headers
