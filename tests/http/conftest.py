"""Fixtures for the HTTP API tests: one real ``serve --http`` process per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the workunits[http] extra")
pytest.importorskip("httpx", reason="the HTTP tests need httpx (workunits[http])")

import httpx

from tests.http.server import Served


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    state = tmp_path_factory.mktemp("http") / "state"
    server = Served(state)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def api(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as client:
        yield client
