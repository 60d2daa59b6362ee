"""Pooled agent units: an agent run by a long-lived worker of the supervisor's pool.

Everything but the process is an agent's: typed ID, ledger row, transcript,
channel (progress, checkpoints, cancel, children), one notice. The process is a
worker that runs one unit at a time (see ``_pool.workers``): a signal for the
unit goes to the worker, so a kill ends the worker too and the pool starts
another; a crash of the worker fails the unit it was running, and only that one.
"""

from __future__ import annotations

from typing import ClassVar

from workunits._errors import WorkunitsError
from workunits._wire.zygote_protocol import SpawnCall
from workunits.actors.agent import AgentActor
from workunits.actors.process_events import ProcessWatch

EARLY_PAYLOAD = 1 << 16  # bytes of call a pooled unit may send from the supervisor's thread


class PooledAgentActor(AgentActor):
    """An ``a`` unit submitted with ``reuse=True``; its record's kind is ``agent``."""

    kind: ClassVar[str] = "agent"

    def launch_early(self) -> bool:
        """Yes, as an agent, when its call is small: the hand-over to an idle worker is one
        send on a socket the worker is reading (a worker to start is one request to the
        zygote), but a large call would hold the supervisor's thread while the worker
        reads it."""
        return super().launch_early() and len(self.spec.payload) <= EARLY_PAYLOAD

    def _start_process(
        self, call: SpawnCall, transcript_fd: int, channel_fd: int, events: ProcessWatch
    ) -> None:
        pool = self.unit.pool
        if pool is None:
            raise WorkunitsError("this supervisor has no worker pool for reuse=True units")
        pool.run(call, transcript_fd, channel_fd, events)

    def signal_work(self, signum: int) -> None:
        pool = self.unit.pool
        if pool is not None:
            pool.signal(self.unit.id, signum)
