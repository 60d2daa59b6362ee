"""In a unit's process: its span's context, so the user's own spans nest under it.

The supervisor gives a unit's process its span's W3C ``traceparent`` when it
traces units (``supervisor.tracing``). Here it becomes the ``TRACEPARENT``
environment variable (for the commands the unit runs, and for code that reads
it) and, when OpenTelemetry is installed, the current context while the
unit's function runs. Without a ``traceparent`` nothing is imported.

The other way, ``current_traceparent`` is the span current where a unit asks
for a child (``ctx.agent``, ``ctx.shell``, ...): the supervisor makes it the
child's span's parent, so a child started inside a span of the user's own is
that span's child, as it is when submitted from the program's own process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span current in this thread, or None.

    Costs a dictionary lookup when OpenTelemetry is not loaded: a process that
    has no span has not imported it (``unit_span`` imports it for a traced unit).
    """
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace  # noqa: PLC0415 - loaded already (checked above)

    span = trace.get_current_span().get_span_context()
    if not span.is_valid:
        return None
    return f"00-{span.trace_id:032x}-{span.span_id:016x}-{int(span.trace_flags):02x}"


@contextlib.contextmanager
def unit_span(traceparent: str | None) -> Iterator[None]:
    """Run the unit's function with its span current (a no-op without one)."""
    if traceparent is None:
        yield
        return
    os.environ["TRACEPARENT"] = traceparent
    if importlib.util.find_spec("opentelemetry") is None:
        yield
        return
    from opentelemetry import context  # noqa: PLC0415 - only a traced unit pays for it
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        context.detach(token)
