"""The HTTP protocol's edges (issue 39, item 4), against a real ``serve --http``.

Read timeouts and the per-client cap run with short settings (``serve``'s
hidden ``--http-limits``), so a slow client is seen to be cut in seconds.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.http.server import Served

WILDCARD = "0.0.0.0"  # noqa: S104 - a wildcard bind is what is tested


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server with a 1 s header timeout, a 2 s body timeout and 8 connections per client."""
    server = Served(tmp_path_factory.mktemp("tight") / "state", "--http-limits", "1,2,8")
    try:
        yield server
    finally:
        server.stop()


def _connect(served: Served) -> socket.socket:
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


@pytest.mark.timeout(60)
def test_slow_headers_get_408_and_the_connection_closes(tight: Served) -> None:
    host = tight.url.removeprefix("http://")
    with _connect(tight) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n".encode())  # never ends
        started = time.monotonic()
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert time.monotonic() - started < 10


@pytest.mark.timeout(60)
def test_a_body_that_never_arrives_is_cut_off(tight: Served) -> None:
    host = tight.url.removeprefix("http://")
    with _connect(tight) as sock:
        sock.sendall(
            f"POST /v1/units HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {tight.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n".encode()
            + b"{" * 1000
        )
        started = time.monotonic()
        answer = _read_all(sock)
    assert time.monotonic() - started < 10  # not for ever
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:80]


@pytest.mark.timeout(90)
def test_one_client_holds_a_bounded_number_of_connections(tmp_path: Path) -> None:
    capped = Served(tmp_path / "state", "--http-limits", "60,60,8")
    host = capped.url.removeprefix("http://")
    busy = []
    try:
        idle = _connect(capped)  # connected, nothing sent: the one given up for a new one
        busy.append(idle)
        for _ in range(7):  # with it, the cap; each one mid-request (not idle)
            sock = _connect(capped)
            sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n".encode())
            busy.append(sock)
        with _connect(capped) as eighth:  # takes the idle one's place
            eighth.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n".encode())
            assert _read_all(idle) == b""  # closed
            busy.append(_connect(capped))  # no idle one left to give up
            with _connect(capped) as extra:
                answer = _read_all(extra)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:80]
        assert b"retry-after" in answer.lower()
    finally:
        for sock in busy:
            sock.close()
        capped.stop()


def test_only_the_health_check_and_the_login_exchange_need_no_token(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as bare:
        assert bare.get("/healthz").status_code == 200
        assert bare.get("/").status_code == 401
        for query in ("xtoken=1", "login=", "token=", "a=token%3D"):
            r = bare.get(f"/?{query}")
            assert r.status_code == 401, (query, r.status_code)
        assert bare.get("/healthz/x").status_code == 401
        ok = bare.get(f"/?token={served.token}")
        assert ok.status_code == 303
        assert "set-cookie" in ok.headers


def test_405_names_every_method_of_the_path(served: Served) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        r = api.request("PATCH", "/v1/units/b00000000/retain/x")
        assert r.status_code == 405
        assert set(r.headers["allow"].split(", ")) == {"DELETE", "PUT"}
        r = api.request("DELETE", "/v1/units")
        assert set(r.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}


@pytest.mark.parametrize(
    "body",
    [{"grace": "5"}, {"grace": False}, {"grace": None}, {"grace": [5]}],
)
def test_body_fields_are_strict(served: Served, body: dict[str, object]) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        unit = api.post("/v1/units", json={"kind": "shell", "command": "sleep 30"}).json()
        try:
            r = api.post(f"/v1/units/{unit['id']}/cancel", json=body)
            assert r.status_code == 422, r.text
            assert r.headers["content-type"] == "application/problem+json"
        finally:
            api.post(f"/v1/units/{unit['id']}/kill")


def test_the_same_mistake_gets_the_same_status_everywhere(served: Served) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        for path, params in (
            ("/v1/units/not-an-id", {}),
            ("/v1/units", {"parent": "not-an-id"}),
            ("/v1/units", {"after": "not-an-id"}),
            ("/v1/notifications", {"parent": "not-an-id"}),
        ):
            assert api.get(path, params=params).status_code == 400, (path, params)
        for path, params in (
            ("/v1/units/b00000000", {}),
            ("/v1/units", {"parent": "b00000000"}),
            ("/v1/units", {"after": "b00000000"}),
            ("/v1/notifications", {"parent": "b00000000"}),
        ):
            assert api.get(path, params=params).status_code == 404, (path, params)


def test_an_abandoned_long_poll_gives_its_claim_back(served: Served) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=60) as api:
        parent = api.post("/v1/units", json={"kind": "shell", "command": "sleep 60"}).json()["id"]

        def abandon() -> None:
            with pytest.raises(httpx.TimeoutException):
                httpx.get(
                    f"{served.url}/v1/notifications",
                    params={"parent": parent, "wait": 30, "lease": 600},
                    headers=served.auth,
                    timeout=1.0,
                )

        gone = threading.Thread(target=abandon)
        gone.start()
        gone.join(10)
        child = api.post(
            "/v1/units", json={"kind": "shell", "command": "true", "parent": parent}
        ).json()["id"]
        api.get(f"/v1/units/{child}/result", params={"wait": 30})
        # The poll whose client left claims nothing: this one gets the notice now.
        r = api.get("/v1/notifications", params={"parent": parent, "wait": 20})
        assert r.status_code == 200, r.status_code
        assert r.json()["id"] == child
        api.post(f"/v1/units/{parent}/kill")


def test_metrics_by_route_template_and_of_the_process(served: Served) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        unit = api.post("/v1/units", json={"kind": "shell", "command": "true"}).json()["id"]
        api.get(f"/v1/units/{unit}")
        text = api.get("/metrics").text
    assert 'route="/v1/units/{work_id}"' in text
    assert unit not in text  # never a unit's ID as a label
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"):
        assert name in text, name
    assert "workunits_http_request_seconds_bucket" in text


@pytest.mark.timeout(90)
def test_shutdown_answers_in_flight_long_polls_503_with_retry_after(tmp_path: Path) -> None:
    server = Served(tmp_path / "state")
    try:
        with httpx.Client(base_url=server.url, headers=server.auth, timeout=60) as api:
            unit = api.post("/v1/units", json={"kind": "shell", "command": "sleep 60"}).json()
            answers: list[httpx.Response] = []
            polls = [
                threading.Thread(
                    target=lambda path=path: answers.append(api.get(path, params={"wait": 50}))
                )
                for path in (f"/v1/units/{unit['id']}/result", "/v1/notifications")
            ]
            for poll in polls:
                poll.start()
            deadline = time.monotonic() + 30
            while _in_flight(api, "/v1/notifications") < 1 or (
                _in_flight(api, "/v1/units/{work_id}/result") < 1
            ):  # both polls are waiting in the server now
                assert time.monotonic() < deadline, "the polls never arrived"
            server.proc.send_signal(signal.SIGTERM)
            for poll in polls:
                poll.join(30)
        assert sorted(r.status_code for r in answers) == [503, 503], [r.text for r in answers]
        assert all(r.headers.get("retry-after") for r in answers)
    finally:
        server.stop()


def _in_flight(api: httpx.Client, route: str) -> float:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith(f'workunits_http_requests_in_flight{{route="{route}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_wildcard_bind_warns_and_advertises_no_wildcard(tmp_path: Path) -> None:
    server = Served(tmp_path / "state", "--insecure", bind=f"{WILDCARD}:0")
    try:
        log = server.log.read_text()
        assert "warning: listening on every address" in log
        assert WILDCARD not in server.url
        assert WILDCARD not in (tmp_path / "state" / "http.url").read_text()
        with httpx.Client(base_url=server.url, timeout=30) as bare:
            assert bare.get("/healthz").status_code == 200
    finally:
        server.stop()
