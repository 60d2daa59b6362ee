"""A unit asking about a child that ended and left memory is answered from the ledger.

As the supervisor's own calls are: ``get``/``wait``/``result`` give the record
and the value, ``kill``/``cancel``/``stop`` say False (nothing runs), a tell
says the teammate ended; and every error reaches the unit as its own class,
caught as ``wu.UnknownWork`` and the rest, never as a bare WorkunitsError.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import workunits as wu
from tests import children_jobs
from tests.conftest import eventually

pytestmark = pytest.mark.timeout(120)


def _asked(tmp_path: Path, body: Callable[[], Any]) -> tuple[dict[str, Any], str]:
    with wu.Supervisor(
        tmp_path / "state",
        install_signal_handlers=False,
        eviction_grace=0,
        max_resident_ended=0,
    ) as sup:
        parent = sup.agent(body)
        eventually(
            lambda: sup.get(parent.id).progress_message == "waiting for go",
            what="the parent to take its child's notice",
        )
        (child,) = [r.id for r in sup.list(parent=parent.id)]
        eventually(lambda: child not in sup.resident_ids(), what="the child to leave memory")
        assert sup.get(child).status is wu.Status.COMPLETED  # the ledger answers
        assert sup.kill(child) is False
        sup.signal(parent.id, "go")
        record = sup.wait(parent.id, timeout=60)
        assert record.status is wu.Status.COMPLETED, record.error
        answers: dict[str, Any] = sup.result(parent.id)
    return answers, child


def test_every_ctx_call_answers_for_a_child_that_left_memory(tmp_path: Path) -> None:
    answers, child = _asked(tmp_path, children_jobs.ask_about_a_child_that_left_memory)
    assert answers == {
        "notice": child,
        "get": "completed",
        "wait": "completed",
        "result": 42,
        "kill": False,
        "cancel": False,
        "unknown": "UnknownWork",
        "tell": "SpecError",
    }


def test_an_ended_teammate_that_left_memory_stops_false_and_takes_no_tell(tmp_path: Path) -> None:
    answers, _ = _asked(tmp_path, children_jobs.stop_an_ended_teammate)
    assert answers == {"stop": False, "tell": "TeammateEnded"}


def _record(status: wu.Status) -> wu.WorkRecord:
    return wu.WorkRecord(
        id="a00000001", kind="agent", status=status, parent=None, description="", created_at=1.0
    )


@pytest.mark.parametrize(
    "error",
    [
        wu.WorkExpired(_record(wu.Status.FAILED)),
        wu.StaleAttempt("a00000001", 1, 2),
        wu.NotFinished(_record(wu.Status.RUNNING), 1.0),
        wu.SupervisorBusy("busy", 7),
        wu.CommitUnknown("unknown", "a00000001"),
        wu.UnknownWork("a00000001 is unknown"),
    ],
)
def test_every_error_comes_back_from_its_pickle_as_itself(error: wu.WorkunitsError) -> None:
    import pickle  # noqa: PLC0415

    again = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes, just made
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert again.__dict__ == error.__dict__
