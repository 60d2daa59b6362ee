"""``Schedules``: cron entries whose firings start units (``sup.schedule``).

Owned by the SupervisorActor; every method runs in its thread. Each schedule
lives in the ledger (``_ledger.schedules``) with ``next_at``, its next firing
due; ``tick`` fires what has come due. A firing takes its due time (a
compare-and-set on ``next_at``), submits its unit under the idempotency key
``schedule:<name>:<due time>`` and records the firing, all in one transaction
(``Ledger.schedules.fire``): a crash at any instant leaves the due time either
untaken (the next supervisor records it missed, or catches it up) or fired
with its record. A due time never fires twice, and is never lost.

A firing due while no supervisor ran (before this one started) is missed: it
is recorded as ``missed``, or with ``catch_up="run-once"`` the latest missed
one fires now (once, however many were missed) and the others are recorded.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import zoneinfo
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from croniter import CroniterError, croniter

from workunits._core.errors import InvalidArgument, WorkunitsError
from workunits._ledger import Ledger, NewUnit, UnitRow
from workunits._ledger.schedules import ScheduleRow
from workunits._surface._generated import UnitOptions
from workunits._wire.submits import check_submit, check_timeout

if TYPE_CHECKING:
    from workunits.supervisor.actor.starts import Registered

log = logging.getLogger(__name__)

CATCH_UP = ("skip", "run-once")
MISSED_PER_TICK = 1000  # a schedule down for long records its misses over several ticks
# How often the ledger's schedules are read again: one added through another
# supervisor on a shared ledger (or a client) fires here too, if that one is gone.
RELOAD_EVERY = 5.0

# ``Starts.register_written``: a submit whose row the caller's transaction writes.
Register = Callable[..., "Registered | None"]


def check_schedule(name: object, cron: object, tz: object, catch_up: object) -> zoneinfo.ZoneInfo:
    """Validate ``schedule``'s arguments; the time zone its cron is read in."""
    if not isinstance(name, str) or not name or len(name) > 200 or not name.isprintable():
        raise InvalidArgument(f"a schedule's name must be 1-200 printable characters, got {name!r}")
    if not isinstance(cron, str) or not croniter.is_valid(cron):
        raise InvalidArgument(
            f"{cron!r} is not a cron expression: give five fields, minute hour "
            "day-of-month month day-of-week, e.g. '0 3 * * *' (a sixth is seconds)"
        )
    if catch_up not in CATCH_UP:
        raise InvalidArgument(f"catch_up must be 'skip' or 'run-once', got {catch_up!r}")
    try:
        return zoneinfo.ZoneInfo(str(tz))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(f"unknown time zone {tz!r}: give an IANA name like 'UTC'") from None


def next_due(cron: str, tz: str, after: float) -> float:
    """The first time strictly after ``after`` (seconds since the epoch) ``cron`` names;
    ``math.inf`` when it names none (a year field that has passed, a 31st of February)."""
    start = datetime.datetime.fromtimestamp(after, zoneinfo.ZoneInfo(tz))
    try:
        due: datetime.datetime = croniter(cron, start).get_next(datetime.datetime)
    except CroniterError:
        return math.inf
    return due.timestamp()


def firing_key(name: str, due_at: float) -> str:
    when = datetime.datetime.fromtimestamp(due_at, datetime.UTC).isoformat()
    return f"schedule:{name}:{when}"


class Schedules:
    def __init__(self, *, ledger: Ledger, register: Register, started_at: float) -> None:
        self._ledger = ledger
        self._register = register
        # Firings due before this supervisor started were missed (none ran then).
        self._started_at = started_at
        # The ledger's rows, read at start and every RELOAD_EVERY s; a row
        # another supervisor on the same ledger moved on is also reread when this
        # one loses a firing to it (``advance_schedule``).
        self._rows: dict[str, ScheduleRow] = {}
        self._next_reload = started_at + RELOAD_EVERY
        self._reload()

    def _reload(self) -> None:
        try:
            self._rows = {row.name: row for row in self._ledger.schedules.all_rows()}
        except WorkunitsError:
            log.exception("ledger: could not read the schedules (read again later)")

    def add(
        self,
        name: str,
        cron: str,
        letter: str,
        spec: Any,
        *,
        tz: str,
        catch_up: str,
        options: dict[str, Any],
        now: float,
    ) -> ScheduleRow:
        check_schedule(name, cron, tz, catch_up)
        # Checked now, as a submit checks them: a bad one would fail every firing.
        description = options.get("description")
        check_submit(
            description="" if description is None else description, key=None, max_attempts=None
        )
        options = {**options, "timeout": check_timeout(options.get("timeout"))}
        first = next_due(cron, tz, now)
        if first == math.inf:
            raise InvalidArgument(
                f"{cron!r} names no time after now (a 31st of February, a year that has "
                f"passed): it would never fire"
            )
        stored = self._ledger.schedules.encode_spec(spec, name)
        old = self._rows.get(name)
        if (
            old is not None
            and (old.cron, old.tz, old.catch_up, old.letter, old.options)
            == (
                cron,
                tz,
                catch_up,
                letter,
                options,
            )
            and old.spec.data == stored.data
        ):
            # The same schedule declared again (as a program does at each start):
            # it keeps its next due time, so what came due while it was down is
            # still missed (or caught up), not skipped over.
            return old
        row = ScheduleRow(
            name=name,
            cron=cron,
            tz=tz,
            catch_up=catch_up,
            letter=letter,
            spec=stored,
            options=options,
            next_at=first,
            created_at=now,
        )
        self._ledger.schedules.put(row)
        self._rows[name] = row
        return row

    def remove(self, name: str) -> bool:
        self._rows.pop(name, None)
        return self._ledger.schedules.remove(name)

    def tick(self, now: float) -> None:
        """Fire (or record as missed) every firing due by ``now``."""
        if now >= self._next_reload:
            self._next_reload = now + RELOAD_EVERY
            self._reload()
        for row in [r for r in self._rows.values() if r.next_at <= now]:
            try:
                self._catch_up(row, now)
            except Exception:  # one schedule's fault must not stop the others, nor the tick
                log.exception("schedule %s: could not fire; tried again at the next tick", row.name)

    def _catch_up(self, row: ScheduleRow, now: float) -> None:
        due = row.next_at
        for _ in range(MISSED_PER_TICK):
            if due > now:
                return
            following = next_due(row.cron, row.tz, due)
            # Each firing is taken by a compare-and-set on the due time, in the
            # transaction that records it (and submits its unit): of several
            # supervisors on one ledger exactly one fires (or records as missed)
            # it, and no crash splits the taking from the record.
            missed = due < self._started_at
            last_missed = following > now or following >= self._started_at
            if missed and not (row.catch_up == "run-once" and last_missed):
                taken = self._ledger.schedules.miss(
                    row.name, due, following, firing_key(row.name, due)
                )
            else:
                taken = self._fire(row, due, following)
            if not taken:
                self._reread(row.name)
                return
            row = self._moved(row, following)
            due = following

    def _reread(self, name: str) -> None:
        """Another supervisor took a firing: this one's copy of the row is behind."""
        for found in self._ledger.schedules.all_rows():
            if found.name == name:
                self._rows[name] = found
                return
        self._rows.pop(name, None)  # removed there

    def _fire(self, row: ScheduleRow, due: float, following: float) -> bool:
        """Fire the due time; False when another supervisor took it."""
        spec = self._ledger.schedules.spec_of(row)
        options = row.options

        def write(new: NewUnit) -> tuple[UnitRow, bool] | None:
            return self._ledger.schedules.fire(row.name, due, following, new)

        registered = self._register(
            row.letter,
            spec,
            UnitOptions(
                description=options.get("description") or f"{row.name} at {_iso(due)}",
                timeout=options.get("timeout"),
                key=firing_key(row.name, due),
            ),
            write=write,
        )
        return registered is not None

    def _moved(self, row: ScheduleRow, next_at: float) -> ScheduleRow:
        moved = dataclasses.replace(row, next_at=next_at)
        if self._rows.get(row.name) is row:
            self._rows[row.name] = moved
        return moved


def _iso(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat()
