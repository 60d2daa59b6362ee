"""WorkHandle: what a submit returns; a thin view of one unit through its supervisor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from workunits._record import WorkRecord

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor


class WorkHandle:
    __slots__ = ("id", "supervisor")

    def __init__(self, supervisor: Supervisor, work_id: str) -> None:
        self.supervisor = supervisor
        self.id = work_id

    def __repr__(self) -> str:
        return f"<WorkHandle {self.id}>"

    def __str__(self) -> str:
        return self.id

    def get(self) -> WorkRecord:
        return self.supervisor.get(self.id)

    def wait(self, timeout: float | None = None) -> WorkRecord:
        return self.supervisor.wait(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        return self.supervisor.result(self.id, timeout)

    def kill(self) -> bool:
        return self.supervisor.kill(self.id)

    def cancel(self, grace: float = 5.0) -> bool:
        return self.supervisor.cancel(self.id, grace)

    def read_output(self, max_bytes: int | None = None) -> bytes:
        return self.supervisor.read_output(self.id, max_bytes)

    def stream(self) -> Iterator[bytes]:
        return self.supervisor.stream(self.id)

    async def wait_async(self, timeout: float | None = None) -> WorkRecord:
        return await self.supervisor.wait_async(self.id, timeout)
