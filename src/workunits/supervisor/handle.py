"""WorkHandle: what a submit returns; a thin view of one unit through its supervisor."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from workunits._core.record import WorkRecord

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor


class WorkHandle:
    """A submitted unit: its ``id`` and the supervisor calls that take it."""

    __slots__ = ("id", "supervisor")

    def __init__(self, supervisor: Supervisor, work_id: str) -> None:
        self.supervisor = supervisor
        self.id = work_id

    def __repr__(self) -> str:
        return f"<WorkHandle {self.id}>"

    def __str__(self) -> str:
        return self.id

    def get(self) -> WorkRecord:
        """The unit's current record (``Supervisor.get``)."""
        return self.supervisor.get(self.id)

    def wait(self, timeout: float | None = None) -> WorkRecord:
        """Block until the unit is terminal (``Supervisor.wait``)."""
        return self.supervisor.wait(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The unit's result, or its failure raised (``Supervisor.result``)."""
        return self.supervisor.result(self.id, timeout)

    def kill(self) -> bool:
        """SIGKILL the unit now (``Supervisor.kill``)."""
        return self.supervisor.kill(self.id)

    def cancel(self, grace: float = 5.0) -> bool:
        """Ask the unit to stop, SIGKILL after ``grace`` (``Supervisor.cancel``)."""
        return self.supervisor.cancel(self.id, grace)

    def read_output(self, max_bytes: int | None = None) -> bytes:
        """The output written since the last read (``Supervisor.read_output``)."""
        return self.supervisor.read_output(self.id, max_bytes)

    def stream(self) -> Iterator[bytes]:
        """Every byte of output once, until the unit ends (``Supervisor.stream``)."""
        return self.supervisor.stream(self.id)

    async def get_async(self) -> WorkRecord:
        """Like ``get`` without blocking the event loop."""
        return await self.supervisor.get_async(self.id)

    async def wait_async(self, timeout: float | None = None) -> WorkRecord:
        """Like ``wait`` without blocking the event loop."""
        return await self.supervisor.wait_async(self.id, timeout)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Like ``result`` without blocking the event loop."""
        return await self.supervisor.result_async(self.id, timeout)

    async def kill_async(self) -> bool:
        """Like ``kill`` without blocking the event loop."""
        return await self.supervisor.kill_async(self.id)

    async def cancel_async(self, grace: float = 5.0) -> bool:
        """Like ``cancel`` without blocking the event loop."""
        return await self.supervisor.cancel_async(self.id, grace)

    async def read_output_async(self, max_bytes: int | None = None) -> bytes:
        """Like ``read_output`` without blocking the event loop."""
        return await self.supervisor.read_output_async(self.id, max_bytes)

    def stream_async(self) -> AsyncIterator[bytes]:
        """Like ``stream``, for ``async for`` (``Supervisor.stream_async``)."""
        return self.supervisor.stream_async(self.id)
