"""Durable steps for workflow units: run each named step once across attempts.

A workflow's checkpoint is ``{"steps": {name: result}, "state": user_state}``:
step results ride on the checkpoint machinery, so they are fenced by attempt
and stored in the ledger like any checkpoint. ``ctx.last_checkpoint`` and
``ctx.checkpoint()`` keep showing the user's own state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workunits import _strictjson as strictjson
from workunits._errors import SpecError

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
    """The step record of one workflow attempt; lives in the unit process."""

    def __init__(self, checkpoint: Any) -> None:
        self.done, self.state = split(checkpoint)

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
        if not isinstance(name, str) or not name:
            raise SpecError(f"a step name is a non-empty str, got {name!r}")
        if name in self.done:
            log(name, True)
            return self.done[name]
        before()
        value = fn(*args, **kwargs)
        strictjson.dumps(value, f"the result of step {name!r}")
        self.done[name] = value
        log(name, False)
        save(join(self.done, self.state))
        return value
