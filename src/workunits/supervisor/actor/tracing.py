"""OpenTelemetry traces of units (the ``workunits[otel]`` extra): one span per unit.

**No cost without it.** ``UnitSpans.start`` returns None, importing nothing,
unless a tracer provider is given (``Supervisor(tracer_provider=)``), the
program set a global one (it has imported OpenTelemetry then), or the standard
``OTEL_*`` variables ask for an exporter; the supervisor then holds None, and
the paths a unit takes gain one ``is None`` test. ``submitter_context`` is the
caller side's one line of it.

**With it**, each unit is a span named ``workunit <kind>``, from its submit
(``created_at``) to its end (``ended_at``), with the unit's ID, kind,
description, parent and key, its status, reason, exit code and error as
attributes (status ERROR for a failure or a kill), and an event per
attempt (its cause: a retry's error, a resume, a hand-over). Its parent:

1. the span current in the thread that submitted it (``submitter_context``;
   for a child a unit asks for, the span current in the unit's process, sent
   with its spawn request), so a unit submitted inside a user's span is that
   span's child, in the program's process or inside an agent;
2. else the span of its parent unit: children are child spans across processes;
3. else none: a new trace.

The span's context (a W3C ``traceparent``) is written to the unit's ledger
row (``trace_context``, schema version 9). A unit resumed by a later
supervisor (the one that started it died, or handed it over at a deploy)
gets a span of its own in the same trace, a child of the first: it continues
its trace. The unit's process is given the context as ``TRACEPARENT`` (a
command's environment; an agent's runtime attaches it as the current
context, ``_runtime.tracing``), so a user's spans inside it nest under it.

The spans live on the SupervisorActor's thread (``on_change``, a change
subscriber, O(1) per change); ``traceparent`` answers any thread.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from workunits._core.record import WorkRecord
from workunits._core.status import Status, is_terminal
from workunits._ledger import Ledger, Write
from workunits._unit.tracing import current_traceparent

log = logging.getLogger(__name__)

# Asking for an exporter: the variables OpenTelemetry's own auto-configuration reads.
EXPORTER_VARIABLES = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def _asked_by_environment() -> bool:
    """Whether the ``OTEL_*`` variables ask for an exporter (nothing imported)."""
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "")
    if exporter == "none" or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return any(os.environ.get(name) for name in EXPORTER_VARIABLES)


def submitter_context() -> str | None:
    """The ``traceparent`` of the span current in this thread, or None (caller side;
    a unit's process sends its own with a spawn request, ``_unit.tracing``).

    Costs a dictionary lookup when OpenTelemetry is not loaded.
    """
    return current_traceparent()


def _traceparent(ctx: Any) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _context_of(traceparent: str) -> Any:
    """An OpenTelemetry context whose current span is the one ``traceparent`` names."""
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def _provider() -> Any:
    """The tracer provider the program set globally, else one built from the ``OTEL_*``
    variables when they ask for one, else None. Imports only what is loaded or asked for."""
    if "opentelemetry.trace" in sys.modules:
        from opentelemetry import trace  # noqa: PLC0415 - loaded already

        provider = trace.get_tracer_provider()
        if type(provider).__name__ != "ProxyTracerProvider":
            return provider  # the program's own
    if not _asked_by_environment():
        return None
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        ConsoleSpanExporter,
    )

    built = TracerProvider(resource=Resource.create({"service.name": "workunits"}))
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
    if exporter_name == "console":
        built.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )

        built.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return built


class UnitSpans:
    """The open span of each unit in memory, and their contexts for its children."""

    def __init__(self, tracer: Any, ledger: Ledger) -> None:
        self._tracer = tracer
        self._ledger = ledger
        self._spans: dict[str, Any] = {}  # work_id -> its open span (actor thread only)
        self._given: dict[str, str] = {}  # work_id -> its submitter's traceparent
        self._lock = threading.Lock()  # guards _contexts: read by launches' threads
        self._contexts: dict[str, str] = {}  # work_id -> its span's traceparent

    @classmethod
    def start(cls, ledger: Ledger, provider: Any = None) -> UnitSpans | None:
        """The spans of a supervisor: ``provider``'s, else the program's global one, else
        one the ``OTEL_*`` variables ask for; None (nothing imported) when none is."""
        if provider is None:
            try:
                provider = _provider()
            except ImportError as exc:
                log.warning(
                    "OTEL_* asks for traces, but %s: pip install 'workunits[otel]'; no traces", exc
                )
                return None
        if provider is None:
            return None
        return cls(provider.get_tracer("workunits"), ledger)

    # -- the actor's thread ----------------------------------------------------------

    def given(self, work_id: str, traceparent: str | None) -> None:
        """The span current where ``work_id`` was submitted (before its record is in)."""
        if traceparent is not None:
            self._given[work_id] = traceparent

    def on_change(self, old: WorkRecord | None, new: WorkRecord) -> None:
        """Change subscriber: a span opens as a unit enters memory and ends with it."""
        span = self._spans.get(new.id)
        if old is None and span is None:
            span = self._open(new)
        if span is None:
            return
        if old is not None and new.attempt != old.attempt:
            cause = new.attempts[-1].describe() if new.attempts else "resumed"
            span.add_event("attempt", {"workunits.attempt": new.attempt, "workunits.cause": cause})
        if is_terminal(new.status) and (old is None or not is_terminal(old.status)):
            self._end(new, span)

    def close(self, handed_over: bool) -> None:
        """At the supervisor's stop: end the spans of units still running (handed over
        to the next supervisor at a deploy, whose spans continue the trace)."""
        for work_id, span in list(self._spans.items()):
            span.set_attribute("workunits.handed_over", handed_over)
            span.end()
            del self._spans[work_id]

    def _open(self, record: WorkRecord) -> Any:
        from opentelemetry import trace  # noqa: PLC0415 - loaded (start imported it)

        row = self._ledger.units.get(record.id)
        earlier = None if row is None else row.trace_context
        given = self._given.pop(record.id, None)
        parent = earlier or given or (record.parent and self._context_or_row(record.parent))
        context = _context_of(parent) if parent else None
        span = self._tracer.start_span(
            f"workunit {record.kind}",
            context=context,
            kind=trace.SpanKind.INTERNAL,
            start_time=int((record.created_at if earlier is None else self._now()) * 1e9),
            attributes={
                "workunits.id": record.id,
                "workunits.kind": record.kind,
                "workunits.description": record.description,
                "workunits.attempt": record.attempt,
                **({"workunits.parent": record.parent} if record.parent else {}),
                **({"workunits.resumed": True} if earlier else {}),
                **({"workunits.key": row.key} if row is not None and row.key else {}),
            },
        )
        mine = _traceparent(span.get_span_context())
        self._spans[record.id] = span
        with self._lock:
            self._contexts[record.id] = mine
        if earlier is None and row is not None:
            try:
                self._ledger.attempts.write_many(
                    [Write(record.id, record.attempt, {"trace_context": mine})]
                )
            except Exception as exc:  # noqa: BLE001 - a trace is never worth a unit
                log.warning("could not keep %s's trace context: %s", record.id, exc)
        return span

    def _end(self, record: WorkRecord, span: Any) -> None:
        from opentelemetry.trace import Status as SpanStatus  # noqa: PLC0415
        from opentelemetry.trace import StatusCode  # noqa: PLC0415

        attributes: dict[str, Any] = {"workunits.status": record.status.value}
        if record.reason is not None:
            attributes["workunits.reason"] = record.reason.value
        if record.exit_code is not None:
            attributes["workunits.exit_code"] = record.exit_code
        if record.error:
            attributes["workunits.error"] = record.error[:4096]
        span.set_attributes(attributes)
        if record.status is not Status.COMPLETED:
            span.set_status(SpanStatus(StatusCode.ERROR, record.describe_end()))
        ended = record.ended_at
        span.end(end_time=None if ended is None else int(ended * 1e9))
        del self._spans[record.id]
        with self._lock:
            self._contexts.pop(record.id, None)

    def _context_or_row(self, work_id: str) -> str | None:
        with self._lock:
            found = self._contexts.get(work_id)
        if found is not None:
            return found
        row = self._ledger.units.get(work_id)
        return None if row is None else row.trace_context

    @staticmethod
    def _now() -> float:
        import time  # noqa: PLC0415

        return time.time()

    # -- any thread -------------------------------------------------------------------

    def traceparent(self, work_id: str) -> str | None:
        """The unit's span context, for its process (``TRACEPARENT``)."""
        with self._lock:
            return self._contexts.get(work_id)
