from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ledger.support import ManualClock
from workunits._ledger import Ledger

BACKENDS = ("sqlite", "postgres")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Which database holds the ledger: every ledger test runs on each.

    A test marked ``sqlite_only`` (file modes, WAL, damaged files) skips PostgreSQL.
    """
    if request.param == "postgres" and request.node.get_closest_marker("sqlite_only"):
        pytest.skip("about the SQLite file itself")
    return str(request.param)


@pytest.fixture
def ledger_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """None for SQLite in the state dir; a fresh PostgreSQL database's URL otherwise."""
    if backend == "sqlite":
        return None
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def ledger(state_dir: Path, clock: ManualClock, ledger_url: str | None) -> Iterator[Ledger]:
    with Ledger(state_dir, clock=clock, expire_after=100.0, ledger=ledger_url) as opened:
        yield opened
