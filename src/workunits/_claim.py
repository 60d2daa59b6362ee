"""Taking a notice: claim it, act, then acknowledge it (or release it for redelivery).

Every mailbox of notices -- the supervisor's own, a ``wu.connect`` client's,
the HTTP API's -- implements ``claim`` and gets the rest from
:class:`NoticeSource`:

- ``with mailbox.take(timeout) as notice: ...`` acknowledges when the block
  exits normally and releases the claim (the notice is delivered again) when
  it raises: exactly-once for a consumer that acknowledges after acting;
- ``mailbox.get(timeout)`` claims and acknowledges at once: at-most-once for
  that consumer (a crash right after loses the notice for it);
- ``mailbox.claim(timeout)`` returns the :class:`Claim`, for a consumer whose
  acknowledgement comes later or from elsewhere.

A claim lives as long as its consumer's process (or, for a remote consumer,
its renewed lease): a consumer that dies holding one gives the notice back,
and the next consumer sees ``notice.redelivered``.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


def _settled() -> bool:
    return True


class Claim(Generic[T]):
    """A notice held by one consumer until it acknowledges or releases it.

    ``notice`` is the item: a ``Notification``, or in a supervisor's mailbox a
    ``MonitorEvent``, which is not a notice and whose ack and release do nothing.
    ``ack()`` and ``release()`` return True for the call that settled the
    claim, False when it had already been settled or lost (its lease lapsed,
    and the notice went to another consumer).
    """

    __slots__ = ("_ack", "_lock", "_release", "_renew", "_settled", "notice")

    def __init__(
        self,
        notice: T,
        *,
        ack: Callable[[], bool] = _settled,
        release: Callable[[], bool] = _settled,
        renew: Callable[[float], bool] | None = None,
    ) -> None:
        self.notice = notice
        self._ack = ack
        self._release = release
        self._renew = renew
        self._settled = False
        self._lock = threading.Lock()  # guards _settled; held for O(1) work plus one ledger write

    def __repr__(self) -> str:
        return f"<Claim {self.notice!r}>"

    def ack(self) -> bool:
        """Acknowledge: no consumer in any process receives this notice again."""
        return self._settle(self._ack)

    def release(self) -> bool:
        """Give the notice back: it is delivered again, marked ``redelivered``."""
        return self._settle(self._release)

    def renew(self, lease: float) -> bool:
        """Extend a leased claim by ``lease`` seconds from now; False if it was lost."""
        if self._renew is None:
            return not self._settled  # a process-bound claim needs no renewal
        return self._renew(lease)

    def _settle(self, settle: Callable[[], bool]) -> bool:
        with self._lock:
            if self._settled:
                return False
            self._settled = True
            return settle()


class NoticeSource(abc.ABC, Generic[T]):
    """A mailbox of notices: subclasses say how to ``claim``; taking follows from it."""

    @abc.abstractmethod
    def claim(self, timeout: float | None = None) -> Claim[T]:
        """Claim the next notice, waiting up to ``timeout`` s (None: forever)."""

    @contextmanager
    def take(self, timeout: float | None = None) -> Iterator[T]:
        """``with take() as notice``: acknowledged if the block succeeds, released if it raises."""
        claim = self.claim(timeout)
        try:
            yield claim.notice
        except BaseException:
            claim.release()
            raise
        claim.ack()

    def get(self, timeout: float | None = None) -> T:
        """Claim and acknowledge the next notice at once (at-most-once for this consumer)."""
        claim = self.claim(timeout)
        claim.ack()
        return claim.notice
