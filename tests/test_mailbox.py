"""``Mailbox`` on its own: what it holds in memory, what it asks its source, how it
waits, in threads and in an event loop (the supervisor's tests reach it through
the actor, where most of these paths are hard to steer)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from workunits._core.claim import Claim, NoticeSource
from workunits._core.errors import MailboxClosed, NoNotification
from workunits._core.mailbox import Mailbox
from workunits._core.record import MailboxItem, MonitorEvent, Notification
from workunits._core.status import Status

CLOSED = "the supervisor is closed and the mailbox is empty"
WAIT = 10.0  # bounds a wait that should end at once; only a broken mailbox reaches it


def _notice(work_id: str = "x00000001") -> Notification:
    return Notification(
        id=work_id,
        kind="shell",
        status=Status.COMPLETED,
        exit_code=0,
        signal=None,
        error=None,
        reason=None,
        description="",
        output_tail=b"",
        ended_at=1.0,
    )


def _event() -> MonitorEvent:
    return MonitorEvent(id="m00000001", line="ERROR: disk full", at=1.0)


def _later(act: Callable[[], None], delay: float = 0.1) -> threading.Thread:
    """Run ``act`` in a thread once ``delay`` s have passed (the consumer is waiting by then)."""
    thread = threading.Timer(delay, act)
    thread.start()
    return thread


class _Source:
    """A source holding claims from elsewhere, counting how often it is asked."""

    def __init__(self, *held: Claim[MailboxItem] | None) -> None:
        self.held = list(held)
        self.asked = 0
        self.on_ask: Callable[[], None] | None = None

    def __call__(self) -> Claim[MailboxItem] | None:
        self.asked += 1
        if self.on_ask is not None:
            self.on_ask()
        return self.held.pop(0) if self.held else None


# -- in memory -------------------------------------------------------------------


def test_a_notice_held_in_memory_is_acknowledged_through_on_ack() -> None:
    acked: list[Notification] = []
    box = Mailbox("p00000001", on_ack=acked.append)
    notice = _notice()
    box.put(notice)
    assert len(box) == 1
    held = box.claim(timeout=0)
    assert held.notice == notice
    assert acked == []  # not before the consumer says so
    assert held.ack() is True
    assert acked == [notice]
    assert len(box) == 0


def test_a_released_notice_comes_back_first_marked_redelivered() -> None:
    box = Mailbox("p00000001", on_ack=lambda _: None)
    first, second = _notice("x00000001"), _notice("x00000002")
    box.put(first)
    box.put(second)
    held = box.claim(timeout=0)
    assert held.release() is True
    again = box.claim(timeout=0)
    assert again.notice.id == first.id
    assert isinstance(again.notice, Notification)
    assert again.notice.redelivered
    assert not first.redelivered  # a copy: the one handed out first is unchanged
    assert box.claim(timeout=0).notice == second


def test_a_monitor_event_is_handed_out_but_never_acknowledged() -> None:
    acked: list[Notification] = []
    box = Mailbox("p00000001", on_ack=acked.append)
    event = _event()
    box.put(event)
    held = box.claim(timeout=0)
    assert held.notice == event
    assert held.ack() is True
    assert acked == []
    box.put(event)
    assert box.claim(timeout=0).release() is True
    assert len(box) == 0  # a monitor event handed back is not delivered again


def test_without_on_ack_an_acknowledgement_still_settles_the_claim() -> None:
    box = Mailbox(None)
    box.put(_notice())
    held = box.claim(timeout=0)
    assert held.ack() is True
    assert held.ack() is False


def test_claim_nowait_takes_what_memory_holds_before_asking_the_source() -> None:
    from_source = Claim[MailboxItem](_notice("x00000009"))
    source = _Source(from_source)
    box = Mailbox(None, source=source)
    notice = _notice("x00000001")
    box.put(notice)
    held = box.claim_nowait()
    assert held is not None
    assert held.notice == notice
    assert source.asked == 0
    assert box.claim_nowait() is from_source
    assert box.claim_nowait() is None
    assert source.asked == 2


def _racing_source() -> tuple[Mailbox, Claim[MailboxItem], MonitorEvent]:
    """A mailbox whose source, once asked, gives a notice while an event was put meanwhile:
    the supervisor put the monitor's event, then committed its notice, between the
    consumer's look at memory and its ask of the ledger."""
    from_source = Claim[MailboxItem](_notice("m00000001"))
    source = _Source(from_source)
    box = Mailbox(None, source=source, poll=60)
    event = _event()

    def put_first() -> None:
        source.on_ask = None
        box.put(event)

    source.on_ask = put_first
    return box, from_source, event


@pytest.mark.parametrize("how", ["claim", "claim_nowait", "claim_async"])
def test_an_event_put_while_the_source_is_asked_comes_before_the_notice_it_gave(how: str) -> None:
    """Before, the notice came first, and a consumer that stops at it lost the event."""
    box, from_source, event = _racing_source()

    def claim() -> Claim[MailboxItem] | None:
        if how == "claim":
            return box.claim(timeout=WAIT)
        if how == "claim_nowait":
            return box.claim_nowait()
        return asyncio.run(box.claim_async(timeout=WAIT))

    first = claim()
    assert first is not None
    assert first.notice == event
    later = MonitorEvent(id="m00000002", line="ERROR: again", at=2.0)
    box.put(later)  # after the notice was written: it comes after it
    assert claim() is from_source
    second = claim()
    assert second is not None
    assert second.notice == later
    assert box.claim_nowait() is None


def test_get_nowait_takes_an_item_or_says_there_is_none() -> None:
    acked: list[Notification] = []
    box = Mailbox("p00000001", on_ack=acked.append)
    assert box.get_nowait() is None
    notice = _notice()
    box.put(notice)
    assert box.get_nowait() == notice
    assert acked == [notice]
    assert box.get_nowait() is None


def test_len_counts_memory_and_what_the_source_has_waiting() -> None:
    box = Mailbox(None)
    assert len(box) == 0
    box.put(_notice())
    assert len(box) == 1
    sourced = Mailbox(None, source=_Source(), waiting=lambda: 3)
    sourced.put(_notice())
    assert len(sourced) == 4


# -- waiting (threads) -------------------------------------------------------------


def test_claim_waits_for_a_notice_put_later() -> None:
    box = Mailbox("p00000001")
    notice = _notice()
    _later(lambda: box.put(notice))
    assert box.claim(timeout=WAIT).notice == notice


def test_claim_without_a_timeout_waits_for_a_notice_put_later() -> None:
    box = Mailbox("p00000001")
    notice = _notice()
    _later(lambda: box.put(notice))
    assert box.claim().notice == notice


def test_claim_times_out_after_its_timeout_not_before() -> None:
    box = Mailbox("p00000001")
    started = time.monotonic()
    with pytest.raises(NoNotification, match=r"^no notification within 0\.2 s$"):
        box.claim(timeout=0.2)
    assert time.monotonic() - started >= 0.2


def test_a_closed_empty_mailbox_says_so_but_first_hands_out_what_it_holds() -> None:
    box = Mailbox("p00000001")
    notice = _notice()
    box.put(notice)
    box.close()
    assert box.claim(timeout=0).notice == notice
    with pytest.raises(MailboxClosed, match=f"^{CLOSED}$"):
        box.claim(timeout=WAIT)


def test_a_wake_during_a_source_ask_is_not_lost() -> None:
    # The source is asked, finds nothing, and a notice is written (wake) before the
    # consumer waits: it must ask again at once, not a poll later. A wake before
    # that one makes sure the count moves on each wake, not only the first.
    later = Claim[MailboxItem](_notice())
    source = _Source(None, later)
    box = Mailbox(None, source=source, poll=60)
    box.wake()
    source.on_ask = box.wake
    started = time.monotonic()
    assert box.claim(timeout=5).notice == later.notice
    assert time.monotonic() - started < 2.5  # not after waiting out the timeout
    assert source.asked == 2


def test_a_waiting_consumer_asks_the_source_again_every_poll() -> None:
    # A notice handed back by a consumer elsewhere comes with no wake.
    later = Claim[MailboxItem](_notice())
    source = _Source(None, None, later)
    box = Mailbox(None, source=source, poll=0.05)
    assert box.claim(timeout=WAIT).notice == later.notice
    assert source.asked == 3


# -- waiting (an event loop) ------------------------------------------------------------


def test_async_claim_takes_what_memory_holds() -> None:
    box = Mailbox("p00000001")
    notice = _notice()
    box.put(notice)
    held = asyncio.run(box.claim_async(timeout=WAIT))
    assert held.notice == notice


def test_async_claim_waits_for_a_notice_put_from_another_thread() -> None:
    box = Mailbox("p00000001")
    notice = _notice()

    async def main() -> Claim[MailboxItem]:
        _later(lambda: box.put(notice))
        return await box.claim_async(timeout=WAIT)

    assert asyncio.run(main()).notice == notice


def test_async_claim_times_out_with_no_notification() -> None:
    box = Mailbox("p00000001")
    with pytest.raises(NoNotification, match=r"^no notification within 0\.1 s$"):
        asyncio.run(box.claim_async(timeout=0.1))


def test_async_claim_on_a_closed_empty_mailbox_says_so() -> None:
    box = Mailbox("p00000001")
    box.close()
    with pytest.raises(MailboxClosed, match=f"^{CLOSED}$"):
        asyncio.run(box.claim_async(timeout=WAIT))


def test_async_claim_asks_the_source_again_every_poll() -> None:
    later = Claim[MailboxItem](_notice())
    source = _Source(None, None, later)
    box = Mailbox(None, source=source, poll=0.05)
    held = asyncio.run(box.claim_async(timeout=WAIT))
    assert held.notice == later.notice
    assert source.asked == 3


def test_get_async_acknowledges_in_memory_and_from_the_source() -> None:
    acked: list[Notification] = []
    box = Mailbox("p00000001", on_ack=acked.append)
    notice = _notice()
    box.put(notice)
    assert asyncio.run(box.get_async(timeout=WAIT)) == notice
    assert acked == [notice]

    settled: list[str] = []

    def ack() -> bool:
        settled.append("ack")
        return True

    from_source = Claim[MailboxItem](_notice("x00000002"), ack=ack)
    sourced = Mailbox(None, source=_Source(from_source))
    assert asyncio.run(sourced.get_async(timeout=WAIT)).id == "x00000002"
    assert settled == ["ack"]


def test_a_mailbox_says_whose_it_is() -> None:
    assert Mailbox("p00000001").owner == "p00000001"
    assert Mailbox(None).owner is None


def test_by_default_a_waiting_consumer_asks_the_source_again_within_half_a_second() -> None:
    # A notice a consumer elsewhere hands back reaches a waiting one within the
    # default poll (0.5 s); the bound leaves 0.75 s for a busy machine.
    later = Claim[MailboxItem](_notice())
    box = Mailbox(None, source=_Source(None, later))
    started = time.monotonic()
    assert box.claim(timeout=5).notice == later.notice
    assert time.monotonic() - started < 1.25


def test_a_notice_put_while_the_source_is_asked_is_taken_at_once() -> None:
    # The put lands between the consumer's look at memory and its wait: it must
    # not wait (for the poll, or its timeout) with a notice in hand.
    source = _Source()
    box = Mailbox(None, source=source, poll=60)
    notice = _notice()
    source.on_ask = lambda: box.put(notice) if source.asked == 1 else None
    started = time.monotonic()
    assert box.claim(timeout=5).notice == notice
    assert time.monotonic() - started < 2.5


def test_a_consumer_waiting_on_an_empty_source_asks_it_once_per_poll() -> None:
    # Not in a spin: between asks it waits for a poll (or a put, a wake, a close).
    source = _Source()
    box = Mailbox(None, source=source, poll=0.1)
    with pytest.raises(NoNotification):
        box.claim(timeout=0.35)
    assert 2 <= source.asked <= 6


def test_a_timeout_shorter_than_the_poll_is_kept() -> None:
    box = Mailbox(None, source=_Source(), poll=60)
    started = time.monotonic()
    with pytest.raises(NoNotification):
        box.claim(timeout=0.2)
    assert time.monotonic() - started < 5


def test_claim_without_a_timeout_asks_the_source_every_poll() -> None:
    later = Claim[MailboxItem](_notice())
    source = _Source(None, later)
    box = Mailbox(None, source=source, poll=0.05)
    assert box.claim().notice == later.notice


# -- async waiters whose loop went away ---------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("with_source", [False, True])
def test_a_consumer_loop_that_closed_leaves_no_waiter_behind(with_source: bool) -> None:
    # An async wait that timed out (its loop then closed with asyncio.run) must leave
    # nothing for put, wake or close to reach: they run on the supervisor's thread.
    mailbox = Mailbox(owner=None, source=_Source() if with_source else None, poll=0.01)

    async def wait_briefly() -> None:
        with pytest.raises(NoNotification):
            await mailbox.get_async(timeout=0.05)

    asyncio.run(wait_briefly())
    assert mailbox._async_waiters == []
    mailbox.put(_notice())  # raised RuntimeError (event loop is closed) before the fix
    mailbox.wake()
    assert mailbox.get(timeout=WAIT).id == "x00000001"
    mailbox.close()


@pytest.mark.timeout(30)
def test_polling_async_waiter_registers_one_wakeup_at_a_time() -> None:
    mailbox = Mailbox(owner=None, source=_Source(), poll=0.005)

    async def wait_a_while() -> int:
        waiter = asyncio.create_task(mailbox.get_async(timeout=5))
        for _ in range(20):  # several polls of the source go by
            await asyncio.sleep(0.005)
        registered = len(mailbox._async_waiters)
        mailbox.put(_notice())
        assert (await waiter).id == "x00000001"
        return registered

    assert asyncio.run(wait_a_while()) <= 1
    assert mailbox._async_waiters == []


@pytest.mark.timeout(30)
def test_async_iteration_takes_every_item_then_ends_when_the_mailbox_closes() -> None:
    mailbox = Mailbox(owner=None)
    mailbox.put(_notice("x00000001"))
    mailbox.put(_event())

    async def iterate() -> list[str]:
        _later(mailbox.close)  # while the loop waits for a third item
        return [item.id async for item in mailbox]

    assert asyncio.run(iterate()) == ["x00000001", "m00000001"]


# -- a cancelled async wait loses nothing -------------------------------------------------


class _Settles:
    """A claim's ack and release, recorded; ``ack_gate`` holds an ack until it is set."""

    def __init__(self) -> None:
        self.acked = threading.Event()
        self.released = threading.Event()
        self.acking = threading.Event()
        self.ack_gate: threading.Event | None = None

    def claim(self, work_id: str = "x00000001") -> Claim[MailboxItem]:
        return Claim[MailboxItem](_notice(work_id), ack=self.ack, release=self.release)

    def ack(self) -> bool:
        self.acking.set()
        if self.ack_gate is not None:
            assert self.ack_gate.wait(WAIT)
        self.acked.set()
        return True

    def release(self) -> bool:
        self.released.set()
        return True


class _Submissions(ThreadPoolExecutor):
    """One worker; ``queued[n]`` is set once ``n + 1`` jobs were submitted."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.queued = [threading.Event() for _ in range(4)]
        self._count = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        if self._count < len(self.queued):
            self.queued[self._count].set()
        self._count += 1
        return future


async def _in_another_thread(event: threading.Event) -> bool:
    """Wait for ``event`` without the loop's default executor (a test fills that one)."""
    with ThreadPoolExecutor(max_workers=1) as other:
        return await asyncio.get_running_loop().run_in_executor(other, event.wait, WAIT)


@pytest.mark.timeout(30)
def test_a_wait_cancelled_while_the_source_claims_gives_the_claim_back() -> None:
    settles = _Settles()
    asked, go = threading.Event(), threading.Event()

    def source() -> Claim[MailboxItem] | None:
        asked.set()
        assert go.wait(WAIT)
        return settles.claim()

    box = Mailbox(None, source=source)

    async def cancel_while_asked() -> None:
        task = asyncio.create_task(box.get_async(timeout=WAIT))
        assert await _in_another_thread(asked)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        go.set()  # the source now returns what it claimed, to nobody

    asyncio.run(cancel_while_asked())
    assert settles.released.wait(WAIT), "the claim of a cancelled wait was never given back"
    assert not settles.acked.is_set()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("sourced", [True, False], ids=["mailbox", "notice-source"])
def test_get_async_cancelled_while_it_acknowledges_returns_the_notice(sourced: bool) -> None:
    """Acknowledged for this consumer: it must be handed over, not dropped with the cancel."""
    settles = _Settles()
    settles.ack_gate = threading.Event()
    claim = settles.claim()
    mailbox: Any = Mailbox(None, source=_Source(claim)) if sourced else _OneClaim(claim)

    async def cancel_while_acking() -> Notification:
        task = asyncio.create_task(mailbox.get_async(timeout=WAIT))
        assert await _in_another_thread(settles.acking)
        task.cancel()
        assert settles.ack_gate is not None
        settles.ack_gate.set()
        return await task  # type: ignore[no-any-return]

    assert asyncio.run(cancel_while_acking()) == claim.notice
    assert settles.acked.is_set()
    assert not settles.released.is_set()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("sourced", [True, False], ids=["mailbox", "notice-source"])
def test_get_async_cancelled_before_its_acknowledgement_runs_releases_the_claim(
    sourced: bool,
) -> None:
    settles = _Settles()
    busy = threading.Event()
    executor = _Submissions()
    claim = settles.claim()

    def claimed() -> Claim[MailboxItem]:
        # Runs in the executor's one worker: keep it busy, so the ack queues behind.
        executor.submit(busy.wait, WAIT)
        return claim

    mailbox: Any = Mailbox(None, source=claimed) if sourced else _OneClaim(claim, claimed)

    async def cancel_before_the_ack() -> None:
        asyncio.get_running_loop().set_default_executor(executor)
        task = asyncio.create_task(mailbox.get_async(timeout=WAIT))
        assert await _in_another_thread(executor.queued[2])  # the look, busy, the ack
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        busy.set()

    asyncio.run(cancel_before_the_ack())
    executor.shutdown(wait=True)
    assert settles.released.wait(WAIT)
    assert not settles.acked.is_set()


@pytest.mark.timeout(30)
def test_take_async_cancelled_before_its_acknowledgement_runs_still_acknowledges() -> None:
    """The block has acted on the notice: the claim must not stay held by a live consumer."""
    settles = _Settles()
    busy = threading.Event()
    executor = _Submissions()
    mailbox = _OneClaim(settles.claim())

    async def cancel_after_the_block() -> None:
        asyncio.get_running_loop().set_default_executor(executor)

        async def consume() -> None:
            async with mailbox.take_async(timeout=WAIT):
                executor.submit(busy.wait, WAIT)  # the ack queues behind it

        task = asyncio.create_task(consume())
        assert await _in_another_thread(executor.queued[2])  # the look, busy, the ack
        task.cancel()
        busy.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_after_the_block())
    executor.shutdown(wait=True)
    assert settles.acked.is_set()
    assert not settles.released.is_set()


class _OneClaim(NoticeSource[MailboxItem]):
    """The base class's async twins over one claim (as a client's mailbox has them)."""

    def __init__(
        self,
        claim: Claim[MailboxItem],
        look: Callable[[], Claim[MailboxItem]] | None = None,
    ) -> None:
        self._look = look or (lambda: claim)
        self._taken = False

    def claim(self, timeout: float | None = None) -> Claim[MailboxItem]:
        raise AssertionError("the async twins look with claim_nowait")

    def claim_nowait(self) -> Claim[MailboxItem] | None:
        if self._taken:
            return None
        self._taken = True
        return self._look()
