"""The FastAPI app: units, their events, notices, metrics and the web view.

Every route awaits the ``Backend`` (the one adapter to ``Supervisor``) and
returns models from ``models.py``; errors become problems (``problems.py``);
the ``Guard`` middleware (``security.py``) checks every request first.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator
from importlib import resources
from typing import Annotated, Any, Literal
from urllib.parse import quote

import orjson
from fastapi import APIRouter, Body, FastAPI, Header, Path, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from sse_starlette import EventSourceResponse, ServerSentEvent

from workunits._core.errors import InvalidArgument, SpecError, UnstorableValue
from workunits._core.record import WorkRecord
from workunits._core.schedule import ScheduleInfo
from workunits._core.seconds import MAX_CLAIM_LEASE
from workunits._core.status import is_terminal
from workunits._http import fleet, metrics, openapi, problems
from workunits._http.backend import Backend
from workunits._http.models import (
    BatchItem,
    BatchResult,
    BatchSubmit,
    CancelBody,
    Changed,
    Delivered,
    FiringOut,
    Health,
    InputBody,
    Lease,
    LeaseBody,
    NoticeOut,
    RenewBody,
    Result,
    ScheduleBody,
    ScheduleOut,
    SignalBody,
    Submit,
    TokenBody,
    Unit,
    UnitPage,
)
from workunits._http.problems import ShuttingDown
from workunits._http.security import Guard, token_id
from workunits._util import strictjson
from workunits.supervisor.events import Cursor, OutputHold, UnitEvent
from workunits.supervisor.http_consumers import NoticeClaim

MAX_WAIT = 300.0
FOLLOW_MIN = 0.002
FOLLOW_MAX = 0.1  # output is polled: the longest it waits unseen while a unit is quiet
EVENT_CHUNK = 64 << 10
PAGE_MAX = 1000
ScheduleName = Annotated[str, Path(min_length=1, max_length=200)]


def create_app(backend: Backend, token: str, *, tls: bool = False) -> tuple[FastAPI, Guard]:
    """The app and its guard (call ``guard.allow(host, port)`` once the port is known)."""
    app = FastAPI(
        title="workunits",
        version="1",
        summary="Supervised, durable work units over HTTP",
        responses={
            400: {"description": "Malformed ID or invalid argument (problem+json)"},
            401: {"description": "No or wrong bearer token"},
        },
    )
    app.state.backend = backend
    app.state.owner = f"http:{token_id(token)}"
    problems.install(app)
    app.include_router(_units(backend))
    app.include_router(_notices(backend, app.state.owner))
    app.include_router(_schedules(backend))
    app.state.metrics = measured = metrics.Metrics(backend)
    app.include_router(metrics.router(measured))
    app.include_router(fleet.router(backend))
    _view(app)
    openapi.install(app)

    @app.get("/healthz", response_model=Health, tags=["service"])
    async def healthz() -> Health:
        """Liveness; the only path that needs no token."""
        return Health(status="ok", session=backend.session)

    guard = Guard(metrics.RequestMetrics(app, app, measured, backend), token=token, tls=tls)
    return app, guard


def _located(unit: Unit, status: int) -> JSONResponse:
    return JSONResponse(unit.model_dump(), status, headers={"Location": f"/v1/units/{unit.id}"})


def _units(backend: Backend) -> APIRouter:  # noqa: PLR0915 - one route per endpoint
    r = APIRouter(prefix="/v1/units", tags=["units"])

    @r.post("", status_code=201, response_model=Unit, responses={200: {"model": Unit}, 409: {}})
    async def submit(
        body: Annotated[Submit, Body()],
        idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
    ) -> JSONResponse:
        """Submit a shell, agent or workflow unit. ``Idempotency-Key`` works like ``key=``."""
        record, created = await backend.submit(body, idempotency_key)
        return _located(Unit.of(record), 201 if created else 200)

    @r.post(":batch", status_code=201, response_model=BatchResult)
    async def submit_batch(body: Annotated[BatchSubmit, Body()]) -> BatchResult:
        """Submit several units as one batch: every unit is checked first (one that
        cannot be made fails the request, 400, naming its index, and nothing is
        written), then all are written in one transaction. A unit that fails on its
        own comes back with its ``error``; the others run. At most ``max_workers``
        of them run at once."""
        answers = await backend.submit_batch(list(body.units), body.keys, body.max_workers)
        return BatchResult(
            units=[
                BatchItem(error=f"{type(a).__name__}: {a}")
                if isinstance(a, BaseException)
                else BatchItem(unit=Unit.of(a[0]), created=a[1])
                for a in answers
            ]
        )

    @r.get("", response_model=UnitPage)
    async def list_units(
        status: Literal["pending", "running", "completed", "failed", "killed", "expired"]
        | None = None,
        kind: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
        parent: Annotated[str | None, Query(max_length=64)] = None,
        *,
        key: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
        created_after: Annotated[float | None, Query(allow_inf_nan=False)] = None,
        created_before: Annotated[float | None, Query(allow_inf_nan=False)] = None,
        q: Annotated[str | None, Query(max_length=512)] = None,
        limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 100,
        after: Annotated[str | None, Query(max_length=64)] = None,
        order: Literal["oldest", "newest"] = "oldest",
    ) -> UnitPage:
        """Units oldest first (``order=newest``: newest first), a page at a time: pass
        ``next`` back as ``after`` for the next page in the same order.

        Filters: ``status`` (``expired`` too), ``kind``, ``parent``, ``key``,
        ``created_after`` (inclusive) and ``created_before`` (exclusive) in
        seconds since the epoch, and ``q``, words each matched as the start of
        a word of the unit's ID, description or key. ``total`` counts every
        unit the filters match (``total_exact`` false: at least that many).
        Each page reads only its own rows, whatever the ledger holds.
        """
        asked: dict[str, Any] = {
            "status": status,
            "kind": kind,
            "parent": parent,
            "limit": limit + 1,
            "after": after,
            "key": key,
            "created_after": created_after,
            "created_before": created_before,
            "search": q,
            "order": order,
        }
        records, total = await backend.list_units(asked)
        more = len(records) > limit
        items = [Unit.of(rec) for rec in records[:limit]]
        return UnitPage(
            items=items,
            next=items[-1].id if more and items else None,
            total=total.count,
            total_exact=total.exact,
        )

    @r.get("/{work_id}", response_model=Unit)
    async def get(work_id: str) -> Unit:
        """The unit's record (400 malformed ID, 404 unknown, 410 expired)."""
        record = await backend.get(work_id)
        _refuse_expired(record)
        return Unit.of(record)

    @r.get("/{work_id}/result", response_model=Result, responses={202: {"model": Unit}})
    async def result(
        work_id: str, wait: Annotated[float, Query(ge=0, le=MAX_WAIT)] = 0.0
    ) -> Response:
        """200 with the value; 202 while it runs (``wait`` long-polls); 409 failed or killed."""
        record = await backend.get(work_id)
        if not is_terminal(record.status) and wait > 0:
            record = await backend.wait(work_id, wait)
        if not is_terminal(record.status):
            return JSONResponse(Unit.of(record).model_dump(), 202, headers={"Retry-After": "1"})
        value = await backend.result_of(record)  # raises WorkFailed / WorkKilled / WorkExpired
        if isinstance(value, WorkRecord):
            body: dict[str, Any] = {"unit": Unit.of(value).model_dump(), "has_value": False}
        else:
            try:  # a value JSON would change (NaN, a tuple, a date) is not sent changed
                strictjson.dumps(value, f"the result of {work_id}")
            except UnstorableValue as exc:
                why = str(exc).removesuffix("; nothing was stored")
                return problems.problem(
                    406,
                    "UnstorableValue",
                    f"{why}: over HTTP a value travels as JSON, so this one cannot; read it "
                    f"in Python where its state dir is (wu.connect(state_dir).result(id))",
                    unit=Unit.of(record),
                )
            body = {"unit": Unit.of(record).model_dump(), "has_value": True, "value": value}
        try:
            data = orjson.dumps(body)
        except TypeError as exc:
            raise InvalidArgument(f"{work_id}'s value cannot be sent as JSON: {exc}") from None
        return Response(data, media_type="application/json")

    @r.get("/{work_id}/output", responses={200: {"content": {"application/octet-stream": {}}}})
    async def output(
        work_id: str,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1 << 20)] = EVENT_CHUNK,
    ) -> Response:
        """Output bytes from ``offset``; ``X-Next-Offset`` is where the next read starts.

        When bytes before the stored tail are gone (the unit ended), ``X-Gap-From``
        and ``X-Gap-To`` name them and the bytes start at the tail.
        """
        batch = await backend.events(work_id, Cursor(0, offset), limit)
        data = b"".join(ev.output for ev in batch.events if ev.type == "output")
        headers = {"X-Next-Offset": str(batch.cursor.offset), "X-Ended": str(batch.ended).lower()}
        for ev in batch.events:
            if ev.type == "gap":
                headers["X-Gap-From"], headers["X-Gap-To"] = (
                    str(ev.data["from"]),
                    str(ev.data["to"]),
                )
        return Response(data, media_type="application/octet-stream", headers=headers)

    @r.get("/{work_id}/events", responses={200: {"content": {"text/event-stream": {}}}})
    async def events(
        work_id: str,
        last_event_id: Annotated[str | None, Header(max_length=64)] = None,
        after: Annotated[str | None, Query(max_length=64)] = None,
    ) -> EventSourceResponse:
        """Server-Sent Events: status, progress, checkpoint, output, gap and a final end.

        A ``checkpoint`` event names the attempt and the state's size in bytes,
        with the state itself when it is at most 4 KiB of JSON. Reconnect
        with ``Last-Event-ID`` (or ``?after=``) to resume where the last event left
        off, with nothing lost or repeated.
        """
        mark = last_event_id or after
        cursor = None if mark is None else Cursor.parse(mark)
        # The output file held open for the whole stream: a shell's goes at its end,
        # and a follower a few batches behind must still read what it wrote.
        hold = OutputHold(work_id)
        try:
            first = await backend.events(work_id, cursor, EVENT_CHUNK, hold)  # errors first
        except BaseException:
            hold.close()
            raise
        return EventSourceResponse(_follow(backend, work_id, first, hold), ping=15)

    @r.post("/{work_id}/cancel", status_code=202, response_model=Changed)
    async def cancel(work_id: str, body: Annotated[CancelBody | None, Body()] = None) -> Changed:
        """SIGTERM (or a cooperative cancel), SIGKILL after ``grace`` seconds."""
        changed = await backend.cancel(work_id, (body or CancelBody()).grace)
        return Changed(changed=changed, status=(await backend.get(work_id)).status.value)

    @r.post("/{work_id}/kill", status_code=202, response_model=Changed)
    async def kill(work_id: str) -> Changed:
        """SIGKILL the unit's process group now."""
        changed = await backend.kill(work_id)
        return Changed(changed=changed, status=(await backend.get(work_id)).status.value)

    @r.post("/{work_id}/signals", status_code=202, response_model=Delivered, responses={409: {}})
    async def signal(work_id: str, body: SignalBody) -> Response:
        """Send a signal to the unit's ``ctx.wait_for(name)``.

        Kept in the ledger until the unit takes it, whether it waits now, later,
        or in a later attempt. 409 once the unit has ended, 410 once it expired.
        """
        record = await backend.get(work_id)
        _refuse_expired(record)
        if not is_terminal(record.status) and await backend.signal(work_id, body.name, body.value):
            return JSONResponse(Delivered(delivered=True).model_dump(), 202)
        ended = await backend.get(work_id)  # it may have ended since the read above
        return problems.problem(
            409, "WorkEnded", f"{work_id} has ended: no signal is kept", unit=Unit.of(ended)
        )

    @r.post("/{work_id}/input", status_code=202, response_model=Delivered, responses={409: {}})
    async def send_input(work_id: str, body: InputBody) -> Response:
        """Write to the stdin of a unit started with ``stdin: true``, after what came before.

        Queued and written as the unit reads (at most 16 MiB may wait unread);
        ``eof: true`` closes its stdin after ``data``. 409 once the unit has
        ended, 400 for a unit started without ``stdin``.
        """
        try:
            data = (
                base64.b64decode(body.data, validate=True)
                if body.encoding == "base64"
                else body.data.encode()
            )
        except ValueError as exc:  # binascii.Error, non-ASCII base64, a lone surrogate
            raise SpecError(f"data is not {body.encoding} it can be read as: {exc}") from None
        if await backend.send_input(work_id, data, body.eof):
            return JSONResponse(Delivered(delivered=True).model_dump(), 202)
        ended = await backend.get(work_id)
        _refuse_expired(ended)
        return problems.problem(
            409, "WorkEnded", f"{work_id} has ended: its stdin is closed", unit=Unit.of(ended)
        )

    @r.post(
        "/{work_id}/retry",
        status_code=201,
        response_model=Unit,
        responses={200: {"model": Unit}, 409: {}},
    )
    async def retry(work_id: str) -> JSONResponse:
        """Start a failed or killed unit again as a new unit (``retry_of`` the old one).

        201 with the new unit; 200 with the same one when it was already retried;
        409 (NotRetryable) for a unit that did not fail or whose spec is gone.
        """
        record = await backend.get(work_id)
        _refuse_expired(record)
        again, created = await backend.retry(work_id)
        return _located(Unit.of(again), 201 if created else 200)

    @r.post("/{work_id}/retain", status_code=201, response_model=Lease)
    async def retain(
        work_id: str, request: Request, body: Annotated[LeaseBody | None, Body()] = None
    ) -> JSONResponse:
        """Keep the unit (and its output tail) while this lease is renewed."""
        lease = (body or LeaseBody()).lease
        lease_id = await backend.retain(work_id, lease, request.app.state.owner)
        out = Lease(lease_id=lease_id, unit=work_id, lease=lease)
        location = f"/v1/units/{work_id}/retain/{lease_id}"
        return JSONResponse(out.model_dump(), 201, headers={"Location": location})

    @r.put("/{work_id}/retain/{lease_id}", response_model=Lease)
    async def renew_retain(
        work_id: str, lease_id: str, body: Annotated[LeaseBody | None, Body()] = None
    ) -> Response:
        """Renew the lease from now; 404 once it lapsed or was released."""
        lease = (body or LeaseBody()).lease
        if not await backend.renew_retain(lease_id, lease, work_id):
            return problems.problem(404, "UnknownLease", f"no live retain lease {lease_id}")
        return JSONResponse(Lease(lease_id=lease_id, unit=work_id, lease=lease).model_dump())

    @r.delete("/{work_id}/retain/{lease_id}", status_code=204)
    async def release_retain(work_id: str, lease_id: str) -> Response:
        """Release the lease; 404 if it had already gone."""
        if not await backend.release_retain(lease_id, work_id):
            return problems.problem(404, "UnknownLease", f"no live retain lease {lease_id}")
        return Response(status_code=204)

    return r


def _schedule_out(info: ScheduleInfo) -> ScheduleOut:
    last = info.last
    return ScheduleOut(
        name=info.name,
        cron=info.cron,
        tz=info.tz,
        catch_up=info.catch_up,
        next_at=info.next_at,
        last=None
        if last is None
        else FiringOut(due_at=last.due_at, outcome=last.outcome, unit=last.unit),
    )


def _schedules(backend: Backend) -> APIRouter:
    r = APIRouter(prefix="/v1/schedules", tags=["schedules"])

    @r.get("", response_model=list[ScheduleOut])
    async def list_schedules() -> list[ScheduleOut]:
        """Every schedule by name, with its next due time and latest firing."""
        return [_schedule_out(info) for info in await backend.schedules()]

    @r.get("/{name}", response_model=ScheduleOut)
    async def get_schedule(name: ScheduleName) -> Response:
        """One schedule; 404 if there is none of that name."""
        for info in await backend.schedules():
            if info.name == name:
                return JSONResponse(_schedule_out(info).model_dump())
        return problems.problem(404, "UnknownSchedule", f"no schedule {name!r}")

    @r.put(
        "/{name}",
        status_code=201,
        response_model=ScheduleOut,
        responses={200: {"model": ScheduleOut}},
    )
    async def put_schedule(name: ScheduleName, body: ScheduleBody) -> JSONResponse:
        """Add the schedule (201) or replace it (200).

        The same schedule put again keeps its next due time, so firings missed
        while no supervisor ran are still recorded (or caught up).
        """
        info, created = await backend.put_schedule(name, body)
        location = f"/v1/schedules/{quote(name, safe='')}"
        out = _schedule_out(info).model_dump()
        return JSONResponse(out, 201 if created else 200, headers={"Location": location})

    @r.delete("/{name}", status_code=204)
    async def delete_schedule(name: ScheduleName) -> Response:
        """Stop the schedule (the units it started go on); 404 if there was none."""
        if not await backend.unschedule(name):
            return problems.problem(404, "UnknownSchedule", f"no schedule {name!r}")
        return Response(status_code=204)

    return r


def _refuse_expired(record: WorkRecord) -> None:
    if record.expired_at is not None:
        from workunits._core.errors import WorkExpired  # noqa: PLC0415 - only on this path

        raise WorkExpired(record)


def encode_event(ev: UnitEvent) -> ServerSentEvent:
    data: dict[str, Any]
    if ev.type == "output":
        data = {"offset": ev.cursor.offset - len(ev.output), "bytes": len(ev.output)}
        try:
            data["text"] = ev.output.decode()
        except UnicodeDecodeError:
            data["base64"] = base64.b64encode(ev.output).decode()
    else:
        data = ev.data
    return ServerSentEvent(data=orjson.dumps(data).decode(), event=ev.type, id=str(ev.cursor))


async def _follow(
    backend: Backend, work_id: str, first: Any, hold: OutputHold
) -> AsyncIterator[ServerSentEvent]:
    """Yield events until the end, waking at each change and polling output with backoff;
    then let go of the output file ``hold`` keeps open."""
    wake = asyncio.Event()
    stop = backend.listen(work_id, wake)
    try:
        batch = first
        delay = FOLLOW_MIN
        while True:
            for ev in batch.events:
                yield encode_event(ev)
            if batch.ended:
                return
            if backend.closing.is_set():
                return  # a shutdown: the client reconnects from the last event's ID
            if batch.events:
                delay = FOLLOW_MIN
            else:
                try:
                    await asyncio.wait_for(wake.wait(), delay)
                except TimeoutError:
                    delay = min(delay * 2, FOLLOW_MAX)
            wake.clear()  # before the read: a change after it sets it again
            batch = await backend.events(work_id, batch.cursor, EVENT_CHUNK, hold)
    finally:
        stop()
        hold.close()


def _notice_out(claim: NoticeClaim) -> NoticeOut:
    n = claim.notice
    return NoticeOut(
        id=n.id,
        token=claim.token,
        lease=claim.lease,
        kind=n.kind,
        status=n.status.value,
        exit_code=n.exit_code,
        signal=n.signal,
        error=n.error,
        reason=None if n.reason is None else n.reason.value,
        description=n.description,
        ended_at=n.ended_at,
        redelivered=n.redelivered,
    )


def _notices(backend: Backend, owner: str) -> APIRouter:
    r = APIRouter(prefix="/v1/notifications", tags=["notifications"])

    async def claim_within(
        parent: str | None, lease: float, wait: float, request: Request | None = None
    ) -> NoticeClaim | None:
        """A claim within ``wait`` seconds, or None. A client that goes away while it
        waits claims nothing, and one gone when its claim came gives the claim back:
        an abandoned long-poll holds no notice for its lease."""
        deadline = time.monotonic() + wait
        delay = FOLLOW_MIN
        while True:
            if backend.closing.is_set():
                raise ShuttingDown
            if request is not None and await request.is_disconnected():
                return None
            claim = await backend.claim(parent, owner, lease)
            if claim is not None and request is not None and await request.is_disconnected():
                await backend.release_claim(claim.notice.id, claim.token)
                return None
            left = deadline - time.monotonic()
            if claim is not None or left <= 0:
                return claim
            with contextlib.suppress(TimeoutError):  # a shutdown ends the wait at once
                await asyncio.wait_for(backend.closing.wait(), min(delay, left))
            delay = min(delay * 2, 0.25)

    @r.get("", response_model=NoticeOut, responses={204: {"description": "none within wait"}})
    async def take(
        request: Request,
        parent: Annotated[str | None, Query(max_length=64)] = None,
        lease: Annotated[float, Query(gt=0, le=MAX_CLAIM_LEASE)] = 30.0,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT)] = 0.0,
    ) -> Response:
        """Claim the oldest notice of ``parent`` (none: the application's).

        Long-polls up to ``wait`` seconds (204 if none came); with ``Accept:
        text/event-stream`` streams claims as they come. Each claim holds for
        ``lease`` seconds: ack it, renew it (PUT) or release it (DELETE).
        """
        if parent is not None:
            await backend.get(parent)  # 400 for a malformed ID, 404 for an unknown one
        if "text/event-stream" in request.headers.get("accept", ""):
            return EventSourceResponse(_stream_claims(claim_within, parent, lease), ping=15)
        claim = await claim_within(parent, lease, wait, request)
        if claim is None:
            return Response(status_code=204)
        location = f"/v1/notifications/{claim.notice.id}/claims/{quote(claim.token, safe='')}"
        return JSONResponse(_notice_out(claim).model_dump(), headers={"Location": location})

    @r.post("/{work_id}/ack")
    async def ack(work_id: str, body: TokenBody | None = None) -> Response:
        """Acknowledge: no consumer receives this notice again. 409 if the claim was lost.

        With the claim's ``token`` (its body), only that claim acknowledges; without
        one, the notice's claim, whoever holds it (a caller with the API's token may
        end any). A notice nobody claimed is claimed first (GET), then acknowledged.
        """
        if not await backend.ack(work_id, None if body is None else body.token):
            return problems.problem(
                409, "ClaimLost", f"{work_id}'s notice is not claimed (or no longer)"
            )
        return JSONResponse({"acknowledged": True})

    @r.put("/{work_id}/claims/{token}")
    async def renew(work_id: str, token: str, body: RenewBody | None = None) -> Response:
        """Extend the claim's lease from now. 409 if it was lost."""
        lease = 30.0 if body is None else body.lease
        if not await backend.renew_claim(work_id, token, lease):
            return problems.problem(409, "ClaimLost", f"the claim on {work_id}'s notice is gone")
        return JSONResponse({"renewed": True, "lease": lease})

    @r.delete("/{work_id}/claims/{token}", status_code=204)
    async def release(work_id: str, token: str) -> Response:
        """Give the notice back: it is delivered again, marked redelivered."""
        if not await backend.release_claim(work_id, token):
            return problems.problem(409, "ClaimLost", f"the claim on {work_id}'s notice is gone")
        return Response(status_code=204)

    return r


async def _stream_claims(
    claim_within: Any, parent: str | None, lease: float
) -> AsyncIterator[ServerSentEvent]:
    while True:
        claim = await claim_within(parent, lease, 15.0)
        if claim is not None:
            out = _notice_out(claim)
            yield ServerSentEvent(data=out.model_dump_json(), event="notice", id=out.id)


def _view(app: FastAPI) -> None:
    static = resources.files("workunits._http") / "static"

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(
            (static / "index.html").read_text(), headers={"Cache-Control": "no-store"}
        )

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
