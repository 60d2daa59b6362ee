"""``Restart``: which ends of a teammate start it again, and how often that may happen.

OTP's child restart types and restart intensity, for one teammate:

- ``permanent``: started again after any end it did not ask for -- a crash
  (``failed``, its supervisor lost) or a normal return of its process;
- ``transient``: started again only after an abnormal end (``failed``);
- ``temporary``: never started again (the default, and the behaviour without
  a policy).

An end that was asked for -- ``stop()``, a cancel, a kill, a timeout, its
parent's end -- is never restarted: the supervisor already knows it is over
(``supervisor.actor.retries`` checks the unit's slot for that, as it does for
retries). A restart keeps the unit's ID and begins attempt + 1, with the
machinery of retries (``supervisor.actor.retries``); the earlier attempts are its
``attempts``, whose end times are the restart intensity: more than
``max_restarts`` restarts within ``within`` seconds and the next end is its
last, ``failed`` with reason ``restart-intensity``.

A policy is plain data kept in the ledger's ``retry_policy`` column beside
retry policies (``{"restart": ...}`` tells them apart), so a supervisor that
restarts continues the intensity window from the stored attempts.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from workunits._core.errors import SpecError
from workunits._core.record import Outcome
from workunits._core.retry import Attempt, Retry
from workunits._core.seconds import seconds
from workunits._core.status import Reason, Status

# A restart policy bounds restarts by intensity, not by count: the ledger's
# attempt counter (one column serves resumes, retries and restarts) is set to
# the largest number every backend's column holds.
UNBOUNDED_ATTEMPTS = 2**31 - 1


class RestartMode(enum.StrEnum):
    """When a teammate is restarted (OTP's restart types)."""

    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


@dataclass(frozen=True, slots=True)
class Restart:
    """Restart a teammate that ended unasked; at most ``max_restarts`` in ``within`` seconds."""

    mode: RestartMode = RestartMode.TEMPORARY
    max_restarts: int = 3
    within: float = 60.0

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "mode", RestartMode(self.mode))
        except ValueError:
            choices = ", ".join(repr(m.value) for m in RestartMode)
            raise SpecError(f"restart must be one of {choices}, got {self.mode!r}") from None
        n = self.max_restarts
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise SpecError(f"max_restarts must be an int >= 0, got {n!r}")
        seconds("within", self.within)

    @property
    def ever(self) -> bool:
        """Whether any end restarts it (``temporary`` never does)."""
        return self.mode is not RestartMode.TEMPORARY

    def restarts(self, outcome: Outcome) -> bool:
        """Whether an end (one nobody asked for) with ``outcome`` starts it again."""
        match self.mode:
            case RestartMode.PERMANENT:
                return True
            case RestartMode.TRANSIENT:
                return outcome.status == Status.FAILED
            case RestartMode.TEMPORARY:
                return False

    def recent(self, attempts: Sequence[Attempt], now: float) -> int:
        """How many restarts (earlier attempts' ends) fall in the window ending ``now``;
        an attempt handed over at a deploy is no restart."""
        since = now - self.within
        return sum(1 for a in attempts if a.ended_at > since and a.reason is not Reason.HANDED_OVER)

    def exceeded(self, attempts: Sequence[Attempt], now: float) -> bool:
        """One more restart now would be more than ``max_restarts`` within ``within``."""
        return self.recent(attempts, now) >= self.max_restarts

    # -- as the ledger keeps it -----------------------------------------------------------

    def to_json(self) -> bytes:
        return orjson.dumps(
            {"restart": self.mode.value, "max_restarts": self.max_restarts, "within": self.within}
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Restart:
        doc: dict[str, Any] = orjson.loads(data)
        return cls(RestartMode(doc["restart"]), int(doc["max_restarts"]), float(doc["within"]))


def policy_from_json(data: bytes | str) -> Retry | Restart:
    """What the ledger's ``retry_policy`` column holds: a retry or a restart policy."""
    doc = orjson.loads(data)
    if isinstance(doc, dict) and "restart" in doc:
        return Restart.from_json(data)
    return Retry.from_json(data)


def check_restart(restart: str, max_restarts: int, within: float) -> Restart | None:
    """``teammate(restart=, max_restarts=, within=)``: the policy, or None for ``temporary``.

    No policy is how ``temporary`` is kept: the unit is exactly what it was
    before restarts existed (nothing more stored, lost with its supervisor).
    """
    try:
        mode = RestartMode(restart)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in RestartMode)
        raise SpecError(f"restart must be one of {choices}, got {restart!r}") from None
    policy = Restart(mode, max_restarts, within)  # checks the numbers, temporary too
    return policy if policy.ever else None
