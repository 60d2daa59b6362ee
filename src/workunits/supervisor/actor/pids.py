"""Unit pids, reported from the Reaper thread and applied with the supervisor's next message.

A pid is shown by ``get``, ``ls`` and ``show`` only: signals go through
pidfds, which the unit's ``ProcessWatch`` holds. So it travels in no message
of its own (that was one more wake of the supervisor's thread per unit). The
Reaper thread puts it here; the supervisor's thread applies everything here
before it handles any message (``SupervisorActor.on_receive``). What that
gives readers:

- every ask (``get``, ``list``, a wait) sees each pid that was reported
  before it was asked;
- a unit's end is reported after its pid, by the same thread, so its final
  record carries the pid;
- the ledger's copy is written with the tick's grouped writes, as before;
  change subscribers (the web view's stream) see it by the next tick at the
  latest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from workunits._core.record import WorkRecord, replace
from workunits.supervisor.actor.units import Units


class Pids:
    """Pids waiting for the supervisor's thread; ``report`` from any thread."""

    __slots__ = ("_reported",)

    def __init__(self) -> None:
        # deque.append and popleft are atomic: the Reaper appends, the supervisor pops.
        self._reported: deque[tuple[str, int]] = deque()

    def report(self, work_id: str, pid: int) -> None:
        """Any thread: ``work_id``'s process is ``pid``."""
        self._reported.append((work_id, pid))

    def apply(self, units: Units) -> None:
        """The supervisor's thread: write every reported pid into its unit's record."""
        reported = self._reported
        while reported:
            work_id, pid = reported.popleft()
            if units.registry.find(work_id) is None:
                continue  # ended and forgotten meanwhile: nobody can read it any more
            units.write(work_id, _with_pid(pid))


def _with_pid(pid: int) -> Callable[[WorkRecord], WorkRecord]:
    return lambda record: replace(record, pid=pid)
