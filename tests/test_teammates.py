"""Teammates (``t``): tell, ask, proxy, stop, errors, routing by ID, kill mid-ask, asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import workunits as wu
from workunits._util import framing

from .conftest import eventually
from .kinds_support import Fifo, read_line, supervisor, write_line

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[wu.Supervisor]:
    with supervisor(tmp_path) as s:
        yield s


@pytest.fixture
def fifos(tmp_path: Path) -> Iterator[tuple[Fifo, Fifo]]:
    """(entered, gate): a unit says it got somewhere; the test lets it go on."""
    entered, gate = Fifo(tmp_path / "entered"), Fifo(tmp_path / "gate")
    yield entered, gate
    entered.close()
    gate.close()


class Unpicklable(Exception):
    def __init__(self, a: str, b: str) -> None:  # pickles as (a,), so it cannot unpickle
        super().__init__(a)
        self.b = b


class Accumulator:
    """Adds what it is told; answers questions about it."""

    def __init__(self, start: int = 0) -> None:
        self.total = start
        self.seen = 0

    def on_receive(self, message: Any) -> Any:
        self.seen += 1
        match message:
            case int(n):
                self.total += n
                return self.total
            case "total":
                return self.total
            case "pair":
                return (self.total, "pickled, not JSON")
            case ("raise", text):
                raise ValueError(text)
            case "unpicklable":
                raise Unpicklable("odd", "one")
            case ("block", entered, gate):
                write_line(entered, "in handler")
                return read_line(gate)
            case ("until cancelled", entered, *padded):  # (..., size): a longer answer
                write_line(entered, "in handler")
                while not wu.current().cancelled:  # polling inside the unit, not the test
                    time.sleep(0.005)
                return "saw the cancel" + "." * (padded[0] if padded else 0)
            case ("progress", fraction):
                wu.current().progress(fraction, "halfway")
                return wu.current().id
            case ("child", x):
                return wu.current().agent(double, x).result(timeout=10)
            case ("ask", target, question):
                return wu.current().ask(target, question, timeout=10)
            case ("tell", target, value):
                wu.current().tell(target, value)
                return "told"
        raise TypeError(f"unexpected {message!r}")

    def add(self, n: int, *, times: int = 1) -> int:
        self.total += n * times
        return self.total

    def on_stop(self) -> dict[str, int]:
        return {"total": self.total, "seen": self.seen}


class PastTheFrameLimit:
    """Lowers the channel's frame limit in its own process, then answers with ``size`` bytes."""

    def on_receive(self, size: int) -> str:
        framing.MAX_FRAME = 1 << 16
        return "x" * size


class Plain:
    """No on_receive: only proxy calls work."""

    def hello(self, name: str) -> str:
        return f"hello {name}"


class Broken:
    def __init__(self) -> None:
        raise RuntimeError("cannot build")


def double(x: int) -> int:
    return 2 * x


# -- tell, ask, proxy, stop ----------------------------------------------------------


def test_tells_are_handled_in_order_before_a_later_ask(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator, 100)
    assert t.id.startswith("t")
    assert isinstance(t, wu.TeammateHandle)
    for n in range(1, 11):
        t.tell(n)
    assert t.ask("total", timeout=10) == 155
    assert t.ask("pair", timeout=10) == (155, "pickled, not JSON")  # not JSON: pickled
    assert sup.get(t.id).kind == "teammate"


def test_stop_handles_queued_messages_then_completes_with_on_stop(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    for _ in range(50):
        t.tell(1)
    # stop() returns what on_stop() returned, decoded (not the record's raw bytes).
    assert t.stop(timeout=10) == {"total": 50, "seen": 50}  # nothing dropped behind the stop
    assert sup.get(t.id).status == wu.Status.COMPLETED
    assert sup.stop(t.id) is False  # stopping an ended teammate is a no-op


def test_ask_raises_the_teammates_exception_and_the_teammate_goes_on(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    with pytest.raises(ValueError, match="no such thing") as info:
        t.ask(("raise", "no such thing"), timeout=10)
    assert "raised in the teammate's process" in "".join(info.value.__notes__)
    assert "on_receive" in "".join(info.value.__notes__)  # the remote traceback
    assert t.ask(5, timeout=10) == 5


def test_an_exception_that_does_not_unpickle_becomes_teammate_error(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    with pytest.raises(wu.TeammateError) as info:
        t.ask("unpicklable", timeout=10)
    assert info.value.type_name == "Unpicklable"
    assert info.value.message == "odd"
    assert "in on_receive" in info.value.traceback


def test_an_answer_too_large_for_the_channel_fails_that_ask_only(sup: wu.Supervisor) -> None:
    t = sup.teammate(PastTheFrameLimit)
    with pytest.raises(wu.TeammateError) as info:
        t.ask(1 << 17, timeout=10)
    assert info.value.type_name == "AnswerTooLarge"
    assert f"{(1 << 17) + 2} bytes" in info.value.message  # the JSON string, quoted
    assert "write it to a file" in info.value.message
    assert t.ask(100, timeout=10) == "x" * 100  # it carries on


def test_proxy_calls_methods_and_returns_futures(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator, 1)
    proxy = t.proxy()
    futures = [proxy.add(2), proxy.add(3, times=2)]
    assert [f.result(timeout=10) for f in futures] == [3, 9]
    with pytest.raises(AttributeError, match="no method 'nope'"):
        proxy.nope()  # checked against the class, before anything is sent
    with pytest.raises(AttributeError):
        proxy._private()


def test_a_class_without_on_receive_answers_proxies_and_refuses_messages(
    sup: wu.Supervisor,
) -> None:
    t = sup.teammate(Plain)
    assert t.proxy().hello("you").result(timeout=10) == "hello you"
    with pytest.raises(wu.WrongType, match="no on_receive"):  # also a TypeError
        t.ask("hi", timeout=10)


# -- a tell or ask that cannot be delivered ----------------------------------------------


def test_tell_and_ask_to_an_ended_teammate_raise(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    t.stop(timeout=10)
    with pytest.raises(wu.TeammateEnded, match=f"{t.id} has ended"):
        t.tell(1)
    with pytest.raises(wu.TeammateEnded, match="has ended"):
        t.ask("total", timeout=10)
    with pytest.raises(wu.TeammateEnded):
        t.proxy().add(1)


def test_messages_after_a_stop_are_refused_not_dropped(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    assert sup.stop(t.id) is True
    with pytest.raises(wu.TeammateEnded, match=r"(is stopping|has ended)"):
        t.tell(1)
    assert sup.wait(t.id, timeout=10).status == wu.Status.COMPLETED


def test_messages_to_other_kinds_and_bad_messages_are_spec_errors(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    shell = sup.shell("true")
    with pytest.raises(wu.SpecError, match="only teammates"):
        sup.tell(shell.id, "hi")
    with pytest.raises(wu.SpecError, match="cannot pickle"):
        t.tell(threading.Lock())
    with pytest.raises(wu.InvalidWorkId):
        sup.ask("not-an-id", "hi")
    with pytest.raises(wu.SpecError, match="from a class"):
        sup.teammate(double)  # type: ignore[arg-type]


def test_kill_mid_ask_fails_the_asker(sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]) -> None:
    entered, gate = fifos
    t = sup.teammate(Accumulator)
    future = t.ask_future(("block", entered.path, gate.path))
    assert entered.wait() == "in handler"
    assert t.kill() is True
    with pytest.raises(wu.TeammateEnded, match="before it answered"):
        future.result(timeout=10)
    assert sup.wait(t.id, timeout=10).reason == wu.Reason.KILLED


def test_cancel_mid_ask_ends_it_killed_and_fails_queued_asks(
    sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]
) -> None:
    entered, _ = fifos
    t = sup.teammate(Accumulator)
    running = t.ask_future(("until cancelled", entered.path))
    queued = t.ask_future("total")
    assert entered.wait() == "in handler"
    assert sup.cancel(t.id, grace=30) is True
    # The running handler finishes and answers; the loop then stops before "total".
    assert running.result(timeout=10) == "saw the cancel"
    with pytest.raises(wu.TeammateEnded):
        queued.result(timeout=10)
    record = sup.wait(t.id, timeout=10)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)


def test_an_answer_sent_before_a_cancelled_teammate_exits_reaches_its_asker(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    # An answer larger than the channel's socket buffer is still being read when
    # the process exits: the teammate's end must wait for it, not fail its ask.
    # (Four at once: the old code failed each about one time in two.)
    size = 8 * 1024 * 1024
    entered = [Fifo(tmp_path / f"entered-{i}") for i in range(4)]
    try:
        teammates = [sup.teammate(Accumulator) for _ in entered]
        running = [
            t.ask_future(("until cancelled", fifo.path, size))
            for t, fifo in zip(teammates, entered, strict=True)
        ]
        queued = [t.ask_future("total") for t in teammates]
        for fifo in entered:
            assert fifo.wait() == "in handler"
        for t in teammates:
            assert sup.cancel(t.id, grace=30) is True
        for future in running:
            assert future.result(timeout=30) == "saw the cancel" + "." * size
        for future in queued:
            with pytest.raises(wu.TeammateEnded):
                future.result(timeout=10)
        for t in teammates:
            record = sup.wait(t.id, timeout=10)
            assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)
    finally:
        for fifo in entered:
            fifo.close()


def test_ask_timeout_leaves_the_teammate_usable(
    sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]
) -> None:
    entered, gate = fifos
    t = sup.teammate(Accumulator)
    with pytest.raises(wu.AskTimeout):
        t.ask(("block", entered.path, gate.path), timeout=0.2)
    assert entered.wait() == "in handler"
    gate.send()
    assert t.ask(7, timeout=10) == 7


def test_an_exception_in_a_tell_fails_the_teammate(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    t.tell(("raise", "nobody to answer"))
    with pytest.raises(wu.TeammateEnded):
        t.ask("total", timeout=10)  # refused, or failed when the teammate ends
    record = sup.wait(t.id, timeout=10)
    assert record.status == wu.Status.FAILED
    assert record.error is not None
    assert "ValueError: nobody to answer" in record.error


def test_a_constructor_that_raises_fails_the_teammate(sup: wu.Supervisor) -> None:
    t = sup.teammate(Broken)
    record = t.wait(timeout=10)
    assert record.status == wu.Status.FAILED
    assert record.error is not None
    assert "RuntimeError: cannot build" in record.error


# -- inside units: the unit context, and reaching each other by ID -----------------------------


def test_the_unit_context_works_inside_handlers(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    assert t.ask(("progress", 0.5), timeout=10) == t.id
    record = sup.get(t.id)  # the progress report travelled ahead of the answer
    assert (record.progress, record.progress_message) == (0.5, "halfway")
    assert t.ask(("child", 21), timeout=10) == 42
    (child,) = sup.list(parent=t.id)
    assert child.kind == "agent"


def agent_talks_to(target: str) -> dict[str, Any]:
    ctx = wu.current()
    ctx.tell(target, 10)
    answer = ctx.ask(target, 5, timeout=10)
    try:
        ctx.ask(target, ("raise", "from the teammate"), timeout=10)
    except ValueError as exc:
        raised = str(exc)
    return {"answer": answer, "raised": raised}


def test_an_agent_tells_and_asks_a_teammate_by_id(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    a = sup.agent(agent_talks_to, t.id)
    assert a.result(timeout=10) == {"answer": 15, "raised": "from the teammate"}


def test_teammates_tell_and_ask_each_other(sup: wu.Supervisor) -> None:
    first, second = sup.teammate(Accumulator, 1), sup.teammate(Accumulator, 1000)
    assert first.ask(("ask", second.id, 1), timeout=10) == 1001
    assert first.ask(("tell", second.id, 10), timeout=10) == "told"
    assert second.ask("total", timeout=10) == 1011
    with pytest.raises(wu.SpecError, match="asked itself"):
        first.ask(("ask", first.id, 1), timeout=10)


def agent_tells_ended(target: str) -> str:
    try:
        wu.current().tell(target, 1)
    except wu.TeammateEnded as exc:
        return str(exc)
    return "delivered"


def test_a_unit_telling_an_ended_teammate_gets_teammate_ended(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)
    t.stop(timeout=10)
    assert "has ended" in sup.agent(agent_tells_ended, t.id).result(timeout=10)


def agent_with_child_teammate() -> dict[str, Any]:
    ctx = wu.current()
    mate = ctx.teammate(Accumulator, 1)
    mate.tell(2)
    answer = mate.ask("total", timeout=10)
    stopped = mate.stop(timeout=10)
    return {"id": mate.id, "answer": answer, "stopped": stopped}


def test_an_agent_starts_stops_and_asks_a_child_teammate(sup: wu.Supervisor) -> None:
    a = sup.agent(agent_with_child_teammate)
    out = a.result(timeout=20)
    assert out["answer"] == 3
    assert out["stopped"] == {"total": 3, "seen": 2}  # on_stop()'s value, decoded
    assert sup.get(out["id"]).parent == a.id


# -- asyncio -------------------------------------------------------------------------


def test_ask_async_leaves_the_event_loop_running(
    sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]
) -> None:
    entered, gate = fifos
    t = sup.teammate(Accumulator)

    async def release() -> None:
        # Runs only if ask_async yields the loop while the teammate is blocked.
        await asyncio.to_thread(entered.wait)
        gate.send("from a concurrent task")

    async def main() -> Any:
        releaser = asyncio.create_task(release())
        answer = await t.ask_async(("block", entered.path, gate.path), timeout=10)
        await releaser
        return answer

    assert asyncio.run(main()) == "from a concurrent task"


def test_ask_async_raises_like_ask(sup: wu.Supervisor) -> None:
    t = sup.teammate(Accumulator)

    async def main() -> None:
        with pytest.raises(ValueError, match="async"):
            await t.ask_async(("raise", "async"), timeout=10)
        t.stop(timeout=10)
        with pytest.raises(wu.TeammateEnded):
            await t.ask_async("total")

    asyncio.run(main())


def test_public_names_are_exported() -> None:
    for name in ("TeammateHandle", "TeammateProxy", "ChildTeammate", "TeammateEnded"):
        assert name in wu.__all__
        assert hasattr(wu, name)
    for name in ("TeammateError", "AskTimeout", "MonitorEvent", "MailboxItem"):
        assert name in wu.__all__
        assert hasattr(wu, name)


def test_closing_the_supervisor_fails_a_waiting_ask(
    tmp_path: Path, fifos: tuple[Fifo, Fifo]
) -> None:
    entered, gate = fifos
    with supervisor(tmp_path) as sup:
        t = sup.teammate(Accumulator)
        future = t.ask_future(("block", entered.path, gate.path))
        assert entered.wait() == "in handler"
        sup.close()  # kills the teammate (reason shutdown): the ask must not hang
        with pytest.raises(wu.TeammateEnded, match="shutdown"):
            future.result(timeout=10)


@pytest.mark.timeout(60)
def test_a_frozen_teammate_flooded_with_tells_can_still_be_killed(sup: wu.Supervisor) -> None:
    # The process is stopped, so nothing reads its channel: once the socket's
    # buffer is full, a blocking send would hold the unit's actor, and the Kill
    # queued behind the tells would never run.
    t = sup.teammate(Accumulator)
    assert t.ask("total", timeout=20) == 0
    # Its pid comes from the zygote, beside the answer: it may land a moment later.
    pid = eventually(lambda: sup.get(t.id).pid, what="the teammate's pid")
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(40):
            t.tell("x" * (256 * 1024))  # 10 MiB in all, far past any socket buffer
        assert sup.kill(t.id)
        record = sup.wait(t.id, timeout=10)
        assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
