"""A user's kind that raises what is not an Exception fails its own unit only (invariant 14).

``sys.exit`` in a hook, a ``KeyboardInterrupt``, asyncio's ``CancelledError``
or ``wu.Cancelled`` from a kind wrapping asyncio work: pykka's actor loop
answers each by stopping every actor in the process, the supervisor's
included. These tests run such kinds next to a shell unit and check that only
the kind's unit fails, naming the bug, and that the supervisor carries on.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from tests.helpers import WAIT
from workunits import Cancelled, KindFault, Outcome, Status, Supervisor, WorkActor
from workunits._util import outputfile
from workunits.actors import ProcessExited, SpawnExec

RAISES: dict[str, Callable[[], BaseException]] = {
    "SystemExit": lambda: SystemExit("the kind called sys.exit"),
    "KeyboardInterrupt": KeyboardInterrupt,
    "CancelledError": asyncio.CancelledError,
    "Cancelled": Cancelled,
    "ValueError": lambda: ValueError("on_start failed"),
}


class Faulty(WorkActor):
    """Raises ``RAISES[spec[1]]()`` in the hook named by ``spec[0]``; else a quiet kind."""

    kind: ClassVar[str] = "faulty"

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        cls._maybe_raise(spec, "validate_spec")

    @staticmethod
    def _maybe_raise(spec: tuple[str, str], hook: str) -> None:
        where, what = spec
        if where == hook:
            raise RAISES[what]()

    def launch_early(self) -> bool:
        return bool(self.unit.spec[0] == "launch_early")

    def on_start(self) -> None:
        super().on_start()
        self._maybe_raise(self.unit.spec, "on_start")

    def launch(self) -> None:
        os.close(outputfile.create(self.unit.output_path))
        self._maybe_raise(self.unit.spec, "launch")
        self._maybe_raise(self.unit.spec, "launch_early")

    def signal_work(self, signum: int) -> None:
        self._maybe_raise(self.unit.spec, "signal_work")
        self.finish(self.outcome_for_exit(None, signum))


class InlineFaulty(Faulty):
    """The same, saying ``inline`` (which changes nothing now: a thread of its own too)."""

    kind: ClassVar[str] = "faulty-inline"
    inline: ClassVar[bool] = True


class FaultyOnExit(Faulty):
    """Runs ``true`` through the zygote; its ``end_on_exit`` (the Reaper's thread) raises."""

    kind: ClassVar[str] = "faulty-exit"

    def launch(self) -> None:
        fd = outputfile.create(self.unit.output_path)
        try:
            request = SpawnExec(unit_id=self.unit.id, argv=("true",), cwd=None, env=None)
            self.unit.zygote.spawn_exec(request, fd, self.process_watch())
        finally:
            os.close(fd)

    def end_on_exit(self, exit_code: int | None, signum: int | None) -> Outcome:
        self._maybe_raise(self.unit.spec, "end_on_exit")
        return self.outcome_for_exit(exit_code, signum)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ProcessExited):  # as a shell: its end_on_exit, once more
            self.finish(self.end_on_exit(message.exit_code, message.signal))
            return None
        return super().on_receive(message)


def _still_serves(sup: Supervisor, bystander: str) -> None:
    """The supervisor answers, its other unit ran on untouched, and new work runs."""
    assert sup.get(bystander).status == Status.RUNNING
    assert sup.kill(bystander) is True
    assert sup.wait(bystander, WAIT).status == Status.KILLED
    assert sup.shell("true").wait(timeout=WAIT).status == Status.COMPLETED


CASES = [
    (Faulty, "launch", "SystemExit"),
    (Faulty, "launch", "CancelledError"),
    (Faulty, "launch", "Cancelled"),
    (Faulty, "launch_early", "SystemExit"),
    (Faulty, "launch_early", "KeyboardInterrupt"),
    (Faulty, "on_start", "SystemExit"),
    (Faulty, "on_start", "KeyboardInterrupt"),
    (Faulty, "signal_work", "SystemExit"),
    (Faulty, "signal_work", "KeyboardInterrupt"),
    (Faulty, "signal_work", "CancelledError"),
    (InlineFaulty, "signal_work", "SystemExit"),
    (InlineFaulty, "signal_work", "CancelledError"),
    (FaultyOnExit, "end_on_exit", "SystemExit"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("kind", "hook", "raised"), CASES)
def test_a_kinds_base_exception_fails_its_unit_and_nothing_else(
    sup: Supervisor, kind: type[Faulty], hook: str, raised: str
) -> None:
    bystander = sup.shell("sleep 300").id
    sup.register_kind("f", kind)
    unit = sup.submit("f", (hook, raised))
    if hook == "signal_work":
        assert sup.kill(unit.id) is True
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.FAILED
    assert record.error is not None
    # Named by the call the supervisor made: signal_work runs as the actor handles a Kill;
    # end_on_exit failed on the Reaper's thread first (logged), then in the actor's.
    call = {
        "launch_early": "launch",
        "signal_work": "handling Kill",
        "end_on_exit": "handling ProcessExited",
    }.get(hook, hook)
    assert f"KindFault: {call} of the {kind.kind} kind ({kind.__qualname__}) raised {raised}" in (
        record.error
    )
    assert "Traceback" in record.error
    _still_serves(sup, bystander)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("raised", ["SystemExit", "KeyboardInterrupt", "CancelledError"])
def test_a_validate_spec_that_raises_a_base_exception_fails_that_submit_only(
    sup: Supervisor, raised: str
) -> None:
    """``validate_spec`` runs on the supervisor's thread: it stopped every actor."""
    bystander = sup.shell("sleep 300").id
    sup.register_kind("f", Faulty)
    with pytest.raises(KindFault, match=f"validate_spec of the faulty kind .* raised {raised}"):
        sup.submit("f", ("validate_spec", raised))
    assert [r.id for r in sup.list(kind="faulty")] == []
    _still_serves(sup, bystander)


@pytest.mark.timeout(60)
def test_an_on_start_that_raises_fails_its_unit_and_leaves_nothing_running(
    sup: Supervisor,
) -> None:
    """pykka stops such an actor without calling a hook; the unit must not stay running."""
    bystander = sup.shell("sleep 300").id
    sup.register_kind("f", Faulty)
    record = sup.wait(sup.submit("f", ("on_start", "ValueError")).id, WAIT)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert "the unit's actor failed: ValueError: on_start failed" in record.error
    _still_serves(sup, bystander)
