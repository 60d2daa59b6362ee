"""``Mailbox`` on its own: what it holds in memory, what it asks its source, how it
waits, in threads and in an event loop (the supervisor's tests reach it through
the actor, where most of these paths are hard to steer)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from workunits._claim import Claim
from workunits._errors import MailboxClosed, NoNotification
from workunits._mailbox import Mailbox
from workunits._record import MailboxItem, MonitorEvent, Notification
from workunits._status import Status

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
