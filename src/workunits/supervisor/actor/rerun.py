"""``Reruns``: ``retry(id)`` -- start a failed unit again, explicitly, as a new unit.

Owned by the SupervisorActor; runs in its thread. The failed unit stays
``failed`` (terminal is permanent, its one notice was sent): the new unit has
its own ID, the same spec, description, policy and parent (when that parent
still runs), ``retry_of`` pointing back, and the failed unit's idempotency
key, which moves to it in the submit's own transaction (invariant 12: a key
names one unit at a time). Retrying the same unit again returns the unit the
first retry started.

The spec comes from memory while the failed unit is resident, else from the
ledger -- which keeps it for units that can resume or have a retry policy.
"""

from __future__ import annotations

from workunits._core.errors import NotRetryable, UnknownWork
from workunits._core.retry import SPEC_NOT_KEPT, check_retryable
from workunits._core.status import is_terminal
from workunits._ledger import Ledger
from workunits._surface._generated import UnitOptions
from workunits.actors.kind_code import call_kind
from workunits.supervisor.actor.slots import Launch
from workunits.supervisor.actor.starts import Registered, Starts
from workunits.supervisor.actor.units import Units


class Reruns:
    def __init__(self, *, units: Units, starts: Starts, ledger: Ledger) -> None:
        self._units = units
        self._starts = starts
        self._ledger = ledger

    def retry(self, work_id: str) -> Registered:
        old = self._units.get(work_id)  # validates; UnknownWork for an ID nobody knows
        again = self._ledger.units.retried_by(work_id)
        if again is not None:
            return Registered(self._units.get(again), created=False)
        check_retryable(old)
        row = self._ledger.units.require(work_id)
        launch = self._launch_of(work_id)
        parent = old.parent
        if parent is not None:
            found = self._units.registry.find(parent)
            if found is None or is_terminal(found.status):
                parent = None  # its parent has ended: the application owns the new unit
        options = UnitOptions(
            description=old.description,
            parent=parent,
            key=row.key,
            max_attempts=None if old.retry or old.restart else row.max_attempts,
            timeout=launch.timeout,
            retry=old.retry,
            stall_after=old.stall_after,
            sandbox=old.sandbox,
        )
        return self._starts.register(
            work_id[0], launch.spec, options, retry_of=work_id, restart=old.restart
        )

    def _launch_of(self, work_id: str) -> Launch:
        slot = self._units.slot(work_id)
        if slot is not None and slot.launch is not None:
            return slot.launch
        actor_class = self._units.kinds.actor_class(work_id[0])
        try:
            spec, timeout = call_kind(
                actor_class, actor_class.from_durable, self._ledger.units.load_spec(work_id)
            )
        except UnknownWork as exc:
            raise NotRetryable(
                f"{work_id} cannot be started again: {exc}. {SPEC_NOT_KEPT}"
            ) from None
        return Launch(actor_class, spec, timeout)
