"""``sup.pool()``: the supervisor's pooled workers as an object, for code written for process pools.

Everything a ``Pool`` submits is an agent unit with ``reuse=True`` (see the
guide "pooled units"): a typed ID, a ledger row, one notice, kill of one unit.
``map`` reads like ``concurrent.futures.Executor.map``: every call is
submitted before the first result is awaited, results come back in order, and
a unit that failed raises its ``WorkFailed`` at its place in the order.
Closing the iterator early (``break``, an exception) kills the units not yet
ended, so abandoned work does not hold the pool's workers. ``submit`` is the
executor's name for ``agent``, and a ``with`` block waits at its end for the
units submitted in it, as leaving a ``with ProcessPoolExecutor()`` block waits
for its futures. The workers are the supervisor's: a block's end closes
nothing, and the pool takes units after it as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from workunits._core.errors import SupervisorClosed
from workunits._core.seconds import wait_timeout
from workunits.supervisor._generated import PoolTwins
from workunits.supervisor.handle import WorkHandle

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor


class Pool(PoolTwins):
    """Pooled agent calls on one supervisor; made by ``Supervisor.pool()``."""

    def __init__(self, sup: Supervisor, size: int) -> None:
        self._sup = sup
        self.size = size  # the supervisor's ``pool_size``: how many units run at once
        # Guards _blocks and _in_blocks: threads may submit through one pool; O(1) work.
        self._lock = threading.Lock()
        self._blocks = 0  # ``with`` blocks entered and not yet left (they may nest)
        self._in_blocks: list[WorkHandle] = []  # submitted in them: the outermost end waits

    def __repr__(self) -> str:
        return f"<Pool size={self.size}>"

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
        handles (``result`` raises a failure there), as an executor's futures keep theirs."""
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
        return self._kept(self._sup.agent(fn, *args, reuse=True, **kwargs))

    def submit(self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> WorkHandle:
        """``agent`` by ``Executor.submit``'s name: ``handle.result(timeout)`` reads as a
        future's does."""
        return self.agent(fn, *args, **kwargs)

    def _kept(self, handle: WorkHandle) -> WorkHandle:
        """Inside a ``with`` block, keep ``handle`` for the block's end to wait for."""
        with self._lock:
            if self._blocks:
                self._in_blocks.append(handle)
        return handle

    def map(
        self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None
    ) -> Generator[Any, None, None]:
        """``fn`` over the items of ``iterables`` (zipped), one pooled unit per call.

        All units are submitted here, before the first ``next()``; ``timeout``
        counts from this call for the whole map, as in ``Executor.map``
        (``NotFinished`` when it runs out).
        """
        timeout = wait_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        handles = [self.agent(fn, *args) for args in zip(*iterables, strict=False)]
        return self._results(handles, deadline)

    def _results(
        self, handles: list[WorkHandle], deadline: float | None
    ) -> Generator[Any, None, None]:
        done = 0
        try:
            for handle in handles:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                value = handle.result(timeout=left)
                done += 1
                yield value
        finally:
            for handle in handles[done:]:
                handle.kill()  # a no-op for a unit that has ended
