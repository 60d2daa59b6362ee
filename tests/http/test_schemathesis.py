"""The OpenAPI document matches the server: schemathesis against a real ``serve --http``.

Every check schemathesis has (``--checks all``: status codes, content types,
response schemas and headers, positive and negative data, auth, unsupported
methods and their ``Allow``, stateful use-after-free...) over every operation,
with a fixed seed so a failure reproduces. ``schemathesis.toml`` beside this
file says what it configures, and why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http.server import Served

CONFIG = Path(__file__).with_name("schemathesis.toml")
SEED = 39
EXAMPLES = 25  # per operation and phase: ~1,500 requests, a few minutes on 2 cores

pytest.importorskip("schemathesis", reason="pip install schemathesis (the test extra)")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = Served(tmp_path / "state")
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_openapi_document_matches_the_server(served: Served, tmp_path: Path) -> None:
    st = shutil.which("st", path=os.path.dirname(sys.executable)) or "st"
    argv = [
        st,
        "--config-file",
        str(CONFIG),
        "run",
        f"{served.url}/openapi.json",
        "--checks",
        "all",
        "--seed",
        str(SEED),
        "--max-examples",
        str(EXAMPLES),
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--header",
        f"Authorization: Bearer {served.token}",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    run = subprocess.run(  # its cache goes into the working directory: the test's own
        argv, capture_output=True, text=True, timeout=850, check=False, cwd=tmp_path
    )
    summary = run.stdout[run.stdout.rfind("SUMMARY") :] if "SUMMARY" in run.stdout else run.stdout
    assert run.returncode == 0, f"schemathesis found failures:\n{run.stdout[-20000:]}{run.stderr}"
    selected = re.search(r"Selected: (\d+)/(\d+)", summary)
    assert selected is not None, summary
    assert selected[1] == selected[2], summary  # every operation of the document
    assert f"Tested: {selected[2]}" in summary, summary  # none skipped
    assert served.proc.poll() is None, "the server died under the fuzzer"
