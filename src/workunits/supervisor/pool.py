"""``sup.pool()``: the supervisor's pooled workers as a ``concurrent.futures.Executor``.

Everything a ``Pool`` submits is an agent unit with ``reuse=True`` (see the
guide "pooled units"): a typed ID, a ledger row, one notice, kill of one unit.
``submit`` returns a ``concurrent.futures.Future`` carrying the unit's ID, and
``map`` submits every item as one batch; both are ``UnitExecutor``'s
(``supervisor.executor``), with the stdlib's semantics. ``agent`` is
``sup.agent(..., reuse=True)`` and returns the unit's handle. A ``with``
block waits at its end for the units submitted in it and shuts this
``Pool`` object down, as leaving a ``with ProcessPoolExecutor()`` block does;
the workers are the supervisor's, so it closes none of them, and
``sup.pool()`` gives a new ``Pool`` on the same workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from workunits._core.errors import SupervisorClosed
from workunits._core.sandbox import Sandbox
from workunits.supervisor._generated import PoolTwins
from workunits.supervisor.executor import UnitExecutor
from workunits.supervisor.handle import WorkHandle

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor


# How many units of one Pool are started (an actor each, a place in the workers'
# queue) per worker: enough that a worker finds its next unit queued when one ends.
QUEUED_PER_WORKER = 4


class Pool(UnitExecutor, PoolTwins):
    """Pooled agent calls on one supervisor; made by ``Supervisor.pool()``.

    ``max_workers`` (default ``QUEUED_PER_WORKER`` per worker) caps how many of
    its units are started at once; they run ``size`` at a time, on the workers.
    """

    _reuse = True

    def __init__(
        self,
        sup: Supervisor,
        size: int,
        max_workers: int | None = None,
        *,
        sandbox: Sandbox | None = None,
    ) -> None:
        workers = QUEUED_PER_WORKER * size if max_workers is None else max_workers
        super().__init__(sup, workers, sandbox=sandbox)
        self.size = size  # the supervisor's ``pool_size``: how many units run at once
        # ``_lock`` (the executor's) guards _blocks and _in_blocks too; O(1) work.
        self._blocks = 0  # ``with`` blocks entered and not yet left (they may nest)
        self._in_blocks: list[WorkHandle] = []  # submitted in them: the outermost end waits

    def __repr__(self) -> str:
        return f"<Pool size={self.size} max_workers={self.max_workers}>"

    def __enter__(self) -> Self:
        with self._lock:
            self._blocks += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Wait for every unit submitted in the block to end; their outcomes stay on their
        futures and handles (``result`` raises a failure there), as an executor's do."""
        self.shutdown(wait=True)
        for handle in self._left():
            try:
                handle.wait()
            except SupervisorClosed:
                return  # its close ended every unit: nothing is left to wait for

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """``__exit__`` for ``async with``: the waits do not block the event loop."""
        self.shutdown(wait=False)
        with self._lock:
            outstanding = list(self._outstanding)
        if outstanding:
            await asyncio.wait([asyncio.wrap_future(f) for f in outstanding])
        for handle in self._left():
            try:
                await handle.wait_async()
            except SupervisorClosed:
                return

    def _left(self) -> list[WorkHandle]:
        """A block ends: the units for it to wait for (none when an outer block remains)."""
        with self._lock:
            self._blocks -= 1
            if self._blocks:
                return []  # an inner block: the outermost one waits for all
            handles, self._in_blocks = self._in_blocks, []
        return handles

    def agent(self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> WorkHandle:
        """``sup.agent(fn, *args, reuse=True, **kwargs)``: same options, same handle."""
        if self.sandbox is not None:
            kwargs.setdefault("sandbox", self.sandbox)
        return self._kept(self._sup.agent(fn, *args, reuse=True, **kwargs))

    def _kept(self, handle: WorkHandle) -> WorkHandle:
        """Inside a ``with`` block, keep ``handle`` for the block's end to wait for."""
        with self._lock:
            if self._blocks:
                self._in_blocks.append(handle)
        return handle
