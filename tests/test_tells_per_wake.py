"""What the Reaper thread tells one unit actor in one wake reaches it as one message.

A unit's last frame, its channel's close and its exit are often read in one
wake of the Reaper; each tell would cost the actor's thread a wake-up, so they
go as one ``Told``, in the order they were told, once the wake is over. A tell
made on any other thread goes at once, as itself. Nothing here sleeps to
synchronise: the Reaper is held inside a callback while the test lines up
what its next wake will see (as in ``test_ends_per_wake``).
"""

from __future__ import annotations

import gc
import queue
import weakref
from collections.abc import Iterator
from typing import Any

import pykka
import pytest

import workunits as wu
from tests.test_ends_per_wake import Held, Stream
from workunits._wire.actor_messages import ProcessExited, Told
from workunits._zygote.reaper import Reaper
from workunits.actors import AgentSpec, PooledAgentActor
from workunits.actors.process_events import TellActor

WAIT = 10.0

pytestmark = pytest.mark.timeout(30)


class Recorder(pykka.ThreadingActor):
    """Puts every message it receives, as it came, on ``got``."""

    def __init__(self, got: queue.Queue[object]) -> None:
        super().__init__()
        self.got = got

    def on_receive(self, message: Any) -> None:
        self.got.put(message)


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    reaper = Reaper()
    yield reaper
    reaper.close()


@pytest.fixture
def actors() -> Iterator[list[tuple[pykka.ActorRef[Any], queue.Queue[object]]]]:
    made: list[tuple[pykka.ActorRef[Any], queue.Queue[object]]] = []
    for _ in range(2):
        got: queue.Queue[object] = queue.Queue()
        made.append((Recorder.start(got), got))
    yield made
    for ref, _ in made:
        ref.stop()


def test_one_wakes_tells_to_an_actor_arrive_as_one_message_in_order(
    reaper: Reaper, actors: list[tuple[pykka.ActorRef[Any], queue.Queue[object]]]
) -> None:
    (a, got_a), (b, got_b) = actors
    to_a, to_b = TellActor(a, reaper), TellActor(b, reaper)

    def on_chunk(data: bytes) -> None:  # the Reaper's thread
        for letter in data.decode():
            to_a.tell(letter)

    def on_other(data: bytes) -> None:
        to_b.tell("alone")

    held = Held(reaper)
    frames = Stream(reaper, on_chunk)
    other = Stream(reaper, on_other)
    try:
        held.hold()
        frames.theirs.sendall(b"xyz")
        other.theirs.sendall(b".")
        held.release()
        assert got_a.get(timeout=WAIT) == Told(("x", "y", "z"))
        assert got_b.get(timeout=WAIT) == "alone"  # a single tell goes as itself
        assert got_a.empty()
        frames.theirs.sendall(b"w")  # a later wake: a message of its own
        assert got_a.get(timeout=WAIT) == "w"
    finally:
        held.close()
        frames.close()
        other.close()


def test_a_tell_off_the_reapers_thread_goes_at_once(
    reaper: Reaper, actors: list[tuple[pykka.ActorRef[Any], queue.Queue[object]]]
) -> None:
    (a, got_a), _ = actors
    held = Held(reaper)
    try:
        held.hold()  # the Reaper is inside a wake, on its own thread
        TellActor(a, reaper).tell("now")
        assert got_a.get(timeout=WAIT) == "now"
    finally:
        held.release()
        held.close()


def _gather_once_and_close(ref: pykka.ActorRef[Any], got: queue.Queue[object]) -> Reaper:
    """A Reaper whose thread gathered one tell to ``ref``, closed."""
    reaper = Reaper()
    to_actor = TellActor(ref, reaper)

    def on_chunk(data: bytes) -> None:
        to_actor.tell("gathered")

    stream = Stream(reaper, on_chunk)
    try:
        stream.theirs.sendall(b".")
        assert got.get(timeout=WAIT) == "gathered"
    finally:
        stream.close()
        reaper.close()
    return reaper


def test_a_closed_reaper_is_not_kept_by_the_tells_it_gathered(
    actors: list[tuple[pykka.ActorRef[Any], queue.Queue[object]]],
) -> None:
    (a, got_a), _ = actors
    gone = weakref.ref(_gather_once_and_close(a, got_a))
    gc.collect()
    assert gone() is None  # each supervisor's Reaper goes with it


class Counting(PooledAgentActor):
    """A pooled kind that counts what its actors receive, ``Told`` and what it holds."""

    kind = "counting"
    got: queue.Queue[object] = queue.Queue()

    def on_receive(self, message: Any) -> Any:
        type(self).got.put(message)
        return super().on_receive(message)


def test_a_units_actor_handles_each_message_a_told_holds(state_dir: Any) -> None:
    """Real pooled units end whole, whether their events came in one wake or several:
    every unit's actor handled its ``ProcessExited`` once, inside a ``Told`` or not."""
    with wu.Supervisor(state_dir, install_signal_handlers=False, pool_size=1) as sup:
        sup.register_kind("q", Counting)
        handles = [sup.submit("q", AgentSpec.build(abs, (-i,), {})) for i in range(20)]
        assert [h.result(timeout=WAIT) for h in handles] == list(range(20))
    seen: list[object] = []
    while not Counting.got.empty():
        seen.append(Counting.got.get_nowait())
    inner = [m for m in seen if not isinstance(m, Told)]
    assert sum(isinstance(m, ProcessExited) for m in inner) == 20
    for told in (m for m in seen if isinstance(m, Told)):
        assert all(m in inner for m in told.messages)  # each handled on its own after
