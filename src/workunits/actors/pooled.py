"""Pooled agent units: an agent run by a long-lived worker of the supervisor's pool.

Everything but the process is an agent's: typed ID, ledger row, transcript,
channel (progress, checkpoints, cancel, children), one notice. The process is a
worker that runs one unit at a time (see ``_pool.workers``): a signal for the
unit goes to the worker, so a kill ends the worker too and the pool starts
another; a crash of the worker fails the unit it was running, and only that one.

It is also the base of a kind whose every unit is pooled: a subclass with a
``kind`` name of its own, registered under a letter
(``sup.register_kind("q", Scorer)``), runs each ``AgentSpec`` submitted to it
in the pool, ``reuse`` or not.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from typing import Any, ClassVar

from workunits._core.errors import SpecError, WorkunitsError
from workunits._core.status import Reason
from workunits._sandbox.plan import Confinement
from workunits._wire.zygote_protocol import Limits, SpawnCall
from workunits.actors.agent import AgentActor
from workunits.actors.process_events import ProcessWatch


class PooledAgentActor(AgentActor):
    """An ``a`` unit submitted with ``reuse=True`` (its record's kind is ``agent``);
    subclassed with a ``kind`` of its own, a kind whose every unit is pooled."""

    kind: ClassVar[str] = "agent"
    pooled: ClassVar[bool] = True

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        """An AgentSpec without a process's limits: a worker runs unit after unit, and a
        limit would bind it for all of them. Also run for ``reuse=True`` units of the
        built-in kind, which ``AgentActor.actor_for`` routes here."""
        super().validate_spec(spec)
        if spec.limits != Limits():
            raise SpecError(
                f"a unit of kind {cls.kind!r} runs in the pool's workers, which cannot take "
                f"a memory limit or idle priority (or any limit of a process): submit the "
                f"call as an agent without reuse=True to get a process of its own"
            )

    def confinement(self) -> Confinement | None:
        """Its worker's confinement is the worker's own (see ``_pool.workers``): the unit
        brings only its variables, and uses its worker's private temp dir."""
        own = super().confinement()
        if own is None:
            return None
        env = tuple((k, v) for k, v in own.env if k != "TMPDIR")
        self._confinement = None  # nothing of its own to remove at its end
        return dataclasses.replace(own, tmpdir=None, env=env)

    def launch_early(self) -> bool:
        """No: on the supervisor's thread the hand-over (a transcript, a channel, a send to
        a worker or a worker start) cost pooled units 10-15 % of their rate with 2 in
        flight, measured; on the unit's own thread it overlaps other units' work."""
        return False

    def _on_creation(self) -> None:
        # Units started together reach the pool from their own threads in any order;
        # their places are kept in start order here, on the supervisor's thread.
        pool = self.unit.pool
        if pool is not None:
            pool.reserve(self.unit.id)

    def on_stop(self) -> None:
        """A unit whose launch failed before it reached the pool gives its place up
        (``on_failure`` comes here too)."""
        pool = self.unit.pool
        if pool is not None:
            pool.withdraw(self.unit.id)
        super().on_stop()

    def _start_process(
        self, call: SpawnCall, transcript_fd: int, channel_fd: int, events: ProcessWatch
    ) -> None:
        pool = self.unit.pool
        if pool is None:
            os.close(transcript_fd)
            os.close(channel_fd)
            raise WorkunitsError("this supervisor has no worker pool for reuse=True units")
        pool.run(call, transcript_fd, channel_fd, events)  # the pool owns the fds now

    def signal_work(self, signum: int) -> None:
        pool = self.unit.pool
        if pool is not None:
            pool.signal(self.unit.id, signum)

    def cancel(self, reason: Reason = Reason.CANCELLED) -> None:
        """A unit still waiting for a worker is ended at once and never runs (as a queued
        unit's cancel does); one a worker runs is asked, as any agent is."""
        pool = self.unit.pool
        if not self._finished and pool is not None:
            self._ending = self._ending or reason
            if pool.end_waiting(self.unit.id, signal.SIGTERM):
                return
        super().cancel(reason)
