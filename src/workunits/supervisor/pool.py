"""``sup.pool()``: the supervisor's pooled workers as an object, for code written for process pools.

Everything a ``Pool`` submits is an agent unit with ``reuse=True`` (see the
guide "pooled units"): a typed ID, a ledger row, one notice, kill of one unit.
``map`` reads like ``concurrent.futures.Executor.map``: every call is
submitted before the first result is awaited, results come back in order, and
a unit that failed raises its ``WorkFailed`` at its place in the order.
Closing the iterator early (``break``, an exception) kills the units not yet
ended, so abandoned work does not hold the pool's workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

from workunits._seconds import wait_timeout
from workunits.supervisor.handle import WorkHandle

if TYPE_CHECKING:
    from workunits.supervisor.facade import Supervisor


class Pool:
    """Pooled agent calls on one supervisor; made by ``Supervisor.pool()``."""

    def __init__(self, sup: Supervisor, size: int) -> None:
        self._sup = sup
        self.size = size  # the supervisor's ``pool_size``: how many units run at once

    def __repr__(self) -> str:
        return f"<Pool size={self.size}>"

    def agent(self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> WorkHandle:
        """``sup.agent(fn, *args, reuse=True, **kwargs)``: same options, same handle."""
        return self._sup.agent(fn, *args, reuse=True, **kwargs)

    async def agent_async(
        self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any
    ) -> WorkHandle:
        """Like ``agent`` without blocking the event loop."""
        return await self._sup.agent_async(fn, *args, reuse=True, **kwargs)

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
