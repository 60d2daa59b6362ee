"""Durable steps for workflow units: run each named step once across attempts.

A workflow's checkpoint is ``{"steps": {name: result}, "state": user_state}``:
step results ride on the checkpoint machinery, so they are fenced by attempt
and stored in the ledger like any checkpoint. ``ctx.last_checkpoint`` and
``ctx.checkpoint()`` keep showing the user's own state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from workunits._core.errors import SpecError
from workunits._util import strictjson

STEPS = "steps"
STATE = "state"


def split(checkpoint: Any) -> tuple[dict[str, Any], Any]:
    """(step results, user state) from a workflow checkpoint (or none yet)."""
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get(STEPS), dict):
        return dict(checkpoint[STEPS]), checkpoint.get(STATE)
    return {}, None


def join(steps: dict[str, Any], state: Any) -> dict[str, Any]:
    return {STEPS: steps, STATE: state}


class Steps:
    """The step record of one workflow attempt; lives in the unit process.

    Safe from several threads of the unit: steps of different names run at once,
    and each checkpoint holds every step finished before it, in order.
    """

    def __init__(self, checkpoint: Any) -> None:
        self.done, self.state = split(checkpoint)
        # Guards done, state, _calls and _running; held for O(1) work, and across a
        # checkpoint's save (so that a later save never carries fewer steps).
        self._cond = threading.Condition()
        # Per name, the arguments of its first call in this attempt: a later call
        # with others would silently get the first one's result.
        self._calls: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._running: set[str] = set()

    def checkpoint(self, state: Any, save: Callable[[dict[str, Any]], None]) -> None:
        """The user's own state, saved with the steps done so far."""
        with self._cond:
            self.state = state
            save(join(dict(self.done), state))

    def run(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        before: Callable[[], None],
        save: Callable[[dict[str, Any]], None],
        log: Callable[[str, bool], None],
    ) -> Any:
        """Return the stored result of ``name``, or run it, store its result and return it.

        ``before`` raises Cancelled when a cancel was requested, so a cancel
        lands between steps; ``save`` checkpoints (and raises Cancelled after).
        """
        _check_name(name)
        with self._cond:
            self._same_call(name, args, kwargs)
            while name in self._running:  # the same step, called from another thread
                self._cond.wait()
            if name in self.done:
                log(name, True)
                return self.done[name]
            self._running.add(name)
        try:
            before()
            value = fn(*args, **kwargs)
            strictjson.dumps(value, f"the result of step {name!r}")
            with self._cond:
                self.done[name] = value
                log(name, False)
                save(join(dict(self.done), self.state))
            return value
        finally:
            with self._cond:
                self._running.discard(name)
                self._cond.notify_all()

    def _same_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """(Lock held.) Refuse ``name`` called again in this attempt with other arguments."""
        first = self._calls.setdefault(name, (args, kwargs))
        try:
            same = first == (args, kwargs)
        except Exception:  # noqa: BLE001 - arguments that cannot be compared are not the same
            same = first[0] is args and first[1] is kwargs
        if not same:
            raise SpecError(
                f"step {name!r} already ran in this attempt with other arguments, and would "
                f"return that run's result; give each step its own name (f'{name}-{{item}}')"
            )


def _check_name(name: object) -> None:
    """A step name is non-empty text the checkpoint can hold, checked before anything runs."""
    if not isinstance(name, str) or not name:
        raise SpecError(f"a step name is a non-empty str, got {name!r}")
    strictjson.dumps_argument(name, "the step name")
