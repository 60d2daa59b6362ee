"""``Signals``: outside input for units that wait for it (``ctx.wait_for(name)``).

Owned by the SupervisorActor; every method runs in its thread. Signals live in
the ledger (``_ledger.signals``), written by whoever sends one: this
supervisor's facade, a client in another process, the CLI, the HTTP API. A
unit's process receives them two ways, and keeps each seq once:

- at its first ``wait_for``, it asks for every signal it has not consumed
  (``opened``): those sent before it waited, while no supervisor ran, or
  received by an earlier attempt that did not checkpoint after them;
- after that, each tick routes the signals sent since the last one it saw to
  their units' processes (``tick``), and ``send`` routes its own at once.

A signal is consumed with the checkpoint after the unit received it
(``CheckpointReport.consumed``, one ledger transaction with the checkpoint).
"""

from __future__ import annotations

import logging
from typing import Any

from workunits._core.errors import WorkunitsError
from workunits._ledger import Ledger
from workunits._wire import frames as m
from workunits._wire.actor_messages import EventToUnit
from workunits.supervisor.actor.messaging import reply_to_unit
from workunits.supervisor.actor.units import Units

log = logging.getLogger(__name__)

ROUTED_PER_TICK = 256


class Signals:
    def __init__(self, *, units: Units, ledger: Ledger) -> None:
        self._units = units
        self._ledger = ledger
        # Invariant: every signal with seq <= _seen was routed, or sent before this
        # supervisor started (a unit asks for those at its first wait_for). Seqs are
        # taken under the ledger's write lock, so they commit in order.
        self._seen = ledger.signals.last_seq()

    def send(self, work_id: str, name: str, value: Any) -> bool:
        """Keep a signal for ``work_id`` and route it now; False when the unit has ended."""
        seq = self._ledger.signals.send(work_id, name, value)
        if seq is None:
            return False
        self.tick()
        return True

    def tick(self) -> None:
        """Route the signals other processes sent since the last tick."""
        try:
            arrived = self._ledger.signals.after(self._seen, ROUTED_PER_TICK)
        except WorkunitsError:
            log.exception("ledger: could not read new signals")
            return
        for signal in arrived:
            self._route(signal.unit, m.SignalArrived(signal.seq, signal.name, signal.value))
            self._seen = max(self._seen, signal.seq)

    def opened(self, work_id: str, req: int) -> None:
        """Answer a unit's first ``wait_for``: the signals it has not consumed, oldest first."""
        try:
            found = self._ledger.signals.open_for(work_id)
        except WorkunitsError as exc:
            reply_to_unit(self._units, work_id, req, False, exc)
            return
        value = [m.SignalArrived(s.seq, s.name, s.value) for s in found]
        reply_to_unit(self._units, work_id, req, True, value)

    def _route(self, work_id: str, frame: m.SignalArrived) -> None:
        slot = self._units.slot(work_id)
        ref = None if slot is None else slot.actor
        # Only kinds whose process reads its channel (agents, workflows, teammates,
        # dreams) can wait; the others' signals stay in the ledger, unconsumed.
        if ref is not None and ref.actor_class.relays_notifications:
            self._units.tell(work_id, EventToUnit(frame))
