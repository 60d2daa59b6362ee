"""``workunits doctor`` names the containment mechanism in use and what it misses."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from workunits._cli import cli
from workunits._zygote import containment


def lines(tmp_path: Path) -> dict[str, str]:
    result = CliRunner().invoke(cli, ["doctor", "--state", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output
    return {line.split()[0]: line for line in result.output.splitlines()}


def test_doctor_reports_every_check(tmp_path: Path) -> None:
    found = lines(tmp_path)
    assert set(found) == {"containment", "pidfd", "subreaper", "filesystem", "fsync"}
    mechanism = "cgroup" if containment.probe().own is not None else "subreaper"
    assert f" {mechanism}: " in found["containment"]


def test_doctor_says_what_the_subreaper_chain_cannot_catch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(containment.ENV, "subreaper")
    line = lines(tmp_path)["containment"]
    assert "degraded" in line
    assert "subreaper: switched off" in line
    assert "another daemon" in line
