from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ledger.support import ManualClock
from workunits._ledger import Ledger


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def ledger(state_dir: Path, clock: ManualClock) -> Iterator[Ledger]:
    with Ledger(state_dir, clock=clock, expire_after=100.0) as opened:
        yield opened
