"""Zygote events as messages to a unit's own actor (the Reaper thread only tells)."""

from __future__ import annotations

import os
from typing import Any

import pykka

from workunits._wire.actor_messages import (
    ProcessExited,
    ProcessLost,
    ProcessSpawned,
    ProcessSpawnFailed,
)


class TellActor:
    """``UnitEvents`` for the zygote client: each event becomes a tell to ``ref``."""

    __slots__ = ("ref",)

    def __init__(self, ref: pykka.ActorRef[Any]) -> None:
        self.ref = ref

    def tell(self, message: object) -> bool:
        try:
            self.ref.tell(message)
        except pykka.ActorDeadError:
            return False  # the unit was already force-ended at shutdown
        return True

    def spawned(self, pid: int, pidfd: int) -> None:
        if not self.tell(ProcessSpawned(pid, pidfd)):
            os.close(pidfd)

    def spawn_failed(self, error: str) -> None:
        self.tell(ProcessSpawnFailed(error))

    def exited(self, exit_code: int | None, signum: int | None) -> None:
        self.tell(ProcessExited(exit_code, signum))

    def lost(self) -> None:
        self.tell(ProcessLost())
