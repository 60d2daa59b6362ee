"""A supervisor traced into the SDK's in-memory exporter, in a process of its own.

    python -m tests.tracing_host STATE_DIR  ->  JSON of every finished span, on stdout

Its own process: a tracer provider is global to a process, and the test suite's
other supervisors must not be traced. It runs a coordinator agent (submitted
inside a span of the program's own) that starts a sub-agent, which opens a span
of the user's own and starts a shell inside it and an agent after it; then a
unit handed over at a deploy and resumed by the next supervisor.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import workunits as wu
from tests import upgrade_jobs


def sub_agent() -> dict[str, str]:
    """Inside the unit's process: a span of the user's own with a shell child started
    inside it, and an agent child started outside it."""
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    ctx = wu.current()
    with trace.get_tracer("user").start_as_current_span("user work") as span:
        shell = ctx.shell("echo traced $TRACEPARENT")
        ctx.wait(shell, timeout=60)
        (batched,) = ctx.submit_many([wu.AgentCall(abs, (-2,))])  # a batch, inside it too
        ctx.wait(batched, timeout=60)
        parent = getattr(span, "parent", None)  # the SDK's span has it; the API's type not
    outside = ctx.agent(abs, -1)
    ctx.wait(outside, timeout=60)
    return {
        "trace_id": f"{span.get_span_context().trace_id:032x}",
        "span_id": f"{span.get_span_context().span_id:016x}",
        "parent_span_id": "" if parent is None else f"{parent.span_id:016x}",
        "shell": shell.id,
        "batched": batched.id,
        "outside": outside.id,
    }


def coordinator() -> dict[str, str]:
    ctx = wu.current()
    child = ctx.agent(sub_agent)
    inside: dict[str, str] = ctx.result(child, timeout=120)
    return inside


def _span(s: Any) -> dict[str, Any]:
    return {
        "name": s.name,
        "trace_id": f"{s.context.trace_id:032x}",
        "span_id": f"{s.context.span_id:016x}",
        "parent_span_id": None if s.parent is None else f"{s.parent.span_id:016x}",
        "attributes": dict(s.attributes),
        "events": [e.name for e in s.events],
        "status": s.status.status_code.name,
    }


def main(state: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("program")
    out: dict[str, Any] = {}
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        with tracer.start_as_current_span("request") as request:
            top = sup.agent(coordinator)
        out["request"] = f"{request.get_span_context().span_id:016x}"
        out["inside"] = sup.result(top.id, timeout=120)
        out["coordinator"] = top.id
        out["sub_agent"] = next(r.id for r in sup.list(parent=top.id))
        out["shell_output"] = sup.get(out["inside"]["shell"]).output_tail.decode()
    first = wu.Supervisor(state, install_signal_handlers=False)
    try:
        handed = first.agent(upgrade_jobs.survive, 7)  # by reference: it can resume
        with wu.connect(state) as client:
            for _ in range(6000):
                if client.row(handed.id).checkpoint is not None:
                    break
                time.sleep(0.01)  # polling the ledger with a bound
    finally:
        first.close(deploy=True)
    with wu.Supervisor(state, install_signal_handlers=False) as second:
        out["resumed_attempt"] = second.result(handed.id, timeout=120)["attempt"]
    out["handed"] = handed.id
    out["spans"] = [_span(s) for s in exporter.get_finished_spans()]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
