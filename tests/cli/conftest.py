"""Fixtures for the CLI tests: a runner bound to one state dir, and the supervisor stand-in."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import workunits as wu
from tests.cli.live import Serve, Terminal
from tests.client_support import FakeSupervisor
from workunits._cli import cli


@dataclass
class Run:
    """``run("ls", "--all")``: the command on this test's state dir, in-process."""

    state: Path

    def __call__(
        self, *args: str, state: Path | None = None, input: str | None = None, columns: int = 80
    ) -> Result:
        runner = CliRunner()
        result = runner.invoke(
            cli,
            list(args),
            env={"WORKUNITS_STATE": str(state or self.state), "COLUMNS": str(columns)},
            input=input,
            catch_exceptions=True,
        )
        # Whatever happened, it happened on purpose: no traceback, ever.
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        assert "Traceback" not in result.stderr
        return result


@pytest.fixture
def run(state_dir: Path) -> Run:
    return Run(state_dir)


@pytest.fixture
def client(state_dir: Path) -> Iterator[wu.Client]:
    with wu.connect(state_dir) as opened:
        yield opened


@pytest.fixture
def fake(client: wu.Client) -> Iterator[FakeSupervisor]:
    supervisor = FakeSupervisor(client.state_dir)
    yield supervisor
    supervisor.close()


def one_line_error(result: Result, code: int, needle: str) -> None:
    """The command failed with ``code`` and said why in one line on stderr."""
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("workunits: "), lines[0]
    assert needle in lines[0], lines[0]


@pytest.fixture
def start_serve(state_dir: Path) -> Iterator[Callable[[], Serve]]:
    """Start ``workunits serve`` processes on the test's state dir.

    The finalizer ends every one still running (SIGTERM, then SIGKILL of its
    group if it lingers) and insists that each exited 0.
    """
    started: list[Serve] = []

    def start() -> Serve:
        serve = Serve(state_dir)
        started.append(serve)
        return serve

    yield start
    codes = [serve.stop() for serve in started]
    assert codes == [0] * len(started), f"workunits serve exited {codes}"


@pytest.fixture
def served(client: wu.Client, start_serve: Callable[[], Serve]) -> Serve:
    """One ``workunits serve`` on the test's state dir (whose ledger ``client`` made)."""
    return start_serve()


@pytest.fixture
def terminal() -> Iterator[Callable[..., Terminal]]:
    """Open ``Terminal``s running ``workunits`` commands; every one is closed at the end."""
    opened: list[Terminal] = []

    def open_terminal(*args: str, rows: int = 24, cols: int = 80) -> Terminal:
        term = Terminal(*args, rows=rows, cols=cols)
        opened.append(term)
        return term

    yield open_terminal
    for term in opened:
        term.close()
