"""``wu.connect("http://...", token=...)``: the Client calls over HTTP, sync and async."""

from __future__ import annotations

import asyncio
import math
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import workunits as wu
from tests.http.server import Served
from workunits._client.http_client import HttpClient


@pytest.fixture
def client(served: Served) -> Iterator[HttpClient]:
    with wu.connect(served.url, token=served.token) as client:
        yield client


def test_same_calls_as_the_ledger_client(client: HttpClient) -> None:
    with client:
        h = client.shell("echo hello", key="client-1")
        assert h.created
        assert client.shell("echo hello", key="client-1").id == h.id
        assert not client.shell("echo hello", key="client-1").created
        record = h.wait(timeout=20)
        assert record.status is wu.Status.COMPLETED
        assert isinstance(h.result(), wu.WorkRecord)
        assert b"".join(client.stream(h.id)) == b"hello\n"
        assert client.agent("tests.http.units:add", 20, 22).result(timeout=20) == 42
        from tests.http import units  # noqa: PLC0415

        assert client.agent(units.add, 1, b=2).result(timeout=20) == 3
        assert h.id in {r.id for r in client.list(kind="shell")}
        assert client.get(h.id).id == h.id


def test_same_errors_as_the_python_api(client: HttpClient) -> None:
    with client:
        with pytest.raises(wu.InvalidWorkId, match="is not a work unit ID"):
            client.get("nope")
        with pytest.raises(wu.UnknownWork):
            client.get("b00000000")
        failing = client.agent("tests.http.units:boom", "bad input")
        with pytest.raises(wu.WorkFailed, match="bad input") as failed:
            failing.result(timeout=20)
        assert failed.value.record.status is wu.Status.FAILED
        assert failing.wait(timeout=20).status is wu.Status.FAILED  # wait returns, result raises
        slow = client.shell("sleep 30")
        with pytest.raises(wu.NotFinished):
            slow.wait(timeout=0.2)
        assert slow.cancel(grace=0.2)
        with pytest.raises(wu.WorkKilled):
            slow.result(timeout=20)
        assert not slow.kill()
        client.shell("echo a", key="conflict")
        with pytest.raises(wu.IdempotencyConflict):
            client.shell("echo b", key="conflict")
        with pytest.raises(wu.SpecError, match="import reference"):
            client.agent(lambda: 1)


def test_async_twins(served: Served) -> None:
    async def main() -> None:
        async with wu.connect(served.url, token=served.token) as client:
            h = await client.agent_async("tests.http.units:add", 2, 2)
            assert await client.result_async(h.id, timeout=20) == 4
            s = await client.shell_async("sleep 30")
            assert await client.kill_async(s.id)
            record = await client.wait_async(s.id, timeout=20)
            assert record.status is wu.Status.KILLED
            assert (await client.get_async(s.id)).id == s.id
            retain = await client.retain_async(s.id, lease=30)
            assert await asyncio.to_thread(retain.release)  # it was held
            await client.retain_async(s.id, lease=30)  # kept by the client, ended by ID
            assert await client.release_async(s.id) is True
            assert await client.release_async(s.id) is False

    asyncio.run(main())


def test_connect_async_reaches_an_address_as_connect_does(served: Served, tmp_path: Path) -> None:
    async def main() -> wu.Status:
        client = await wu.connect_async(served.url, token=served.token)
        assert isinstance(client, HttpClient)
        async with client:
            unit = await client.shell_async("true")
            return (await client.wait_async(unit.id, timeout=20)).status

    assert asyncio.run(main()) is wu.Status.COMPLETED


def test_connect_async_refuses_an_address_without_a_token_and_makes_no_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # it made ./http:/host:port/ with a ledger in it
    with pytest.raises(wu.SpecError, match="needs token="):
        asyncio.run(wu.connect_async("http://127.0.0.1:9"))
    assert list(tmp_path.iterdir()) == []


def test_connect_needs_a_token_for_an_address() -> None:
    with pytest.raises(wu.SpecError, match="needs token="):
        wu.connect("http://127.0.0.1:1")
    for empty in ("", "  ", "a\nb"):  # refused at once, not as a header at the first call
        with pytest.raises(wu.SpecError, match="token must be the server's bearer token"):
            wu.connect("http://127.0.0.1:1", token=empty)


@pytest.mark.parametrize(
    "crafted", ["{a}/../{b}", "../../metrics", "", "{a}/", "{a}?x=1", "{a}%2F..%2F{b}"]
)
def test_an_id_is_checked_before_it_goes_into_a_url(client: HttpClient, crafted: str) -> None:
    """Unchecked, 'a…/../b…' was b's route: kill(that) killed b and left a running."""
    with client:
        a, b = client.shell("sleep 30"), client.shell("sleep 30")
        work_id = crafted.format(a=a.id, b=b.id)
        try:
            for call in (client.get, client.kill, client.retain, lambda i: client.signal(i, "n")):
                with pytest.raises(wu.InvalidWorkId):
                    call(work_id)
            with pytest.raises(wu.InvalidWorkId):
                client.stream(work_id)
            assert client.get(b.id).status is wu.Status.RUNNING
        finally:
            a.kill()
            b.kill()


def test_import_workunits_loads_no_http_dependency() -> None:
    code = (
        "import sys, workunits as wu; wu.Supervisor; wu.connect; import workunits._cli; "
        "bad = [m for m in ('fastapi', 'uvicorn', 'sse_starlette', 'prometheus_client', 'httpx', "
        "'starlette', 'pydantic') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_non_loopback_bind_is_refused_without_tls(tmp_path: Path) -> None:
    from workunits._http.server import HttpServer  # noqa: PLC0415

    with wu.Supervisor(tmp_path / "s", install_signal_handlers=False) as sup:
        with pytest.raises(wu.SpecError, match="not a loopback address, without TLS"):
            HttpServer(sup, "0.0.0.0", 0)  # noqa: S104 - refused before anything binds
        assert not (tmp_path / "s" / "http.token").exists()
        server = HttpServer(sup, "127.0.0.1", 0)
        server.start()
        try:
            assert (tmp_path / "s" / "http.token").stat().st_mode & 0o777 == 0o600
        finally:
            server.stop()


def test_expired_unit_is_410(tmp_path: Path) -> None:
    import httpx  # noqa: PLC0415

    from workunits._http.server import HttpServer  # noqa: PLC0415

    with wu.Supervisor(
        tmp_path / "s", install_signal_handlers=False, expire_after=0.01, eviction_grace=0
    ) as sup:
        h = sup.shell("true")
        h.wait(timeout=20)
        sup.notifications().get(timeout=5)  # acknowledged: it may leave memory
        server = HttpServer(sup, "127.0.0.1", 0)
        server.start()
        try:
            token = (tmp_path / "s" / "http.token").read_text().strip()
            with httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {token}"}
            ) as api:
                for _ in range(200):  # bounded: until retention has run out
                    # Expire what is due, but forget nothing: an expired row is forgotten
                    # (404) expire_after = 10 ms later, a race on a loaded machine.
                    sup.gc(older_than=3600)
                    r = api.get(f"/v1/units/{h.id}")
                    if r.status_code == 410:
                        break
                    sup.tick()
                assert r.status_code == 410
                assert r.json()["title"] == "WorkExpired"
                assert r.json()["detail"].startswith(f"{h.id} has expired")
        finally:
            server.stop()


@pytest.mark.timeout(120)
def test_a_live_stream_gets_every_byte_of_a_burst_that_ends_the_unit(
    client: HttpClient, tmp_path: Path
) -> None:
    """The server held no file between its 64 KiB batches: a shell that wrote faster
    and ended left the follower its tail and a gap (8 of 8 in an audit)."""
    gate = tmp_path / "gate"
    size = 4 << 20
    command = f"echo start; while [ ! -e {gate} ]; do sleep 0.01; done; head -c {size} /dev/zero"
    with client:
        unit = client.shell(command)
        stream = client.stream(unit.id)
        first = next(stream)  # the stream is live before the burst
        gate.touch()
        got = first + b"".join(stream)
        assert len(got) == len(b"start\n") + size
        assert client.get(unit.id).output_bytes == len(got)


def test_a_server_that_cannot_be_reached_is_a_workunits_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with wu.connect(f"http://127.0.0.1:{port}", token="any") as client:  # noqa: S106
        with pytest.raises(wu.ServerUnreachable, match=r"GET /v1/units/b00000000 on http://"):
            client.get("b00000000")
        assert issubclass(wu.ServerUnreachable, ConnectionError)


@pytest.mark.parametrize("target", ["tests.http.units:pair", "tests.http.units:not_a_number"])
def test_a_result_json_would_change_is_refused_over_http_not_changed(
    client: HttpClient, served: Served, target: str
) -> None:
    """It came back as [1, 2] or None, where the ledger client hands the value itself."""
    with client:
        unit = client.agent(target)
        assert unit.wait(timeout=20).status is wu.Status.COMPLETED
        with pytest.raises(wu.UnstorableValue, match="over HTTP a value travels as JSON"):
            client.result(unit.id)
    with wu.connect(served.state_dir) as local:
        value = local.result(unit.id)
    assert value == (1, 2) if target.endswith("pair") else math.isnan(value)


def test_a_relative_log_is_taken_from_the_callers_directory(
    client: HttpClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server takes absolute paths only; the client resolves one as Client.shell does."""
    monkeypatch.chdir(tmp_path)
    handle = client.shell("echo logged", log="mine.log")
    assert handle.wait(timeout=30).status is wu.Status.COMPLETED
    assert (tmp_path / "mine.log").read_bytes() == b"logged\n"
    assert b"".join(handle.stream()) == b"logged\n"


def test_retry_and_stall_after_travel_with_a_submit(served: Served, tmp_path: Path) -> None:
    policy = wu.Retry(max_attempts=3, initial=0.01, jitter=False, exit_codes=(3,))
    marker = tmp_path / "ran-once"
    with wu.connect(served.url, token=served.token) as client:
        flaky = client.shell(f"test -e {marker} || {{ touch {marker}; exit 3; }}", retry=policy)
        record = client.wait(flaky.id, timeout=30)
        assert (record.status, record.attempt) == (wu.Status.COMPLETED, 2)
        quiet = client.shell("sleep 30", stall_after=0.5)
        with wu.connect(served.state_dir) as ledger:
            assert ledger.row(quiet.id).stall_after == 0.5
        client.kill(quiet.id)
        with pytest.raises(wu.SpecError, match="on= names Python types"):
            client.agent("tests.http.units:add", 1, 2, retry=wu.Retry(on=(TimeoutError,)))


def test_a_unit_submitted_over_http_may_be_a_child_and_a_pooled_one(client: HttpClient) -> None:
    parent = client.shell("sleep 30")
    child = client.agent("tests.http.units:add", 2, 3, parent=parent.id, reuse=True)
    assert child.result(timeout=30) == 5
    assert client.get(child.id).parent == parent.id
    assert client.kill(parent.id)


def test_a_workflow_body_refuses_what_only_an_agent_takes(api: httpx.Client) -> None:
    body = {"kind": "workflow", "target": "tests.http.units:add", "args": [1, 2], "reuse": True}
    response = api.post("/v1/units", json=body)
    assert response.status_code == 422, response.text
    assert "a workflow takes no reuse" in response.text
