"""asyncio first-class: ``async with wu.Supervisor``, the ``_async`` twins, ``wu.connect_async``.

Every async test runs under ``LoopGuard`` (tests/loop_guard.py): a blocking
call on the loop's thread -- a wait on a lock or a future, a ledger query, a
file opened in the state dir, a slow loop step -- fails it.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import workunits as wu
from tests.conftest import eventually
from tests.loop_guard import LoopGuard

WAIT = 30.0


def add(a: int, b: int) -> int:
    return a + b


def fail() -> None:
    raise ValueError("on purpose")


def step_twice(x: int) -> int:
    ctx = wu.current()
    return int(ctx.step("one", lambda: x) + ctx.step("two", lambda: x))


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def on_receive(self, message: Any) -> Any:
        if message == "n":
            return self.n
        self.n += message
        return self.n

    def on_stop(self) -> dict[str, int]:
        return {"n": self.n}


def wait_for_gate(gate: str) -> str:
    """Polls inside the unit (not in the test) until the gate file exists."""
    import os  # noqa: PLC0415 - keeps the pickled function self-contained
    import time  # noqa: PLC0415

    while not os.path.exists(gate):
        time.sleep(0.01)
    return "through"


def test_the_guard_fails_a_blocking_call_on_the_loop(guard: LoopGuard, tmp_path: Path) -> None:
    sup = wu.Supervisor(tmp_path / "state", install_signal_handlers=False)
    try:
        sup.get  # noqa: B018 - started off the loop below, then used wrongly on it
        asyncio.run(sup.__aenter__())

        async def main() -> None:
            sup.list()  # the blocking twin, on the loop's thread

        with pytest.raises(AssertionError, match="the event loop's thread blocked"):
            guard.run(main)
    finally:
        sup.close()


def test_constructing_on_the_loop_defers_the_start_up_to_async_with(
    guard: LoopGuard, tmp_path: Path
) -> None:
    state = tmp_path / "state"

    async def main() -> tuple[bool, bool, int]:
        sup = wu.Supervisor(state, install_signal_handlers=False)
        made_by_constructor = state.exists()
        async with sup:
            made_by_aenter = state.exists()
            handle = await sup.agent_async(add, 2, 3)
            value = await handle.result_async(timeout=WAIT)
        return made_by_constructor, made_by_aenter, value

    assert guard.run(main) == (False, True, 5)


def test_a_supervisor_made_on_the_loop_and_never_entered_touches_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"

    async def main() -> None:
        wu.Supervisor(state, install_signal_handlers=False).close()

    asyncio.run(main())
    assert not state.exists()


def test_a_blocking_call_first_still_starts_a_supervisor_made_on_the_loop(tmp_path: Path) -> None:
    async def main() -> int:
        # What a notebook does: its cells run on a loop, its code is blocking.
        with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
            result: int = sup.agent(add, 1, 1).result(timeout=WAIT)
            return result

    assert asyncio.run(main()) == 2


def test_every_submit_twin_runs_its_kind(guard: LoopGuard, tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        async with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
            shell = await sup.shell_async(["echo", "hi"])
            agent = await sup.agent_async(add, 1, 2, key="k1")
            again = await sup.agent_async(add, 1, 2, key="k1")
            dream = await sup.dream_async(add, 3, 4)
            flow = await sup.workflow_async(step_twice, 5)
            mon = await sup.monitor_async(["echo", "ERROR x"], r"ERROR", rate_limit=None)
            spec = wu.actors.ShellSpec.build(["true"], cwd=None, env=None, output_cap=1 << 20)
            raw = await sup.submit_async("b", spec)
            mate = await sup.teammate_async(Counter)
            await mate.tell_async(4)
            asked = await mate.ask_async("n", timeout=WAIT)
            stopped = await mate.stop_async(timeout=WAIT)
            return {
                "shell": (await shell.result_async(timeout=WAIT)).status,
                "agent": await agent.result_async(timeout=WAIT),
                "same": again.id == agent.id,
                "dream": await dream.result_async(timeout=WAIT),
                "flow": await flow.result_async(timeout=WAIT),
                "monitor": (await mon.wait_async(timeout=WAIT)).status,
                "raw": (await raw.wait_async(timeout=WAIT)).status,
                "asked": asked,
                "stopped": stopped,
                "kinds": sorted({r.kind for r in await sup.list_async()}),
            }

    out = guard.run(main)
    assert out == {
        "shell": wu.Status.COMPLETED,
        "agent": 3,
        "same": True,
        "dream": 7,
        "flow": 10,
        "monitor": wu.Status.COMPLETED,
        "raw": wu.Status.COMPLETED,
        "asked": 4,
        "stopped": {"n": 4},  # what on_stop() returned, decoded
        "kinds": ["agent", "dream", "monitor", "shell", "teammate", "workflow"],
    }


def test_the_twins_pass_on_every_option_of_their_sync_twins(
    guard: LoopGuard, tmp_path: Path
) -> None:
    """retry, not_before, reuse, offset and paging reach the unit from the async side too."""
    quick = wu.Retry(max_attempts=2, initial=0.01, jitter=False)

    async def main() -> dict[str, Any]:
        async with wu.Supervisor(
            tmp_path / "state", install_signal_handlers=False, pool_size=1
        ) as sup:
            retried = await sup.shell_async("echo try; exit 3", retry=quick)
            held = await sup.agent_async(add, 1, 2, not_before=3600)
            pooled = [await sup.agent_async(add, i, i, reuse=True) for i in range(2)]
            ended = await retried.wait_async(timeout=WAIT)
            sums = [await h.result_async(timeout=WAIT) for h in pooled]
            pids = {(await h.get_async()).pid for h in pooled}
            chunk = await sup.read_output_async(retried.id, offset=0)
            first = await sup.list_async(limit=1)
            pending = (await held.get_async()).status
            await held.cancel_async()
            return {
                "retried": (ended.status, ended.attempt),
                "pending": pending,
                "sums": sums,
                "one worker": len(pids),
                "chunk": (type(chunk).__name__, chunk.start, b"try" in chunk.data),
                "first page": [r.id for r in first],
                "oldest": retried.id,
            }

    out = guard.run(main)
    assert out["retried"] == (wu.Status.FAILED, 2)
    assert out["pending"] == wu.Status.PENDING
    assert out["sums"] == [0, 2]
    assert out["one worker"] == 1  # both ran in the pool's one worker
    assert out["chunk"] == ("OutputChunk", 0, True)
    assert out["first page"] == [out["oldest"]]


def test_reads_streams_and_ends_without_blocking(guard: LoopGuard, tmp_path: Path) -> None:
    gate = tmp_path / "gate"

    async def main() -> dict[str, Any]:
        async with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
            writer = await sup.shell_async(
                f"for i in 1 2 3; do echo line $i; done; "
                f"while [ ! -e {gate} ]; do sleep 0.01; done; echo last"
            )
            chunks = []
            async for chunk in writer.stream_async():
                chunks.append(chunk)
                if b"line 3" in b"".join(chunks) and not gate.exists():
                    # The rest comes only after this: the stream follows the unit.
                    await asyncio.to_thread(gate.touch)
            blocked = await sup.agent_async(wait_for_gate, str(tmp_path / "never"))
            with pytest.raises(wu.NotFinished):
                await blocked.wait_async(timeout=0.05)
            killed = await blocked.kill_async()
            with pytest.raises(wu.WorkKilled):
                await blocked.result_async(timeout=WAIT)
            failing = await sup.agent_async(fail)
            with pytest.raises(wu.WorkFailed):
                await failing.result_async(timeout=WAIT)
            late = await sup.shell_async(["echo", "x"])
            await late.wait_async(timeout=WAIT)
            return {
                "output": b"".join(chunks),
                "killed": killed,
                "again": await blocked.cancel_async(),
                "read": await late.read_output_async(),
                "status": (await late.get_async()).status,
            }

    out = guard.run(main)
    assert out["output"] == b"line 1\nline 2\nline 3\nlast\n"  # every byte once, in order
    assert out["killed"] is True
    assert out["again"] is False  # it had ended already
    assert out["read"] == b"x\n"
    assert out["status"] == wu.Status.COMPLETED


def test_many_long_waits_hold_no_thread_each(guard: LoopGuard, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    n = 24

    async def main() -> tuple[int, int, list[str]]:
        async with wu.Supervisor(
            tmp_path / "state", install_signal_handlers=False, concurrency={"agent": n}
        ) as sup:
            handles = [await sup.agent_async(wait_for_gate, str(gate)) for _ in range(n)]
            before = threading.active_count()
            waits = asyncio.gather(*(h.result_async(timeout=WAIT) for h in handles))
            streams = [h.stream_async() for h in handles]
            follows = asyncio.gather(*(_drain(s) for s in streams))
            await asyncio.sleep(0.2)  # let every wait park (what is asserted comes after)
            during = threading.active_count()
            await asyncio.to_thread(gate.touch)
            results = await waits
            await follows
            return before, during, results

    before, during, results = guard.run(main)
    assert results == ["through"] * n
    # 2n waiters parked: at most the relay thread and an executor thread or two more.
    assert during - before <= 4, (before, during)


async def _drain(stream: Any) -> int:
    return sum([len(chunk) async for chunk in stream])


def test_the_client_twins(guard: LoopGuard, sup: wu.Supervisor, state_dir: Path) -> None:
    async def main() -> dict[str, Any]:
        client = await wu.connect_async(state_dir)
        try:
            agent = await client.agent_async(add, 20, 22)
            by_ref = await client.agent_async("tests.test_asyncio:add", 1, 2)
            shell = await client.shell_async(["echo", "from the client"])
            chunks = [chunk async for chunk in shell.stream_async()]
            doomed = await client.shell_async(["sleep", "30"])
            with pytest.raises(wu.NotFinished):
                await doomed.wait_async(timeout=0.05)
            return {
                "agent": await agent.result_async(timeout=WAIT),
                "by_ref": await by_ref.result_async(timeout=WAIT),
                "output": b"".join(chunks),
                "kill": await doomed.kill_async(),
                "killed": (await doomed.wait_async(timeout=WAIT)).status,
                "get": (await client.get_async(agent.id)).status,
                "listed": len(await client.list_async(kind="agent")),
                "row": (await client.row_async(agent.id)).id == agent.id,
                "rows": len(await client.rows_async(kind="shell")),
                "retained": await retained(client, agent.id),
            }
        finally:
            await asyncio.to_thread(client.close)

    assert guard.run(main) == {
        "agent": 42,
        "by_ref": 3,
        "output": b"from the client\n",
        "kill": True,
        "killed": wu.Status.KILLED,
        "get": wu.Status.COMPLETED,
        "listed": 2,
        "row": True,
        "rows": 2,
        "retained": True,
    }


async def retained(client: wu.Client, work_id: str) -> bool:
    """Retain the unit from the loop, then let it go (a short write, off the loop)."""
    retain = await client.retain_async(work_id, lease=30)
    return await asyncio.to_thread(retain.release)


def test_notices_async_twins_on_the_client_and_the_mailbox(
    guard: LoopGuard, sup: wu.Supervisor, state_dir: Path
) -> None:
    # take_async, get_async, claim_async and async for, on a client's notices and on
    # the supervisor's own mailbox: none of them blocks the loop while it waits.
    async def main() -> dict[str, Any]:
        client = await wu.connect_async(state_dir)
        try:
            by_client = await client.agent_async(add, 1, 2)
            notices = client.notifications()
            with pytest.raises(wu.NoNotification):  # nothing yet: a timed wait, loop free
                await notices.claim_async(timeout=0.05)
            await by_client.wait_async(timeout=WAIT)
            async with notices.take_async(timeout=WAIT) as taken:
                from_client = taken.id
            mailbox = await sup.notifications_async()
            mine = await sup.agent_async(add, 2, 3)
            async with mailbox.take_async(timeout=WAIT) as notice:
                from_mailbox = notice.id
            again = await sup.agent_async(add, 3, 4)
            async for notice in mailbox:
                iterated = notice.id
                break
            return {
                "client": from_client == by_client.id,
                "mailbox": from_mailbox == mine.id,
                "iterated": iterated == again.id,
            }
        finally:
            await asyncio.to_thread(client.close)

    assert guard.run(main) == {"client": True, "mailbox": True, "iterated": True}


@pytest.mark.parametrize("consumer", ["supervisor", "client"])
def test_waits_that_time_out_while_notices_are_taken_lose_none(
    sup: wu.Supervisor, state_dir: Path, consumer: str
) -> None:
    """A timeout as short as a look: whatever a timed-out wait claimed goes to the next."""
    units = [sup.shell(["true"]).id for _ in range(12)]
    for work_id in units:
        sup.wait(work_id, timeout=WAIT)
    client = wu.connect(state_dir)

    async def take_all() -> list[str]:
        mailbox = await sup.notifications_async() if consumer == "supervisor" else None
        notices = mailbox if mailbox is not None else client.notifications()
        taken: list[str] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while len(taken) < len(units) and loop.time() < deadline:
            with contextlib.suppress(wu.NoNotification):
                taken.append((await notices.get_async(timeout=0.002)).id)
        return taken

    try:
        taken = asyncio.run(take_all())
        assert sorted(taken) == sorted(units)  # each once; none held by a timed-out wait
        assert client.notifications().claim_nowait() is None
    finally:
        client.close()


def test_a_wait_left_on_a_closed_loop_does_not_keep_other_waits_asleep(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        unit = sup.shell(["sleep", "60"])
        loop = asyncio.new_event_loop()
        abandoned = loop.create_task(sup.wait_async(unit.id))
        loop.run_until_complete(asyncio.sleep(0))  # the wait is now on its future
        loop.close()  # ... and nobody will ever cancel it
        assert not abandoned.done()
        waits = sup._waiters._waiters  # the order is the point: the dead loop's wait first
        done: dict[str, Any] = {}
        waiting = threading.Thread(target=lambda: done.update(record=sup.wait(unit.id, 20)))
        waiting.start()
        eventually(lambda: len(waits.get(unit.id, [])) == 2)
        assert sup.kill(unit.id) is True
        waiting.join(30)
        assert done["record"].status is wu.Status.KILLED


CANCELLED_ENTER = """
import asyncio, sys
import workunits as wu

async def main() -> None:
    sup = wu.Supervisor(sys.argv[1], install_signal_handlers=False)
    entering = asyncio.create_task(sup.__aenter__())
    await asyncio.sleep(0)  # the start-up is on its thread now
    entering.cancel()
    try:
        await entering
    except asyncio.CancelledError:
        pass
    unit = await sup.shell_async("exec sleep 60")  # it started all the same
    print(unit.id, flush=True)

asyncio.run(main())  # and the program ends without closing it
"""


def test_a_supervisor_whose_async_with_was_cancelled_still_ends_its_work_at_exit(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    done = subprocess.run(
        [sys.executable, "-c", CANCELLED_ENTER, str(state)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with wu.connect(state) as client:
        record = client.get(done.stdout.strip())
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.SHUTDOWN)


# Calls that do not wait on the supervisor, or are for tests and tools: no twin.
NO_TWIN = {
    "advertise",  # serve's, once at start
    "ask_future",  # returns a future already
    "aclose",  # is the twin of close (an async def)
    "close",  # aclose(), and `async with`, close on a worker thread
    "close_for_signal",  # the cleanup thread's, after a signal
    "event_feed",
    "events",
    "pool",
    "executor",  # a concurrent.futures.Executor: loop.run_in_executor / asyncio.wrap_future
    "http_consumers",
    "resident_ids",
    "tick",
}


def test_every_blocking_call_has_an_async_twin() -> None:
    calls = {
        name
        for name, value in vars(wu.Supervisor).items()
        if callable(value) and not name.startswith("_") and not name.endswith("_async")
    }
    missing = sorted(c for c in calls - NO_TWIN if not hasattr(wu.Supervisor, f"{c}_async"))
    assert missing == []


class Ping(wu.WorkActor):
    kind = "ping"

    def launch(self) -> None:
        self.finish(wu.Outcome(wu.Status.COMPLETED, exit_code=0))

    def signal_work(self, signum: int) -> None:
        self.finish(self.outcome_for_exit(None, signum))


def test_the_management_twins(guard: LoopGuard, tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        async with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
            await sup.register_kind_async("q", Ping)
            ping = await sup.submit_async("q", None)
            await sup.schedule_async("nightly", "0 3 * * *", "shell", "echo nightly")
            names = [s.name for s in await sup.schedules_async()]
            removed = await sup.unschedule_async("nightly")
            dream = await sup.dream_async(time.sleep, 60)
            async with asyncio.timeout(WAIT):  # shed kills running dreams only
                while (await dream.get_async()).status is not wu.Status.RUNNING:
                    await asyncio.sleep(0.01)
            shed = await sup.shed_async()
            retain = await sup.retain_async(ping.id, lease=30)
            await asyncio.to_thread(retain.release)
            tree = await sup.tree_async()
            return {
                "ping": (await ping.wait_async(timeout=WAIT)).status,
                "names": names,
                "removed": removed,
                "shed": shed == [dream.id],
                "tree": ping.id in tree,
                "gc": await sup.gc_async(),
                "drain": await sup.drain_async(5),
            }

    out = guard.run(main)
    assert out == {
        "ping": wu.Status.COMPLETED,
        "names": ["nightly"],
        "removed": True,
        "shed": True,
        "tree": True,
        "gc": 0,
        "drain": [],
    }
