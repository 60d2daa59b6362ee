"""Messages between the supervisor's worker pool and a pooled worker process.

A worker is started like an agent unit (``SpawnCall`` with kind ``WORKER_KIND``);
its "channel" is its control socket, on which these frames travel (pickled, see
_util.framing). One unit at a time: the pool sends ``RunUnit`` only to an idle worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from workunits._wire.zygote_protocol import SpawnCall

WORKER_KIND = "pool-worker"
"""The ``SpawnCall.kind`` that makes a forked process a pooled worker, not a unit."""


@dataclass(frozen=True, slots=True)
class RunUnit:
    """Run one unit. Attached fds, in order: its transcript, its channel."""

    call: SpawnCall


@dataclass(frozen=True, slots=True)
class UnitDone:
    """The unit returned (its channel is closed already); ``code`` is its exit code."""

    unit_id: str
    code: int
