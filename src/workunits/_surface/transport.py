"""``Transport``: what each surface implements, so that every verb is written once.

The verbs (``verbs.Verbs``, and the submit verbs generated from ``submits``)
check their arguments and hand an operation to these methods; a surface --
``Supervisor``, ``Client``, ``HttpClient``, ``UnitContext`` -- implements them
over its own way to the units. The blocking method and its ``_async`` twin are
the one place a surface says how it waits: an ask of the supervisor actor
answered to an asyncio future, a ledger call on a worker thread, an httpx
request, a request on a unit's channel.

The names ``Teammate``, ``Stream``, ``AsyncStream`` and ``NoticeFeed`` stand for
the surface's own types: ``tools/gen_surfaces.py`` declares these methods again
on each surface's generated base with them (``surfaces.SURFACES``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from workunits._core.claim import NoticeSource
from workunits._core.record import WorkRecord
from workunits._core.retain import HeldRetains
from workunits._surface.handle import AsyncStream, Handle, Stream
from workunits._surface.ops import Op, Submitted

if TYPE_CHECKING:
    from workunits._surface.submission import Submission

R = TypeVar("R")

Teammate = Handle
NoticeFeed = NoticeSource[Any]


class Transport:
    """The primitives a surface implements (each raises NotImplementedError here)."""

    _held: HeldRetains  # the retain leases this surface gave out: release(id) ends them

    def _run(self, op: Op[R]) -> R:
        """Carry out ``op`` and answer it, in the caller's thread."""
        raise NotImplementedError

    async def _run_async(self, op: Op[R]) -> R:
        """``_run`` without blocking the event loop."""
        raise NotImplementedError

    def _submit(self, submission: Submission) -> Handle:
        """Start the unit a submit verb describes; its handle."""
        raise NotImplementedError

    async def _submit_async(self, submission: Submission) -> Handle:
        raise NotImplementedError

    def _submit_batch(
        self, submissions: list[Submission], max_workers: int | None
    ) -> Sequence[Handle | BaseException]:
        """Start a batch as one write (all or, for a bad item, none); per item its handle,
        or the error that item alone met (its key taken with other arguments)."""
        raise NotImplementedError

    async def _submit_batch_async(
        self, submissions: list[Submission], max_workers: int | None
    ) -> Sequence[Handle | BaseException]:
        raise NotImplementedError

    def _submit_teammate(self, submission: Submission) -> Teammate:
        raise NotImplementedError

    async def _submit_teammate_async(self, submission: Submission) -> Teammate:
        raise NotImplementedError

    def _handle(self, submitted: Submitted) -> Handle:
        """The handle of a unit this surface started (a retry's)."""
        raise NotImplementedError

    def _wait(self, work_id: str, timeout: float | None) -> WorkRecord:
        """The unit's record once terminal; NotFinished after ``timeout`` (checked)."""
        raise NotImplementedError

    async def _wait_async(self, work_id: str, timeout: float | None) -> WorkRecord:
        raise NotImplementedError

    def _result(self, work_id: str, timeout: float | None) -> Any:
        """The unit's value once terminal, or its failure raised."""
        raise NotImplementedError

    async def _result_async(self, work_id: str, timeout: float | None) -> Any:
        raise NotImplementedError

    def _stream(self, work_id: str, follow: bool, poll: float) -> Stream:
        raise NotImplementedError

    def _stream_async(self, work_id: str, follow: bool, poll: float) -> AsyncStream:
        raise NotImplementedError

    def _notifications(self, lease: float) -> NoticeFeed:
        raise NotImplementedError

    async def _notifications_async(self, lease: float) -> NoticeFeed:
        raise NotImplementedError

    def _ask_teammate(self, work_id: str, message: Any, timeout: float | None) -> Any:
        """The teammate's answer to ``message`` (its handler's exception raised here)."""
        raise NotImplementedError

    async def _ask_teammate_async(self, work_id: str, message: Any, timeout: float | None) -> Any:
        raise NotImplementedError

    def _drain(self, timeout: float) -> list[str]:
        """Stop admitting work; wait up to ``timeout`` for what cannot resume (a supervisor's)."""
        raise NotImplementedError

    def _offload(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)``; its twin runs it on a worker thread (it may block: pickling,
        imports, files)."""
        return fn(*args)

    async def _offload_async(self, fn: Callable[..., R], *args: Any) -> R:
        # Imported here: the unit process, which has no async twins, never loads asyncio.
        import asyncio  # noqa: PLC0415

        return await asyncio.to_thread(fn, *args)
