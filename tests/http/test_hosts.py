"""Which ``Host`` a server accepts, on a wildcard bind with an advertised URL."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.http.server import Served


@pytest.fixture(scope="module")
def wildcard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``serve --http 0.0.0.0:0 --advertise ...``, as the cluster guide shows."""
    state = tmp_path_factory.mktemp("hosts") / "state"
    extra = ("--http", "0.0.0.0:0", "--insecure", "--advertise", "http://agents-1.internal:8750")
    server = Served(state, *extra)  # the later --http wins
    try:
        yield server
    finally:
        server.stop()


def _status(served: Served, host: str) -> int:
    port = served.url.rsplit(":", 1)[1]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=served.auth, timeout=10) as c:
        return c.get("/v1/units", headers={"Host": host}).status_code


@pytest.mark.timeout(60)
def test_a_wildcard_bind_accepts_the_advertised_host_and_its_own_names(wildcard: Served) -> None:
    port = wildcard.url.rsplit(":", 1)[1]
    assert _status(wildcard, "agents-1.internal:8750") == 200
    assert _status(wildcard, "AGENTS-1.internal:8750") == 200  # names are case-blind
    for name in ("localhost", "127.0.0.1", socket.gethostname()):
        assert _status(wildcard, f"{name}:{port}") == 200, name


@pytest.mark.timeout(60)
def test_a_wildcard_bind_still_refuses_other_names(wildcard: Served) -> None:
    port = wildcard.url.rsplit(":", 1)[1]
    assert _status(wildcard, f"evil.test:{port}") == 421  # a DNS rebinding page's name
    assert _status(wildcard, "agents-1.internal:9999") == 421
    assert _status(wildcard, f"192.0.2.1:{port}") == 421  # an address of another machine
    assert _status(wildcard, "evil.test") == 421


@pytest.mark.timeout(60)
def test_a_wildcard_bind_accepts_its_own_addresses(wildcard: Served) -> None:
    port = wildcard.url.rsplit(":", 1)[1]
    assert _status(wildcard, f"127.0.0.2:{port}") == 200  # all of 127/8 is this machine's
    assert _status(wildcard, f"127.0.0.2:{int(port) + 1}") == 421
