"""What a schedule looks like to its callers (``sup.schedules()``): no ledger imported."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScheduleFiring:
    """One due time of a schedule: ``fired`` (``unit`` is the unit it started) or ``missed``."""

    schedule: str
    due_at: float
    unit: str | None  # None for a missed firing
    outcome: str  # "fired" or "missed"
    recorded_at: float


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as ``sup.schedules()`` and ``workunits schedules`` show it."""

    name: str
    cron: str
    tz: str
    catch_up: str
    next_at: float  # the next firing due (seconds since the epoch)
    last: ScheduleFiring | None  # the latest firing recorded (fired or missed)
