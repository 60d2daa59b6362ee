"""Code written for ``wu.connect(state_dir)`` runs unchanged on ``wu.connect(url, token=...)``.

Each test takes ``conn``, a client of either kind on the same real ``serve --http``
process: the ledger client on its state dir, the HTTP client on its address.
The test bodies do not know which one they hold.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import workunits as wu
from tests.http.server import Served
from workunits._client import http_wire as _client_http
from workunits._client.http_client import HttpClient
from workunits._core.claim import Claim

Connected = Any  # wu.Client or HttpClient: the point is that the tests cannot tell


@pytest.fixture(params=["ledger", "http"])
def conn(request: pytest.FixtureRequest, served: Served) -> Iterator[Connected]:
    if request.param == "ledger":
        client: Connected = wu.connect(served.state_dir)
    else:
        client = wu.connect(served.url, token=served.token)
    try:
        yield client
    finally:
        client.close()


def _claim_of(claim: Callable[..., Claim[wu.Notification]], work_id: str) -> Claim[Any]:
    """The claim on ``work_id``'s notice; other units' notices met on the way are acked."""
    deadline = time.monotonic() + 30
    while True:
        held = claim(timeout=max(0.0, deadline - time.monotonic()))
        if held.notice.id == work_id:
            return held
        held.ack()


def test_submit_wait_result_and_list_every_page(
    conn: Connected, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_client_http, "LIST_PAGE", 2)  # five units: three pages over HTTP
    tag = f"{type(conn).__name__}-{time.monotonic_ns()}"
    handles = [conn.shell(["echo", str(i)], key=f"{tag}-{i}") for i in range(5)]
    assert all(h.created for h in handles)
    again = conn.shell(["echo", "0"], key=f"{tag}-0")
    assert (again.id, again.created) == (handles[0].id, False)
    for h in handles:
        assert h.wait(timeout=30).status is wu.Status.COMPLETED
        assert isinstance(h.result(), wu.WorkRecord)
    ids = [h.id for h in handles]
    listed = [r.id for r in conn.list(kind="shell") if r.id in ids]
    assert listed == ids  # oldest first, each once, across pages
    assert [r.id for r in conn.list(status="completed") if r.id in ids] == ids
    assert conn.agent("tests.http.units:add", 20, b=22, description="sum").result(30) == 42
    assert conn.workflow("tests.http.units:add", 1, 2).result(timeout=30) == 3
    with pytest.raises(wu.WorkFailed, match="bad input"):
        conn.agent("tests.http.units:boom", "bad input").result(timeout=30)
    with pytest.raises(wu.NotFinished):
        conn.shell("sleep 30", key=f"{tag}-slow").wait(timeout=0.1)
    assert conn.cancel(conn.shell("sleep 30", key=f"{tag}-slow").id, grace=0.2)


def test_signal_then_retry(conn: Connected, tmp_path: Path) -> None:
    waiting = conn.agent("tests.http.units:waiter", "go")
    assert conn.signal(waiting.id, "go", {"n": 1})
    assert waiting.result(timeout=30) == {"n": 1}
    assert not conn.signal(waiting.id, "go", 2)  # ended: nothing kept
    flaky = conn.agent("tests.http.units:flaky", str(tmp_path / "marker"))
    assert flaky.wait(timeout=30).status is wu.Status.FAILED
    again = conn.retry(flaky.id)
    assert again.created
    assert again.id != flaky.id
    assert again.result(timeout=30) == "second time lucky"
    same = conn.retry(flaky.id)
    assert (same.id, same.created) == (again.id, False)
    with pytest.raises(wu.NotRetryable):
        conn.retry(again.id)


def test_stream_and_stream_async(conn: Connected) -> None:
    script = "for i in 1 2 3; do echo line $i; sleep 0.05; done"
    h = conn.shell(script)
    assert b"".join(conn.stream(h.id)) == b"line 1\nline 2\nline 3\n"
    assert b"".join(h.stream()) == b"line 1\nline 2\nline 3\n"
    assert b"".join(conn.stream(h.id, follow=False)) == b"line 1\nline 2\nline 3\n"
    with pytest.raises(wu.InvalidWorkId):
        conn.stream("nope")

    async def follow() -> bytes:
        live = await conn.shell_async(script)
        chunks = [chunk async for chunk in conn.stream_async(live.id)]
        assert (await live.wait_async(timeout=30)).status is wu.Status.COMPLETED
        listed = await conn.list_async(kind="shell")
        assert live.id in {r.id for r in listed}
        return b"".join(chunks)

    assert asyncio.run(follow()) == b"line 1\nline 2\nline 3\n"


def test_notices_take_claim_ack_release_and_redelivery(conn: Connected) -> None:
    notices = conn.notifications()
    first = conn.shell("true")
    first.wait(timeout=30)
    # take: the block raised, so the notice comes back, marked redelivered.
    held = _claim_of(notices.claim, first.id)
    assert not held.notice.redelivered
    assert held.release()
    assert not held.ack()  # settled already
    seen: list[wu.Notification] = []

    def act_then_fail() -> None:
        with notices.take(timeout=30) as notice:
            seen.append(notice)
            raise RuntimeError("acting failed")

    with pytest.raises(RuntimeError, match="acting failed"):
        act_then_fail()
    assert [(n.id, n.redelivered) for n in seen] == [(first.id, True)]
    with notices.take(timeout=30) as notice:
        assert (notice.id, notice.redelivered) == (first.id, True)
    # acknowledged: never handed out again, to this consumer or another.
    second = conn.shell("exit 3")
    second.wait(timeout=30)
    claim = _claim_of(notices.claim, second.id)
    assert claim.notice.status is wu.Status.FAILED
    assert claim.ack()
    while True:  # whatever is left is some other unit's
        try:
            left = notices.claim(timeout=0.3)
        except wu.NoNotification:
            break
        assert left.notice.id not in {first.id, second.id}, "an acknowledged notice came back"
        left.ack()
    third = conn.shell("true")
    third.wait(timeout=30)
    deadline = time.monotonic() + 30
    while (got := notices.get(timeout=max(0.0, deadline - time.monotonic()))).id != third.id:
        pass  # get acknowledges each at once; other units' notices go by
    assert got.status is wu.Status.COMPLETED


def test_notices_async_twins_take_get_claim_and_iterate_without_blocking_the_loop(
    conn: Connected,
) -> None:
    notices = conn.notifications()

    async def consume() -> list[tuple[str, bool]]:
        seen: list[tuple[str, bool]] = []
        ticks = 0

        async def tick() -> None:  # runs only while the loop is free
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        async def drain() -> None:
            while True:  # notices of earlier tests' units go by first
                (await notices.claim_async(timeout=0.3)).ack()

        async def act_then_fail() -> None:
            async with notices.take_async(timeout=30) as notice:
                seen.append((notice.id, notice.redelivered))
                raise RuntimeError("acting failed")

        ticker = asyncio.create_task(tick())
        # Nothing is waiting yet: the wait times out without holding the loop.
        with pytest.raises(wu.NoNotification):
            await drain()
        assert ticks > 10
        first = await conn.shell_async("true")
        await first.wait_async(timeout=30)
        held = await notices.claim_async(timeout=30)
        while held.notice.id != first.id:
            held.ack()
            held = await notices.claim_async(timeout=30)
        assert held.release()
        # take_async: released when the block raises, acknowledged when it ends.
        with pytest.raises(RuntimeError, match="acting failed"):
            await act_then_fail()
        async with notices.take_async(timeout=30) as notice:
            seen.append((notice.id, notice.redelivered))
        second = await conn.shell_async("exit 3")
        await second.wait_async(timeout=30)
        got = await notices.get_async(timeout=30)
        seen.append((got.id, got.redelivered))
        third = await conn.shell_async("true")
        await third.wait_async(timeout=30)
        async for notice in notices:
            seen.append((notice.id, notice.redelivered))
            break
        ticker.cancel()
        return seen

    seen = asyncio.run(consume())
    assert [redelivered for _, redelivered in seen] == [True, True, False, False]
    assert seen[0][0] == seen[1][0]
    assert len({work_id for work_id, _ in seen}) == 3
    with pytest.raises(wu.NoNotification):  # every one was acknowledged: none comes back
        notices.claim(timeout=0.3)


def test_a_cancelled_async_wait_leaves_no_notice_held(conn: Connected) -> None:
    notices = conn.notifications()
    while True:  # notices of earlier tests' units go by first
        try:
            notices.claim(timeout=0.3).ack()
        except wu.NoNotification:
            break
    done = conn.shell("true")
    done.wait(timeout=30)

    async def cancel_while_looking() -> None:
        waiter = asyncio.create_task(notices.claim_async(timeout=30))
        await asyncio.sleep(0)  # its first look is on its way in a worker thread
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(cancel_while_looking())
    # Whatever the cancelled look claimed was given back: the notice is still there.
    held = notices.claim(timeout=30)
    assert held.notice.id == done.id
    assert held.ack()


def test_retain_handle_renew_release(conn: Connected) -> None:
    h = conn.shell("true")
    h.wait(timeout=30)
    with conn.retain(h.id, lease=30) as retain:
        assert retain.work_id == h.id
        assert retain.renew()
        assert retain.renew(60)
        assert retain.lease == 60
    assert not retain.renew()  # released by the block
    assert not retain.release()
    other = conn.retain(h.id, lease=5)
    assert other.release()
    with pytest.raises(wu.UnknownWork):
        conn.retain("b00000000")


def test_cancel_and_kill_sync_and_async(conn: Connected) -> None:
    slow = conn.shell("sleep 30")
    assert slow.cancel(grace=0.2)
    assert slow.wait(timeout=30).status is wu.Status.KILLED
    assert not slow.cancel()
    assert not conn.kill(slow.id)
    with pytest.raises(wu.WorkKilled):
        slow.result(timeout=30)

    async def kill_one() -> wu.WorkRecord:
        s = await conn.shell_async("sleep 30")
        assert await s.kill_async()
        record: wu.WorkRecord = await s.wait_async(timeout=30)
        return record

    assert asyncio.run(kill_one()).status is wu.Status.KILLED
    assert not conn.closed
    conn.close()
    assert conn.closed
    with pytest.raises(wu.ClientClosed):
        conn.get(slow.id)


def test_an_http_claim_is_renewed_while_held_and_given_back_at_close(served: Served) -> None:
    holder = wu.connect(served.url, token=served.token)
    rival = wu.connect(served.state_dir)
    try:
        h = holder.shell("true")
        h.wait(timeout=30)
        lease = 2.0  # renewed every third of it: slack for a loaded machine
        claim = _claim_of(holder.notifications(lease=lease).claim, h.id)
        # Leases pass: without renewing, the rival would be handed the notice.
        until = time.monotonic() + 2.5 * lease
        while time.monotonic() < until:
            other = rival.notifications().claim_nowait()
            assert other is None or other.notice.id != h.id, "the held claim lapsed"
            if other is not None:
                other.ack()
        assert claim.renew(lease)
        holder.close()  # gives the claim back at once
        back = _claim_of(rival.notifications().claim, h.id)
        assert back.notice.redelivered
        assert back.ack()
        assert not claim.ack()
    finally:
        holder.close()
        rival.close()


def test_the_http_client_is_the_one_connect_returns(served: Served) -> None:
    with wu.connect(served.url, token=served.token) as client:
        assert isinstance(client, HttpClient)
        assert client.get(client.shell("true").id).kind == "shell"


def test_list_a_page_at_a_time_and_the_tree(conn: Connected) -> None:
    tag = f"{type(conn).__name__}-page-{time.monotonic_ns()}"
    handles = [conn.shell(["echo", str(i)], description=tag) for i in range(3)]
    for h in handles:
        h.wait(timeout=30)
    ids = [h.id for h in handles]
    mine = [r.id for r in conn.list(kind="shell") if r.id in ids]
    first = conn.list(kind="shell", limit=1, after=mine[0])
    assert [r.id for r in first] == [mine[1]]  # the page after a unit, oldest first
    assert all(tag in line for line in conn.tree(mine[2]).splitlines())
    with pytest.raises(wu.SpecError, match="limit"):
        conn.list(limit=0)

    async def paged() -> list[str]:
        return [r.id for r in await conn.list_async(kind="shell", limit=1, after=mine[1])]

    assert asyncio.run(paged()) == [mine[2]]


def test_a_workflow_takes_an_output_cap_as_an_agent_does(conn: Connected) -> None:
    small = conn.workflow("tests.http.units:add", 1, 2, output_cap=1 << 20)
    assert small.result(timeout=30) == 3


def test_a_unit_reads_what_a_client_writes_to_its_stdin(conn: Connected) -> None:
    cat = conn.shell("cat", stdin=True)
    assert conn.send_input(cat.id, "first line\n")
    assert cat.send_input(b"second line\n", eof=True)
    assert cat.wait(timeout=30).status is wu.Status.COMPLETED
    assert b"".join(conn.stream(cat.id)) == b"first line\nsecond line\n"
    assert conn.send_input(cat.id, "late") is False  # it has ended
    plain = conn.shell("sleep 30")
    with pytest.raises(wu.SpecError, match="not started with stdin=True"):
        conn.send_input(plain.id, "x")
    plain.kill()

    async def from_a_loop() -> bytes:
        counter = await conn.shell_async("wc -c", stdin=True)
        assert await conn.send_input_async(counter.id, b"x" * 100_000, eof=True)
        await counter.wait_async(timeout=30)
        return b"".join(conn.stream(counter.id))

    assert asyncio.run(from_a_loop()).split() == [b"100000"]
