"""Actors without a thread of their own (``actors.inline``): a shell's runtime.

The thread that puts a message handles it; the actor still handles one
message at a time, in the order they came, as on a thread of its own.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pykka
import pytest

from tests.conftest import eventually
from workunits.actors.inline import InlineInbox, start_inline

SENDERS = 8
EACH = 300


class Recorder(pykka.ThreadingActor):
    """Records what it handles, and counts handlers that overlap (there must be none)."""

    last: Recorder | None = None  # the one a test just started

    def __init__(self, gate: threading.Event | None = None) -> None:
        super().__init__()
        Recorder.last = self
        self.gate = gate  # on_start waits for it (a launch that takes its time)
        self.handled: list[Any] = []
        self.threads: set[str] = set()
        self.overlaps = 0
        self._inside = False
        self.failures: list[BaseException | None] = []
        self.queued: pykka.Future[Any] | None = None
        self._pipe: tuple[int, ...] = os.pipe()

    @staticmethod
    def _create_actor_inbox() -> InlineInbox:
        return InlineInbox()

    def _start_actor_loop(self) -> None:
        inbox = self.actor_inbox
        assert isinstance(inbox, InlineInbox)
        if self.gate is None:
            start_inline(self, inbox, None)
        else:
            start_inline(self, inbox, lambda setup: threading.Thread(target=setup).start())

    def on_start(self) -> None:
        if self.gate is not None:
            assert self.gate.wait(30)
        self.handled.append("started")

    def on_receive(self, message: Any) -> Any:
        if self._inside:
            self.overlaps += 1
        self._inside = True
        try:
            self.threads.add(threading.current_thread().name)
            match message:
                case ("again", n):  # tells itself: handled after this handler, not inside it
                    self.actor_ref.tell(("after", n))
                    self.handled.append(("again", n))
                case "boom":
                    raise ValueError("boom")
                case "interrupt":  # with an ask of its own queued behind it
                    self.queued = self.actor_ref.ask("queued", block=False)
                    raise KeyboardInterrupt
                case "stop yourself":
                    self.stop()
                case _:
                    self._let_others_run()
                    self.handled.append(message)
            return message
        finally:
            self._inside = False

    def _let_others_run(self) -> None:
        """A write and a read on a pipe, which let go of the GIL: a second sender's thread
        runs meanwhile, and would enter this actor now were two handlers allowed at once."""
        os.write(self._pipe[1], b".")
        os.read(self._pipe[0], 1)

    def on_stop(self) -> None:
        self._close_pipe()

    def _close_pipe(self) -> None:
        for fd in self._pipe:
            os.close(fd)
        self._pipe = ()

    def on_failure(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.failures.append(exc)
        self._close_pipe()


def started() -> Recorder:
    actor = Recorder.last
    assert actor is not None
    return actor


@pytest.mark.timeout(60)
def test_messages_from_many_threads_are_handled_one_at_a_time_in_each_senders_order() -> None:
    ref = Recorder.start()
    actor = started()
    go = threading.Barrier(SENDERS)

    def send(sender: int) -> None:
        go.wait()
        for n in range(EACH):
            ref.tell((sender, n))

    senders = [threading.Thread(target=send, args=(s,), name=f"sender-{s}") for s in range(SENDERS)]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join(30)
    assert actor.overlaps == 0
    assert len(actor.handled) == 1 + SENDERS * EACH
    for sender in range(SENDERS):
        assert [n for s, n in actor.handled[1:] if s == sender] == list(range(EACH))
    assert actor.threads <= {t.name for t in senders}  # no thread of its own
    ref.stop()


@pytest.mark.timeout(60)
def test_what_comes_during_a_slow_start_waits_for_it() -> None:
    gate = threading.Event()
    ref = Recorder.start(gate)
    actor = started()
    ref.tell("early")
    answer = ref.ask("asked early", block=False)
    assert actor.handled == []
    gate.set()
    assert answer.get(timeout=30) == "asked early"
    assert actor.handled == ["started", "early", "asked early"]
    ref.stop()


@pytest.mark.timeout(60)
def test_a_message_told_by_a_handler_is_handled_after_it() -> None:
    ref = Recorder.start()
    actor = started()
    ref.tell(("again", 1))
    assert actor.handled == ["started", ("again", 1), ("after", 1)]
    assert actor.overlaps == 0
    ref.stop()


@pytest.mark.timeout(60)
def test_a_stopped_actor_refuses_asks_and_takes_no_tells() -> None:
    ref = Recorder.start()
    actor = started()
    ref.tell("stop yourself")
    assert not ref.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        ref.ask("too late", timeout=5)
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("too late")
    assert actor.handled == ["started"]


@pytest.mark.timeout(60)
def test_an_ask_that_raises_goes_to_its_asker_and_a_tell_that_raises_fails_the_actor() -> None:
    ref = Recorder.start()
    actor = started()
    with pytest.raises(ValueError, match="boom"):
        ref.ask("boom", timeout=5)
    assert ref.is_alive()
    assert actor.failures == []
    ref.tell("boom")
    eventually(lambda: not ref.is_alive(), timeout=5, what="the actor to stop")
    assert [type(e) for e in actor.failures] == [ValueError]


@pytest.mark.timeout(60)
def test_a_handler_that_raises_keyboard_interrupt_fails_the_actor_and_reaches_its_sender() -> None:
    ref = Recorder.start()
    actor = started()
    with pytest.raises(KeyboardInterrupt):
        ref.tell("interrupt")  # handled here, in this thread
    assert not ref.is_alive()
    # It failed (on_failure: a unit's kind ends its unit there), not only stopped.
    assert [type(e) for e in actor.failures] == [KeyboardInterrupt]
    assert actor.queued is not None
    with pytest.raises(pykka.ActorDeadError):
        actor.queued.get(timeout=5)  # refused, not left waiting
