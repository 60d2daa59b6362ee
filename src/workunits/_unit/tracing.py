"""In a unit's process: its span's context, so the user's own spans nest under it.

The supervisor gives a unit's process its span's W3C ``traceparent`` when it
traces units (``supervisor.tracing``). Here it becomes the ``TRACEPARENT``
environment variable (for the commands the unit runs, and for code that reads
it) and, when OpenTelemetry is installed, the current context while the
unit's function runs. Without a ``traceparent`` nothing is imported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator


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
