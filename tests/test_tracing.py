"""OpenTelemetry traces (``supervisor/tracing.py``), seen by the SDK's in-memory exporter.

The traced supervisor runs in a process of its own (``tests/tracing_host.py``):
a tracer provider is global to a process. Its units run in processes of their
own too, so the trace crosses three process boundaries: coordinator agent ->
sub-agent -> a span of the user's own inside it -> shell started in that span.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="pip install 'workunits[otel]'")

ROOT = Path(__file__).resolve().parents[1]


def _run(code: list[str], tmp_path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    for name in list(env):
        if name.startswith("OTEL_"):
            del env[name]
    done = subprocess.run(
        [sys.executable, *code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.mark.timeout(300)
def test_a_three_level_hierarchy_is_one_trace_across_processes(tmp_path: Path) -> None:
    out: dict[str, Any] = json.loads(
        _run(["-m", "tests.tracing_host", str(tmp_path / "s")], tmp_path)
    )
    spans = {s["attributes"].get("workunits.id", s["name"]): s for s in out["spans"]}
    coordinator, sub = spans[out["coordinator"]], spans[out["sub_agent"]]
    shell = spans[out["inside"]["shell"]]
    request = spans["request"]
    # One trace: the program's span, then each unit under the one that started it.
    assert {s["trace_id"] for s in (request, coordinator, sub, shell)} == {request["trace_id"]}
    assert coordinator["parent_span_id"] == request["span_id"]  # submitted inside it
    assert sub["parent_span_id"] == coordinator["span_id"]
    # The shell was asked for inside the user's span in the sub-agent's process: it is
    # that span's child; the agent asked for after it is the sub-agent's unit's child.
    assert shell["parent_span_id"] == out["inside"]["span_id"]
    assert spans[out["inside"]["batched"]]["parent_span_id"] == out["inside"]["span_id"]
    outside = spans[out["inside"]["outside"]]
    assert outside["parent_span_id"] == sub["span_id"]
    assert outside["trace_id"] == request["trace_id"]
    assert (coordinator["name"], sub["name"], shell["name"]) == (
        "workunit agent",
        "workunit agent",
        "workunit shell",
    )
    assert shell["attributes"]["workunits.status"] == "completed"
    assert shell["attributes"]["workunits.parent"] == out["sub_agent"]
    assert sub["attributes"]["workunits.kind"] == "agent"
    # The user's own span inside the sub-agent's process nests under its unit's span,
    # and the shell got its own span as TRACEPARENT.
    assert out["inside"]["trace_id"] == request["trace_id"]
    assert out["inside"]["parent_span_id"] == sub["span_id"]
    assert f"{shell['trace_id']}-{shell['span_id']}" in out["shell_output"]
    # A unit handed over at a deploy continues its trace in the next supervisor.
    handed = [s for s in out["spans"] if s["attributes"].get("workunits.id") == out["handed"]]
    first, resumed = sorted(handed, key=lambda s: bool(s["attributes"].get("workunits.resumed")))
    assert out["resumed_attempt"] == 2
    assert first["attributes"]["workunits.handed_over"] is True
    assert resumed["trace_id"] == first["trace_id"]
    assert resumed["parent_span_id"] == first["span_id"]
    assert resumed["attributes"]["workunits.status"] == "completed"


def test_nothing_is_imported_without_a_tracer(tmp_path: Path) -> None:
    code = (
        "import sys, workunits as wu\n"
        f"with wu.Supervisor({str(tmp_path / 's')!r}, install_signal_handlers=False) as sup:\n"
        "    sup.wait(sup.shell('true').id, timeout=60)\n"
        "    sup.result(sup.agent(abs, -1).id, timeout=60)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    assert _run(["-c", code], tmp_path).strip() == "[]"
