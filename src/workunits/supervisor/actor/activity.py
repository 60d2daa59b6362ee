"""``Activity``: progress stamped as it arrives, and units that go quiet (``stall_after``).

Owned by the SupervisorActor; every method runs in its thread. Each progress
report is stamped with the supervisor's clock (``progress_at``) and keeps the
evidence it carried. A running attempt's activity is its start, its progress
reports, its checkpoints and the growth of its output file; a unit submitted
with ``stall_after`` whose attempt shows none for that long sends its parent
one ``StallEvent`` -- an event, like a monitor's: not a status, not a notice.
It may stall again after it shows activity again.

Output growth is seen on ticks (one ``fstat`` per watched unit) and counted
from the look before, when it had not grown yet: a stall is noticed within a
tick of its deadline, never hidden by a late look.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workunits._core.clock import Clock
from workunits._core.record import StallEvent, WorkRecord, replace, storable_text
from workunits._core.status import Status
from workunits._util import outputfile
from workunits.supervisor.actor.notices import Notices
from workunits.supervisor.actor.units import Units


class Activity:
    def __init__(self, *, units: Units, notices: Notices, clock: Clock) -> None:
        self._units = units
        self._notices = notices
        self._clock = clock

    def progress(
        self,
        work_id: str,
        fraction: float | None,
        message: str,
        evidence: Mapping[str, Any] | None,
    ) -> None:
        """A unit reported progress: stamp it, keep it, and count it as activity."""
        now = self._clock.now()
        ev = None if evidence is None else dict(evidence)
        message = storable_text(message)  # any kind's report must be storable

        def reported(r: WorkRecord) -> WorkRecord:
            return replace(
                r, progress=fraction, progress_message=message, progress_at=now, evidence=ev
            )

        if work_id in self._units:
            self._units.write(work_id, reported)
            self.saw(work_id)

    def saw(self, work_id: str) -> None:
        """Activity from ``work_id`` (a checkpoint, a progress report): it is not quiet."""
        slot = self._units.slot(work_id)
        if slot is not None:
            slot.quiet_since, slot.stalled = self._clock.now(), False

    def tick(self) -> None:
        """Look for quiet units with ``stall_after``; tell each one's parent once per spell."""
        now = self._clock.now()
        for (
            work_id,
            slot,
        ) in self._units.stall_watched():  # those alone: a tick costs nothing per unit without one
            if slot.actor is None:
                continue  # not running an attempt (pending, waiting for a retry, ended)
            record = self._units.registry.find(work_id)
            if record is None or record.stall_after is None or record.status != Status.RUNNING:
                continue
            if record.output_path is not None:
                size = outputfile.size_of(record.output_path)
                if size != slot.output_seen:
                    # It grew some time after the last look: count it from then, so a
                    # unit's first look (or a slow tick) does not hide a quiet spell.
                    slot.output_seen = size
                    if slot.output_checked_at > slot.quiet_since:
                        slot.quiet_since, slot.stalled = slot.output_checked_at, False
                slot.output_checked_at = now
            if slot.stalled or now - slot.quiet_since < record.stall_after:
                continue
            slot.stalled = True
            self._notices.post_event(StallEvent(work_id, slot.quiet_since, now, record.stall_after))
