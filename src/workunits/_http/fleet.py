"""What the web view needs beyond the units' own routes: changes, stats, details, notices.

- ``GET /v1/changes``: Server-Sent Events, one ``changed`` event (the IDs that
  changed, at most ``CHANGED_IDS`` of them) at most every ``COALESCE`` seconds
  while units change, and nothing else but a ping every 15 s. A view refreshes
  the page it shows when told, instead of reading lists on a timer: an idle
  tab costs the server nothing.
- ``GET /v1/stats``: units by status sampled every ``SAMPLE_EVERY`` seconds
  since the server started (at most ``SAMPLES``): queue depth, running units,
  and ends by status, for charts of throughput and failure rate.
- ``GET /v1/units/{id}/details``: what a unit's page shows beyond its record:
  its arguments, result, last checkpoint, attempts, signals, children and a
  timeline of what happened to it.
- ``GET /v1/notices``: notices waiting for a consumer, without claiming any.

All of it runs on the server's event loop; ledger reads go to worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from workunits._core.record import WorkRecord
from workunits._core.status import is_terminal
from workunits._http.backend import Backend
from workunits._ledger.rows import UnitRow
from workunits._util import strictjson
from workunits._wire.specs import Call, ShellSpec

COALESCE = 0.5
CHANGED_IDS = 100
SAMPLE_EVERY = 10.0
SAMPLE_AFTER_CHANGE = 2.0
SAMPLES = 360  # an hour of samples
NOTICES_SHOWN = 500
CHILDREN_SHOWN = 200
PROGRESS_SHOWN = 20  # progress reports on a timeline, sampled evenly, the last one too


class Stats:
    """Samples of the fleet's counts, taken on the server's loop: every ``SAMPLE_EVERY``
    seconds, and after changes (at most every ``SAMPLE_AFTER_CHANGE``), from its first
    request on."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.samples: deque[dict[str, float]] = deque(maxlen=SAMPLES)
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        backend.on_attach.append(self.ensure_started)

    def ensure_started(self) -> None:
        if self._task is None:
            loop = asyncio.get_running_loop()
            changed = self._changed

            def heard(work_id: str) -> None:  # the actor's thread: O(1)
                if not changed.is_set():
                    loop.call_soon_threadsafe(changed.set)

            self._stop = self._backend.sup.event_feed.listen_all(heard)
            self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            while not self._backend.closing.is_set():
                with contextlib.suppress(Exception):  # a busy ledger skips one sample
                    await self.sample()
                await asyncio.sleep(SAMPLE_AFTER_CHANGE)
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), SAMPLE_EVERY)
        finally:
            self._stop()

    async def sample(self) -> None:
        counts = await asyncio.to_thread(self._backend.unit_counts_now)
        by_status: dict[str, float] = {"t": time.time()}
        for (_, status), n in counts.items():
            by_status[status] = by_status.get(status, 0) + n
        self.samples.append(by_status)


def router(backend: Backend) -> APIRouter:
    r = APIRouter(tags=["view"])
    stats = Stats(backend)

    @r.get("/v1/changes", responses={200: {"content": {"text/event-stream": {}}}})
    async def changes() -> EventSourceResponse:
        """Server-Sent Events: ``changed`` (``{"ids": [...], "more": bool}``) while units
        change, coalesced to one event per half second; nothing while none does."""
        return EventSourceResponse(_changes(backend), ping=15)

    @r.get("/v1/stats")
    async def get_stats() -> JSONResponse:
        """Units by status over the last hour (a sample every 10 s since the server started):
        ``pending`` is the queue's depth; ends by status give throughput and failures."""
        if not stats.samples:
            await stats.sample()
        return JSONResponse({"every": SAMPLE_EVERY, "samples": list(stats.samples)})

    @r.get("/v1/notices")
    async def notices(
        limit: Annotated[int, Query(ge=1, le=NOTICES_SHOWN)] = NOTICES_SHOWN,
    ) -> JSONResponse:
        """Notices waiting for a consumer (not acknowledged), oldest first; none is claimed."""
        waiting = await asyncio.to_thread(backend.ledger.listing.waiting_notices, limit)
        return JSONResponse({"items": waiting})

    @r.get("/v1/units/{work_id}/details")
    async def details(work_id: str) -> JSONResponse:
        """A unit's arguments, result, checkpoint, attempts, signals, children and timeline."""
        record = await backend.get(work_id)
        row = await asyncio.to_thread(backend.ledger.units.require, work_id)
        body = await asyncio.to_thread(_details, backend, record, row)
        children = await backend.sup.list_async(parent=work_id, limit=CHILDREN_SHOWN)
        body["children"] = [
            {"id": c.id, "kind": c.kind, "status": c.shown_status, "description": c.description}
            for c in children
        ]
        return JSONResponse(orjson.loads(orjson.dumps(body, default=repr)))

    return r


async def _changes(backend: Backend) -> AsyncIterator[ServerSentEvent]:
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    changed: set[str] = set()
    more = [False]

    def heard(work_id: str) -> None:  # the actor's thread: O(1)
        first = not changed and not more[0]
        if len(changed) < CHANGED_IDS:
            changed.add(work_id)
        else:
            more[0] = True
        if first:
            loop.call_soon_threadsafe(woken.set)

    stop: Callable[[], None] = backend.sup.event_feed.listen_all(heard)
    try:
        yield ServerSentEvent(data="{}", event="ready")
        while not backend.closing.is_set():
            await woken.wait()
            await asyncio.sleep(COALESCE)  # gather what changes meanwhile into one event
            woken.clear()
            ids, changed_more = list(changed), more[0]
            changed.clear()
            more[0] = False
            data = orjson.dumps({"ids": ids, "more": changed_more}).decode()
            yield ServerSentEvent(data=data, event="changed")
    finally:
        stop()


def _arguments(spec: object) -> dict[str, Any]:
    if isinstance(spec, ShellSpec):
        return {"command": spec.describe(), "cwd": spec.cwd}
    if isinstance(spec, Call):
        fn = (
            spec.fn if isinstance(spec.fn, str) else getattr(spec.fn, "__qualname__", repr(spec.fn))
        )
        return {"target": fn, "args": list(spec.args), "kwargs": dict(spec.kwargs)}
    name = getattr(spec, "name", None)
    return {"target": name} if name else {"spec": type(spec).__name__}


def _json_or_none(data: bytes | None) -> Any:
    if data is None:
        return None
    with contextlib.suppress(Exception):
        return orjson.loads(data)
    return None


def _details(backend: Backend, record: WorkRecord, row: UnitRow) -> dict[str, Any]:
    """What the unit's page shows; a worker thread (reads the ledger, may load a spec)."""
    ledger = backend.ledger
    try:
        arguments: dict[str, Any] = _arguments(ledger.units.load_spec(record.id))
    except Exception as exc:  # noqa: BLE001 - an expired or unloadable spec is said, not fatal
        arguments = {"unavailable": str(exc)}
    result: Any = None
    has_result = False
    if record.status.value == "completed" and record.result_format == "json":
        with contextlib.suppress(Exception):
            result = strictjson.loads(record.result or b"null", record.id, "result")
            has_result = True
    checkpoint = _json_or_none(row.checkpoint)
    signals = ledger.listing.signals_of(record.id)
    attempts = [
        {
            "attempt": a.attempt,
            "ended_at": a.ended_at,
            "cause": a.describe(),
            "retry_at": a.retry_at,
        }
        for a in record.attempts
    ]
    timeline: list[dict[str, Any]] = [{"at": record.created_at, "what": "submitted"}]
    if record.started_at is not None:
        timeline.append({"at": record.started_at, "what": "started", "attempt": 1})
    for a in attempts:
        what = "retry" if a["retry_at"] is not None else "attempt ended"
        timeline.append({"at": a["ended_at"], "what": what, "detail": a["cause"]})
    if record.attempt > 1 and not attempts:
        timeline.append({"at": record.started_at, "what": "resumed", "attempt": record.attempt})
    if record.progress_at is not None:
        evidence = None if record.evidence is None else dict(record.evidence)
        detail = f"{round((record.progress or 0) * 100)}% {record.progress_message}".strip()
        timeline.append(
            {"at": record.progress_at, "what": "progress", "detail": detail, "evidence": evidence}
        )
    timeline += [
        {"at": s["at"], "what": "signal", "detail": str(s["name"]), "taken_at": s["taken_at"]}
        for s in signals
    ]
    history = backend.sup.event_feed.history(record.id)
    saved = [d for kind, d in history if kind == "checkpoint"]
    for d in saved:
        detail = f"attempt {d.get('attempt')}, {d.get('bytes')} bytes"
        timeline.append({"at": d.get("at"), "what": "checkpoint", "detail": detail})
    if checkpoint is not None and not saved:
        timeline.append({"at": record.progress_at or record.started_at, "what": "checkpoint"})
    reports = [d for kind, d in history if kind == "progress" and d.get("at")]
    step = max(1, len(reports) // PROGRESS_SHOWN)  # sampled: at most PROGRESS_SHOWN of them
    for d in reports[-1 - (PROGRESS_SHOWN - 1) * step :: step][:-1]:
        detail = f"{round((d.get('value') or 0) * 100)}% {d.get('message') or ''}".strip()
        timeline.append({"at": d["at"], "what": "progress", "detail": detail})
    if record.ended_at is not None:
        timeline.append({"at": record.ended_at, "what": "end", "detail": record.describe_end()})
    timeline.sort(key=lambda e: e["at"] or 0)
    ended = record.ended_at
    started = record.started_at
    return {
        "arguments": arguments,
        "has_result": has_result,
        "result": result,
        "checkpoint": checkpoint,
        "error": record.error,
        "attempts": attempts,
        "signals": signals,
        "timeline": timeline,
        "duration": None if started is None else (ended or time.time()) - started,
        "retried_by": ledger.units.retried_by(record.id),
        "can": {
            "cancel": not is_terminal(record.status),
            "kill": not is_terminal(record.status),
            "signal": not is_terminal(record.status),
            "retry": record.status.value in ("failed", "killed") and record.expired_at is None,
        },
    }
