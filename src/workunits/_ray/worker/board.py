"""``CancelBoard``: the supervisor's cancel requests, where running remote tasks can see them.

The body of a small async Ray actor, one per supervisor (``num_cpus=0``, on the
supervisor's node when it can be). The supervisor ``cancel``s a key; a task
long-polls ``wait`` on its own key, but only once its code asks whether it was
cancelled (see ``RemoteContext``). Keys are ``<id>.<attempt>``, so a request for
an old attempt never reaches a new one.

Invariant: a key has an entry only while a cancel for it is pending (until
``forget``) or a task is waiting on it; a wait that times out on an unset key
removes the entry, so the board does not grow with units that never look.
"""

from __future__ import annotations

import asyncio


class CancelBoard:
    """Runs in its own Ray worker; all methods run on that actor's event loop."""

    def __init__(self) -> None:
        self._flags: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}

    def _flag(self, key: str) -> asyncio.Event:
        flag = self._flags.get(key)
        if flag is None:
            flag = self._flags[key] = asyncio.Event()
        return flag

    async def cancel(self, key: str) -> None:
        self._flag(key).set()

    async def forget(self, key: str) -> None:
        self._flags.pop(key, None)

    async def wait(self, key: str, timeout: float) -> bool:
        """True once ``key`` is cancelled; False after ``timeout`` (the caller renews)."""
        flag = self._flag(key)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            await asyncio.wait_for(flag.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            left = self._waiting.pop(key) - 1
            if left:
                self._waiting[key] = left
        if not flag.is_set() and key not in self._waiting:
            self._flags.pop(key, None)
        return flag.is_set()

    async def size(self) -> int:
        """Entries held (for tests of the invariant above)."""
        return len(self._flags)
