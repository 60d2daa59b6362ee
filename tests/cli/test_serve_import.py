"""serve --import, submit --workflow, Client.workflow and Supervisor.agent("mod:fn")."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import workunits as wu
from workunits._core.errors import SpecError

from .live import Serve, cli_argv, cli_env

REPO = Path(__file__).resolve().parent.parent.parent


def submit(state: Path, *args: str) -> str:
    done = subprocess.run(
        cli_argv("submit", "--state", str(state), "-q", *args),
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.timeout(120)
def test_serve_import_runs_workflows_that_need_the_import_first(tmp_path: Path) -> None:
    state = tmp_path / "state"
    work_id = submit(state, "--workflow", "plugin_jobs:double_steps", "--args", "[20]")
    assert work_id.startswith("w")
    with wu.connect(state) as client:
        by_client = client.workflow("plugin_jobs:double_steps", 1, key="one")
    serve = Serve(state, "--import", "tests.cli.serve_plugin")
    try:
        with wu.connect(state) as client:
            assert client.result(work_id, timeout=60) == 41
            assert client.result(by_client.id, timeout=60) == 3
            assert client.get(work_id).kind == "workflow"
    finally:
        assert serve.stop() == 0


@pytest.mark.timeout(60)
def test_serve_import_of_a_broken_module_says_which_and_why(tmp_path: Path) -> None:
    done = subprocess.run(
        cli_argv("serve", "--state", str(tmp_path / "s"), "--import", "no_such_module_here"),
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "--import no_such_module_here" in done.stderr
    assert "ModuleNotFoundError" in done.stderr


@pytest.mark.timeout(60)
def test_supervisor_agent_takes_an_import_reference_like_the_client(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        unit = sup.agent("tests.large_values_jobs:size_of", b"abc")
        assert sup.result(unit.id, timeout=30) == 3
        with pytest.raises(SpecError, match="no_such_module"):
            sup.agent("no_such_module:fn")
        with pytest.raises(SpecError, match="not an import reference"):
            sup.agent("not a reference")
