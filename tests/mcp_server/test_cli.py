"""``workunits mcp``'s own errors: one line on stderr, exit 2, nothing on stdout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.mcp_server.harness import command, server_env

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--allow-target", "no_colon"], "--allow-target takes MODULE:FUNCTION"),
        (["--max-output", "10"], "--max-output must be between"),
        (["--max-running", "0"], "--max-running must be at least 1"),
        (["--sandbox", "wide"], "'wide' is not one of"),
        (["--http", "0.0.0.0:0"], "without TLS"),
        (["--tls-cert", __file__], "--tls-cert and --tls-key go together"),
        (["--connect", "http://127.0.0.1:9"], "needs that server's token"),
    ],
)
def test_bad_options_are_one_line_usage_errors(
    tmp_path: Path, options: list[str], needle: str
) -> None:
    done = subprocess.run(
        command(tmp_path / "s", *options),
        cwd=tmp_path,
        env=server_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert needle in lines[0]
