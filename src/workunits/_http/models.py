"""The HTTP API's request and response bodies: the OpenAPI schema is generated from these.

Every input is validated here, before it reaches the supervisor, which checks
it again with the same messages as for Python callers.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    create_model,
    model_validator,
)

from workunits._core.record import WorkRecord
from workunits._core.retry import Retry
from workunits._core.sandbox import Sandbox, sandbox_doc
from workunits._core.seconds import MAX_CLAIM_LEASE
from workunits._core.status import is_terminal
from workunits._surface.options import BY_NAME, OPTIONS, Json, Option

MAX_TEXT = 64 << 10  # a command, description or message: plenty, and bounded


class _Strict(BaseModel):
    """A request body: no unknown field, and no value coerced into a field's type
    (``{"grace": "5"}`` and ``{"grace": false}`` are refused, not read as 5 and 0)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _iso_time(value: object) -> object:
    """A time given as text: ISO 8601 only (lax parsing would read "5" as 1970)."""
    if not isinstance(value, str):
        raise ValueError("a time is an ISO 8601 string with its offset, or seconds from now")  # noqa: TRY004 - pydantic wants ValueError
    return datetime.datetime.fromisoformat(value)


def _whole(value: object) -> object:
    """An integer field: JSON's 3.0 is the integer 3 (JSON Schema says so too); a
    string, a boolean or 3.5 is refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be a whole number")  # noqa: TRY004 - pydantic wants ValueError
    return value


Whole = Annotated[int, Strict(False), BeforeValidator(_whole)]
# Bounds given inside, before the validator: JSON Schema then says them as bounds.
PositiveWhole = Annotated[int, Field(gt=0), Strict(False), BeforeValidator(_whole)]
Attempts = Annotated[int, Field(ge=1, le=1000), Strict(False), BeforeValidator(_whole)]

# Strict bodies get their JSON as Python values: a time arrives as a string.
IsoTime = Annotated[AwareDatetime, Strict(False), BeforeValidator(_iso_time)]


class RetryBody(_Strict):
    """``wu.Retry``: run a failed unit again, same ID, up to ``max_attempts`` attempts in all.

    The delay before attempt n+1 is ``initial * backoff**(n-1)`` seconds, at most
    ``max_delay`` (with ``jitter``, a random part of it). ``exit_codes``: the exit
    codes retried (null: any non-zero one; ``[]``: none). Any exception is retried.
    """

    max_attempts: Attempts = 3
    backoff: Annotated[float, Field(ge=1)] = 2.0
    initial: Annotated[float, Field(ge=0)] = 1.0
    max_delay: Annotated[float, Field(ge=0)] = 300.0
    jitter: bool = True
    exit_codes: Annotated[list[Whole], Field(max_length=256)] | None = None

    def policy(self) -> Retry:
        codes = None if self.exit_codes is None else tuple(self.exit_codes)
        return Retry(
            max_attempts=self.max_attempts,
            backoff=self.backoff,
            initial=self.initial,
            max_delay=self.max_delay,
            jitter=self.jitter,
            exit_codes=codes,
        )


def _body_field(option: Option) -> tuple[Any, Any]:
    """An option as a field of ``POST /v1/units`` (``options.Json``): null is its default."""
    assert isinstance(option.http, Json)
    kind = _NAMED.get(str(option.http.type), option.http.type)
    if option.http.limits:
        kind = Annotated[kind, Field(**dict[str, Any](option.http.limits))]
    description = option.http.description or option.doc.rstrip(".")
    return kind | None, Field(None, description=description)


def _fields(*verbs: str) -> dict[str, Any]:
    """The body fields of the options ``verbs`` take (the unit's own, then their kinds')."""
    taken = [o for o in OPTIONS if any(v in o.verbs for v in verbs)]
    return {
        o.name: _body_field(o)
        for o in sorted(taken, key=lambda o: not o.unit)
        if isinstance(o.http, Json) and o.http.header is None
    }


# A path on the server's host: absolute (relative to what? its directory is nothing
# its callers know), without NUL.
AbsolutePath = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^/[^\x00]*$")]
SomePath = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00]+$")]
Port = Annotated[int, Field(ge=1, le=65535), Strict(False), BeforeValidator(_whole)]


class SandboxBody(_Strict):
    """``wu.Sandbox``: what a unit may touch, narrowing the default protection.

    ``write``: the only directories it may change (``[]``: none but its own
    TMPDIR); ``read``: the only ones it may read; ``read_only_paths``: paths
    inside the write roots that stay read-only; ``network``: true, false, or
    the TCP ports it may use; limits for its whole tree; ``required`` false
    runs it even where the machine cannot enforce all of it (the record says what).
    """

    write: Annotated[list[AbsolutePath], Field(max_length=64)] | None = None
    read: Annotated[list[AbsolutePath], Field(max_length=64)] | None = None
    read_only_paths: Annotated[list[SomePath], Field(max_length=64)] = []
    network: bool | Annotated[list[Port], Field(max_length=1024)] | None = None
    memory: PositiveWhole | None = None
    cpu_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    processes: PositiveWhole | None = None
    file_size: PositiveWhole | None = None
    open_files: PositiveWhole | None = None
    required: bool = True

    def policy(self) -> Sandbox:
        return Sandbox.from_json(self.model_dump(exclude_defaults=True))


class NoSandboxBody(_Strict):
    """``wu.Sandbox.none()``: no protection at all for this unit, not even the default."""

    none: Literal[True]

    def policy(self) -> Sandbox:
        return Sandbox.none()


# The JSON types ``options.Json`` names (their bounds inside: JSON Schema says them).
_NAMED: dict[str, Any] = {
    "sandbox": SandboxBody | NoSandboxBody,
    "retry": RetryBody,
    "not_before": Annotated[float, Field(ge=0, allow_inf_nan=False)] | IsoTime,
    "positive_whole": PositiveWhole,
    "attempts": Attempts,
}

# The options, as the submit bodies' fields: read from ``_surface.options``, where an
# option is defined once for every surface (type checkers see the fixed fields only).
if TYPE_CHECKING:

    class _ShellOptions(_Strict): ...

    class _CallOptions(_Strict): ...

else:
    _ShellOptions = create_model("_ShellOptions", __base__=_Strict, **_fields("shell"))
    _CallOptions = create_model("_CallOptions", __base__=_Strict, **_fields("agent", "workflow"))


# What ShellSubmit's validator checks, said in its JSON Schema too: exactly one of
# argv and command, and not both log and keep_output.
_ONE_COMMAND: dict[str, Any] = {
    "anyOf": [
        {
            "required": ["argv"],
            "properties": {"argv": {"type": "array"}, "command": {"type": "null"}},
        },
        {
            "required": ["command"],
            "properties": {"command": {"type": "string"}, "argv": {"type": "null"}},
        },
    ],
    "not": {
        "required": ["log", "keep_output"],
        "properties": {"log": {"type": "string"}, "keep_output": {"const": True}},
    },
}


class ShellSubmit(_ShellOptions):
    """A shell unit: ``argv`` (a list) or ``command`` (for ``/bin/sh -c``), not both."""

    model_config = ConfigDict(json_schema_extra=_ONE_COMMAND)

    kind: Literal["shell"]
    argv: (
        Annotated[list[Annotated[str, Field(max_length=MAX_TEXT)]], Field(min_length=1)] | None
    ) = None
    command: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)] | None = None

    @model_validator(mode="after")
    def _one_command(self) -> ShellSubmit:
        if (self.argv is None) == (self.command is None):
            raise ValueError("give exactly one of argv (a list) or command (a string)")
        log = getattr(self, "log", None)
        if log is not None and getattr(self, "keep_output", None):
            raise ValueError("give log or keep_output, not both")
        if log is not None and not log.startswith("/"):
            # Relative to what? The server's directory is nothing its callers know.
            raise ValueError(f"log must be an absolute path, got {log!r}")
        return self


def _own_options_schema(schema: dict[str, Any]) -> None:
    """CallSubmit's validator, said in its JSON Schema: a kind sets only its own options."""
    clauses = [
        {
            "required": ["kind", name],
            "properties": {"kind": {"const": kind}, name: {"not": {"type": "null"}}},
        }
        for kind in ("agent", "workflow")
        for name in _fields("agent", "workflow")
        if kind not in BY_NAME[name].verbs
    ]
    schema["not"] = {"anyOf": clauses}


class CallSubmit(_CallOptions):
    """An agent or workflow: the callable ``target`` (``module:qualname``) and its JSON args."""

    model_config = ConfigDict(json_schema_extra=_own_options_schema)

    kind: Literal["agent", "workflow"]
    target: Annotated[
        str,
        Field(
            min_length=3,
            max_length=512,
            pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$",
        ),
    ]
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _its_own_options(self) -> CallSubmit:
        other = [n for n in _fields("agent", "workflow") if getattr(self, n) is not None]
        refused = [n for n in other if self.kind not in BY_NAME[n].verbs]
        if refused:
            raise ValueError(f"a {self.kind} takes no {', '.join(refused)}")
        return self


def options_of(body: ShellSubmit | CallSubmit) -> dict[str, Any]:
    """The options a submit body gave, as Python values (a field left null: not given)."""
    given: dict[str, Any] = {}
    for name in _fields(body.kind):
        value = getattr(body, name)
        if value is not None:
            policy_body = isinstance(value, RetryBody | SandboxBody | NoSandboxBody)
            given[name] = value.policy() if policy_body else value
    return given


Submit = Annotated[ShellSubmit | CallSubmit, Field(discriminator="kind")]


class Unit(BaseModel):
    """A unit's record. ``status`` is the lifecycle status; ``expired`` says retention ran out."""

    id: str
    kind: str
    status: str
    terminal: bool = Field(False, description="The status is final (completed, failed or killed)")
    expired: bool = False
    parent: str | None
    description: str
    created_at: float
    started_at: float | None
    ended_at: float | None
    attempt: int
    progress: float | None
    progress_message: str
    exit_code: int | None
    signal: int | None
    error: str | None
    reason: str | None
    cause: str | None = Field(description="How it ended, in one line (null while it runs)")
    output_bytes: int
    retain: int
    retry_of: str | None = Field(None, description="The failed unit this one retries")
    not_before: float | None = Field(None, description="A pending unit starts no earlier")
    progress_at: float | None = Field(
        None, description="When the last progress report arrived (its age shows a stall)"
    )
    evidence: dict[str, Any] | None = Field(
        None, description="The structured evidence of the last progress report"
    )
    sandbox: dict[str, Any] | None = Field(
        None,
        description=(
            'Its sandbox policy ({} is the default protection, {"none": true} none) and '
            "what of it this machine did not enforce (not_enforced)"
        ),
    )

    @classmethod
    def of(cls, record: WorkRecord) -> Unit:
        ended = record.ended_at is not None
        return cls(
            id=record.id,
            kind=record.kind,
            status=record.status.value,
            terminal=is_terminal(record.status),
            expired=record.expired_at is not None,
            parent=record.parent,
            description=record.description,
            created_at=record.created_at,
            started_at=record.started_at,
            ended_at=record.ended_at,
            attempt=record.attempt,
            progress=record.progress,
            progress_message=record.progress_message,
            exit_code=record.exit_code,
            signal=record.signal,
            error=record.error,
            reason=None if record.reason is None else record.reason.value,
            cause=record.describe_end() if ended else None,
            output_bytes=record.output_bytes,
            retain=record.retain,
            retry_of=record.retry_of,
            not_before=record.not_before,
            progress_at=record.progress_at,
            evidence=None if record.evidence is None else dict(record.evidence),
            sandbox=sandbox_doc(record.sandbox, record.unenforced),
        )


SCHEDULED_OPTIONS = ("description", "timeout", "max_attempts")  # what a firing's unit takes
_NOT_SCHEDULED = tuple(
    o.name
    for o in OPTIONS
    if isinstance(o.http, Json) and o.http.header is None and o.name not in SCHEDULED_OPTIONS
)


def _plain_unit_schema(schema: dict[str, Any]) -> None:
    """ScheduleBody's validator, said in its JSON Schema: the unit sets none of these."""
    clauses = [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
        for name in _NOT_SCHEDULED
    ]
    unit = schema["properties"]["unit"]
    schema["properties"]["unit"] = {"allOf": [unit, {"not": {"anyOf": clauses}}]}


class BatchSubmit(_Strict):
    """Several units in one request: checked whole, written in one transaction."""

    units: Annotated[list[Submit], Field(min_length=1, max_length=1000)]
    keys: list[Annotated[str, Field(min_length=1, max_length=256)] | None] | None = Field(
        None,
        description="An idempotency key per unit (null for none), as Idempotency-Key is for "
        "one: as many as units (else 400)",
    )
    max_workers: PositiveWhole | None = Field(
        None,
        description="At most this many of the batch's units run at once (default: no limit "
        "of its own, only each kind's concurrency)",
    )


class BatchItem(BaseModel):
    """One unit of a batch: its record (``created`` false: its key named a unit that was
    there already), or why it alone failed (its key taken with other arguments)."""

    unit: Unit | None = None
    created: bool = False
    error: str | None = None


class BatchResult(BaseModel):
    """The batch's units, in the order they were given."""

    units: list[BatchItem]


class ScheduleBody(_Strict):
    """A cron schedule whose firings submit ``unit`` (as ``POST /v1/units`` would).

    ``cron``: minute hour day-of-month month day-of-week (a sixth field is
    seconds), read in ``tz``. The unit takes none of {refused}.
    """

    model_config = ConfigDict(json_schema_extra=_plain_unit_schema)

    cron: Annotated[str, Field(min_length=1, max_length=256)]
    tz: Annotated[str, Field(min_length=1, max_length=64)] = "UTC"
    catch_up: Literal["skip", "run-once"] = "skip"
    unit: Annotated[ShellSubmit | CallSubmit, Field(discriminator="kind")]

    @model_validator(mode="after")
    def _plain_unit(self) -> ScheduleBody:
        given = [n for n in options_of(self.unit) if n not in SCHEDULED_OPTIONS]
        if given:
            raise ValueError(f"a scheduled unit takes no {', '.join(given)}")
        return self


ScheduleBody.__doc__ = (ScheduleBody.__doc__ or "").replace(
    "{refused}", ", ".join(f"``{name}``" for name in _NOT_SCHEDULED)
)


class FiringOut(BaseModel):
    due_at: float
    outcome: str = Field(description="fired, or missed (no supervisor ran at its time)")
    unit: str | None


class ScheduleOut(BaseModel):
    """A schedule: ``next_at`` is its next due time, ``last`` its latest firing (or miss)."""

    name: str
    cron: str
    tz: str
    catch_up: str
    next_at: float
    last: FiringOut | None


class UnitPage(BaseModel):
    """One page of units; pass ``next`` as ``after`` for the next page (null: no more).

    ``total`` is how many units the filters match in all; with ``total_exact``
    false it is a lower bound (counting further would cost more than the page).
    """

    items: list[Unit]
    next: str | None
    total: int
    total_exact: bool


class Result(BaseModel):
    """A completed unit's value (``has_value`` false for kinds without one, like shell)."""

    unit: Unit
    has_value: bool
    value: Any = None


class SignalBody(_Strict):
    """A signal for ``ctx.wait_for(name)`` in the unit: its ``value`` is any JSON."""

    name: Annotated[str, Field(min_length=1, max_length=256)]
    value: Any = None


INPUT_MAX = 1 << 20  # characters of one input body's data; larger input takes several


class InputBody(_Strict):
    """Bytes for the stdin of a unit started with ``stdin: true``, queued in order.

    ``data`` is text (written as UTF-8) or, with ``encoding: "base64"``, any
    bytes; ``eof: true`` closes the unit's stdin after them.
    """

    data: Annotated[str, Field(max_length=INPUT_MAX)] = ""
    encoding: Literal["text", "base64"] = "text"
    eof: bool = False


class Delivered(BaseModel):
    """A signal kept in the ledger for the unit, which receives it at its ``wait_for``."""

    delivered: bool


class CancelBody(_Strict):
    grace: Annotated[float, Field(ge=0, le=3600)] = 5.0


class Changed(BaseModel):
    """What a cancel or kill did: ``changed`` false when the unit had already ended."""

    changed: bool
    status: str


class LeaseBody(_Strict):
    lease: Annotated[float, Field(gt=0, le=MAX_CLAIM_LEASE)] = 30.0


class Lease(BaseModel):
    lease_id: str
    unit: str
    lease: float


class NoticeOut(BaseModel):
    """A claimed notice: ack it (POST .../ack with the token) or release it (DELETE)."""

    id: str
    token: str
    lease: float
    kind: str
    status: str
    exit_code: int | None
    signal: int | None
    error: str | None
    reason: str | None
    description: str
    ended_at: float
    redelivered: bool


class TokenBody(_Strict):
    token: Annotated[str, Field(min_length=1, max_length=128)]


class RenewBody(_Strict):
    token: Annotated[str, Field(min_length=1, max_length=128)]
    lease: Annotated[float, Field(gt=0, le=MAX_CLAIM_LEASE)] = 30.0


class Problem(BaseModel):
    """An error, as RFC 9457 ``application/problem+json``; ``title`` is the Python error's name."""

    type: str
    title: str
    status: int
    detail: str
    unit: Unit | None = None


class Health(BaseModel):
    status: Literal["ok"]
    session: str
