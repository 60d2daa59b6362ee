"""Unit actors' threads are reused from one ended unit to the next (``actors.threads``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import ClassVar

from tests.conftest import eventually
from tests.helpers import WAIT
from workunits import Outcome, Status, Supervisor, WorkActor, _outputfile
from workunits.actors.threads import JOIN_FOR, ActorThreads

# The thread each RecordsItsThread unit's actor started in, in order (this process).
_seen: list[threading.Thread] = []


class RecordsItsThread(WorkActor):
    """Notes the thread its actor runs in (``on_start`` is in that thread), then completes."""

    kind: ClassVar[str] = "threadrec"

    def launch(self) -> None:
        os.close(_outputfile.create(self.unit.output_path))

    def on_start(self) -> None:
        super().on_start()
        _seen.append(threading.current_thread())
        self.finish(Outcome(Status.COMPLETED, exit_code=0))

    def signal_work(self, signum: int) -> None:
        self.finish(self.outcome_for_exit(None, signum))


def test_a_unit_after_an_ended_one_runs_on_its_thread_not_a_new_one(sup: Supervisor) -> None:
    sup.register_kind("q", RecordsItsThread)
    _seen.clear()
    first = sup.wait(sup.submit("q", None).id, WAIT)
    assert first.status is Status.COMPLETED
    # Its actor stops right after its end is reported; then its thread waits for the next.
    eventually(lambda: _idle_now(sup), WAIT)
    second = sup.wait(sup.submit("q", None).id, WAIT)
    assert second.status is Status.COMPLETED
    assert len(_seen) == 2
    assert _seen[1] is _seen[0]
    assert _seen[1].name.startswith("RecordsItsThread-")  # named after the actor it runs


def _idle_now(sup: Supervisor) -> bool:
    threads: ActorThreads = sup._runtime.threads
    return threads.idle() > 0


def _note_then_set(ran: list[threading.Thread], done: threading.Event) -> Callable[[], None]:
    def loop() -> None:
        ran.append(threading.current_thread())
        done.set()

    return loop


def _loop_then_wait(started: threading.Event, release: threading.Event) -> Callable[[], None]:
    def loop() -> None:
        started.set()
        release.wait(WAIT)

    return loop


def test_a_waiting_thread_takes_the_next_loop_and_close_ends_it() -> None:
    threads = ActorThreads(idle_for=WAIT)
    ran: list[threading.Thread] = []
    done = threading.Event()
    threads.run(lambda: ran.append(threading.current_thread()), "first")
    eventually(lambda: threads.idle() == 1, WAIT)
    threads.run(_note_then_set(ran, done), "second")
    assert done.wait(WAIT)
    assert ran[0] is ran[1]
    assert ran[1].name == "second"
    eventually(lambda: threads.idle() == 1, WAIT)
    threads.close()
    assert not ran[0].is_alive()


def test_a_thread_that_waits_too_long_exits() -> None:
    threads = ActorThreads(idle_for=0.05)
    ran: list[threading.Thread] = []
    threads.run(lambda: ran.append(threading.current_thread()), "short")
    eventually(lambda: ran and not ran[0].is_alive(), WAIT)
    assert threads.idle() == 0
    threads.close()


def test_no_more_than_max_idle_threads_wait() -> None:
    threads = ActorThreads(idle_for=WAIT, max_idle=1)
    started = [threading.Event(), threading.Event()]
    release = threading.Event()
    for event in started:
        threads.run(_loop_then_wait(event, release), "busy")
    assert all(event.wait(WAIT) for event in started)  # two threads: the first was busy
    release.set()
    eventually(lambda: threads.idle() == 1 and threads.count() == 1, WAIT)
    threads.close()
    assert threads.count() == 0


def test_a_loop_that_raises_does_not_cost_its_thread() -> None:
    threads = ActorThreads(idle_for=WAIT)
    ran: list[threading.Thread] = []

    def broken() -> None:
        ran.append(threading.current_thread())
        raise RuntimeError("a bug in a loop")

    threads.run(broken, "broken")
    eventually(lambda: threads.idle() == 1, WAIT)
    done = threading.Event()
    threads.run(_note_then_set(ran, done), "next")
    assert done.wait(WAIT)
    assert ran[0] is ran[1]
    threads.close()


def test_close_from_outside_leaves_no_thread_behind() -> None:
    threads = ActorThreads(idle_for=WAIT)
    for n in range(3):
        threads.run(lambda: None, f"t{n}")
    eventually(lambda: threads.count() == threads.idle(), WAIT)
    threads.close()
    assert threads.count() == 0


def test_close_does_not_wait_for_a_thread_still_running_an_actor() -> None:
    threads = ActorThreads(idle_for=WAIT)
    started, release = threading.Event(), threading.Event()
    threads.run(_loop_then_wait(started, release), "still running")
    assert started.wait(WAIT)
    closing = threading.Thread(target=threads.close)
    closing.start()
    closing.join(JOIN_FOR / 2)  # close() would wait the whole JOIN_FOR on a busy thread
    assert not closing.is_alive()
    assert threads.count() == 1
    release.set()  # the actor stops: its thread exits, it does not wait for another
    eventually(lambda: threads.count() == 0, WAIT)
