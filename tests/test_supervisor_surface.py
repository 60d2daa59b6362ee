"""What ``Supervisor`` offers now that every surface's verbs and options are one definition.

Each surface takes every option another takes (``tests/test_surfaces.py``); here,
those the supervisor gained by that -- ``parent`` on every submit, ``retry`` and
``stall_after`` on dreams, monitors and teammates, ``stream(follow=False)``,
``release(id, lease_id)`` -- and ``WorkHandle.created``, each doing what it says.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import workunits as wu

from .conftest import eventually


class Echo:
    def on_receive(self, message: object) -> object:
        return message


def quiet_until(gate: str) -> str:
    """Say nothing until ``gate`` exists (the test makes it once the stall was heard)."""
    pause = threading.Event()
    while not os.path.exists(gate):
        pause.wait(0.02)
    return "done"


@pytest.mark.timeout(60)
def test_a_handle_says_whether_its_key_created_the_unit(sup: wu.Supervisor) -> None:
    first = sup.shell("true", key="once")
    again = sup.shell("true", key="once")
    assert (first.created, again.created) == (True, False)
    assert again.id == first.id
    assert repr(again) == f"<WorkHandle {first.id} (existing)>"
    mate = sup.teammate(Echo, key="mate")
    assert (mate.created, sup.teammate(Echo, key="mate").created) == (True, False)
    mate.stop(timeout=30)


@pytest.mark.timeout(60)
def test_every_submit_takes_a_parent_and_its_end_ends_the_child(sup: wu.Supervisor) -> None:
    parent = sup.shell("sleep 60")
    child = sup.shell("sleep 60", parent=parent.id)
    mate = sup.teammate(Echo, parent=parent.id)
    assert {r.id for r in sup.list(parent=parent.id)} == {child.id, mate.id}
    sup.kill(parent.id)
    for handle in (child, mate):
        record = handle.wait(timeout=30)
        assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.PARENT_ENDED)


@pytest.mark.timeout(60)
def test_dreams_monitors_and_teammates_take_retry_and_stall_after(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    policy = wu.Retry(max_attempts=2, initial=0.01, jitter=False)
    gate = tmp_path / "gate"
    dream = sup.dream(quiet_until, str(gate), retry=policy, stall_after=0.2)
    monitor = sup.monitor(["printf", "ok\\n"], "ok", retry=policy, stall_after=30)
    for handle in (dream, monitor):
        record = handle.get()
        assert record.retry == policy
    assert sup.get(dream.id).stall_after == 0.2
    inbox = sup.notifications()  # a dream quiet for 0.2 s: its parent (the application) hears
    heard = [inbox.get(timeout=30) for _ in range(3)]  # its stall; the monitor's event, end
    stalls = {n.id for n in heard if isinstance(n, wu.StallEvent)}
    assert stalls == {dream.id}
    gate.touch()
    assert dream.result(timeout=30) == "done"
    with pytest.raises(wu.SpecError, match="restarts or retries"):
        sup.teammate(Echo, restart="permanent", retry=policy)


@pytest.mark.timeout(60)
def test_stream_without_following_reads_what_is_there(sup: wu.Supervisor) -> None:
    unit = sup.shell("printf 'so far'; sleep 60")
    eventually(lambda: sup.read_output(unit.id, offset=0).data == b"so far", what="output")
    assert b"".join(sup.stream(unit.id, follow=False)) == b"so far"  # and it did not wait
    sup.kill(unit.id)


@pytest.mark.timeout(60)
def test_release_by_lease_id_ends_that_lease_only(sup: wu.Supervisor) -> None:
    unit = sup.shell("true")
    unit.wait(timeout=30)
    one, two = sup.retain(unit.id), sup.retain(unit.id)
    assert sup.release(unit.id, one.lease_id)
    assert not sup.release(unit.id, one.lease_id)  # gone already
    assert two.renew()
    assert sup.release(unit.id)  # the rest this supervisor gave out
