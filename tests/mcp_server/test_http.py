"""Streamable HTTP: the state dir's token, sessions, and notices exactly once across clients."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client

from tests.mcp_server.harness import call, http_server, quiet_deprecations, read_all

pytestmark = pytest.mark.timeout(120)

UNCONFINED = ("--sandbox", "none")


def test_the_token_guards_it_and_a_session_reads_and_waits(tmp_path: Path) -> None:
    with http_server(tmp_path / "s", *UNCONFINED, cwd=tmp_path) as server:
        refused = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401
        wrong = httpx.post(server.url, headers={"Authorization": "Bearer nope"}, json={})
        assert wrong.status_code == 401

        async def scenario() -> None:
            async with server.client() as c:
                assert c.protocol_version < "2026"  # sessions: the handshake era
                unit = (await call(c, "start_shell", command="printf 'a\\nb\\n'; exit 4"))["id"]
                ended = await call(c, "wait_for", ids=[unit], timeout=20)
                assert ended["ended"][0]["exit_code"] == 4
                assert await read_all(c, unit) == "a\nb\n"

        anyio.run(scenario)
        out = server.stop()
    assert out == ""  # nothing on stdout, over HTTP either


def test_notices_go_to_one_session_each_and_come_back_when_it_ends(tmp_path: Path) -> None:
    with http_server(tmp_path / "s", *UNCONFINED, cwd=tmp_path) as server:

        async def scenario() -> None:
            async with server.client() as first:
                ids = [
                    (await call(first, "start_shell", command=f"echo {i}"))["id"] for i in range(6)
                ]
                pending = list(ids)
                while pending:
                    pending = (await call(first, "wait_for", ids=pending))["running"]
                taken: dict[str, list[str]] = {"a": [], "b": []}
                last: dict[str, list[str]] = {"a": [], "b": []}  # held: not acknowledged yet
                async with server.client() as second:

                    async def take(name: str, client: object) -> None:
                        for _ in range(4):
                            got = await call(client, "take_notices", max=2, wait=0.2)  # type: ignore[arg-type]
                            batch = [n["id"] for n in got["notices"]]
                            assert sorted(got["acknowledged"]) == sorted(last[name])
                            taken[name] += batch
                            last[name] = batch

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(take, "a", first)
                        tg.start_soon(take, "b", second)
                    assert not set(taken["a"]) & set(taken["b"])  # never both
                    assert sorted(taken["a"] + taken["b"]) == sorted(ids)  # none lost
                    acked = await call(second, "ack_notices")  # what b took: done with
                    assert sorted(acked["acknowledged"]) == sorted(last["b"])
                    extra = (await call(second, "start_shell", command="echo extra"))["id"]
                    await call(second, "wait_for", ids=[extra])
                    got = await call(first, "take_notices", wait=10)
                    assert [n["id"] for n in got["notices"]] == [extra]
                    last["a"] = [extra]
                # The first session ends without acknowledging its last batch...
                assert (await call(first, "ack_notices", ids=[]))["acknowledged"] == []
            # ... so the ends it still held come back to the next taker, marked so.
            async with server.client() as third:
                again = await call(third, "take_notices", max=10, wait=5)
                back = {n["id"]: n for n in again["notices"]}
                assert sorted(back) == sorted(last["a"])
                assert all(n["redelivered"] for n in back.values())
                none = await call(third, "take_notices", max=10)
                assert none["notices"] == []
                assert sorted(none["acknowledged"]) == sorted(back)

        anyio.run(scenario)


def test_a_subscriber_hears_when_a_units_output_grows(tmp_path: Path) -> None:
    with http_server(tmp_path / "s", *UNCONFINED, cwd=tmp_path) as server:
        heard: list[str] = []
        updated = anyio.Event()

        async def on_message(message: object) -> None:
            if isinstance(message, types.ServerNotification):
                root = getattr(message, "root", message)
                if isinstance(root, types.ResourceUpdatedNotification):
                    heard.append(str(root.params.uri))
                    updated.set()

        async def scenario() -> None:
            async with server.client() as c:
                c.session._message_handler = on_message
                unit = await call(c, "start_shell", command="sleep 0.5; echo late; sleep 60")
                uri = f"workunits://units/{unit['id']}/output"
                with quiet_deprecations():
                    await c.subscribe_resource(uri)
                with anyio.fail_after(20):
                    await updated.wait()
                assert uri in heard
                listing = await c.list_resources()
                assert uri in {str(r.uri) for r in listing.resources}
                await call(c, "kill", id=unit["id"])

        anyio.run(scenario)


class Heard:
    """A client's message handler: ``updated`` is set at its first resource update."""

    def __init__(self) -> None:
        self.updated = anyio.Event()

    async def __call__(self, message: object) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, types.ResourceUpdatedNotification):
            self.updated.set()


async def hear_an_update(client: Client, uri: str) -> None:
    """Subscribe ``client`` to ``uri`` and wait for its first update."""
    heard = Heard()
    client.session._message_handler = heard
    with quiet_deprecations():
        await client.subscribe_resource(uri)
    with anyio.fail_after(20):
        await heard.updated.wait()


def test_a_subscriber_that_left_without_unsubscribing_costs_the_others_nothing(
    tmp_path: Path,
) -> None:
    """A handshake-era session that ends while subscribed costs the others nothing:
    the next subscriber still hears the unit's output grow, and the watcher logs no
    failure."""
    with http_server(tmp_path / "s", *UNCONFINED, cwd=tmp_path) as server:

        async def scenario() -> None:
            async with server.client() as first:
                command = "while :; do echo t; sleep 0.2; done"
                unit = await call(first, "start_shell", command=command)
                uri = f"workunits://units/{unit['id']}/output"
                await hear_an_update(first, uri)
            # The first session is gone, still subscribed; a second one subscribes after it.
            async with server.client() as second:
                await hear_an_update(second, uri)
                await call(second, "kill", id=unit["id"])

        anyio.run(scenario)
        out = server.stop()
    assert out == ""
    assert "watching subscribed units failed" not in "".join(server.stderr)
