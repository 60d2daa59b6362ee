"""``Retain``: a lease that keeps an ended unit visible while someone looks at it.

A viewer (``watch``, ``tail -f``, a web page, your own code) retains a unit
for ``lease`` seconds and renews before the lease runs out; the unit's record
then stays in its supervisor's memory and its row is not expired. A retain
lapses when its owner stops renewing, and at once when the owner's process
exits, so a viewer killed by SIGKILL or a closed terminal holds nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

from workunits._core.errors import ClientClosed, SpecError, SupervisorClosed
from workunits._core.seconds import seconds

log = logging.getLogger(__name__)

DEFAULT_LEASE = 30.0  # seconds a retain lease lasts unless renewed
# Leases are renewed while a viewer looks; the bound keeps their arithmetic finite.
MAX_LEASE = 1e9


def check_lease(lease: object) -> float:
    """The lease in seconds; SpecError unless it is a positive finite number."""
    return seconds("lease", lease, most=MAX_LEASE)


class Retain:
    """One retain lease on one unit: ``renew()``, ``release()``, or use it as a context manager."""

    __slots__ = (
        "_keeper",
        "_lock",
        "_on_release",
        "_release",
        "_released",
        "_renew",
        "lease",
        "lease_id",
        "work_id",
    )

    def __init__(
        self,
        work_id: str,
        lease_id: str,
        lease: float,
        *,
        renew: Callable[[float], bool],
        release: Callable[[], bool],
        on_release: Callable[[Retain], None] | None = None,
    ) -> None:
        self.work_id = work_id
        self.lease_id = lease_id
        self.lease = lease
        self._renew = renew
        self._release = release
        self._on_release = on_release
        self._released = False
        self._keeper: threading.Event | None = None
        # Guards _released and _keeper: a check and an assignment, O(1).
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "released" if self._released else f"lease {self.lease:g} s"
        return f"<Retain {self.work_id} {state}>"

    def renew(self, lease: float | None = None) -> bool:
        """Extend the lease to ``lease`` (default: the same length) from now.

        False once it has lapsed or was released: retain the unit again if you
        still need it.
        """
        if self._released:
            return False
        length = self.lease if lease is None else lease
        renewed = self._renew(length)  # refuses a bad length: then self.lease stays as it was
        self.lease = length
        return renewed

    def release(self) -> bool:
        """End the lease now; True for the call that ended it."""
        with self._lock:
            if self._released:
                return False
            self._released = True
            keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.set()
        if self._on_release is not None:
            self._on_release(self)
        return self._release()

    def keep_renewing(self, every: float | None = None) -> Retain:
        """Renew from a daemon thread every ``every`` s (default: a third of the lease)
        until ``release``; for a viewer whose own loop may block for long.

        ``every`` must be shorter than the lease, or the lease would lapse between
        renewals (SpecError). The thread stops when a renewal finds the lease
        gone or fails (the failure is logged).
        """
        interval = self.lease / 3 if every is None else seconds("every", every)
        if interval >= self.lease:
            raise SpecError(
                f"every must be shorter than the lease ({self.lease:g} s), or the lease "
                f"lapses between renewals; got {every!r}"
            )
        with self._lock:
            if self._released or self._keeper is not None:
                return self
            stop = self._keeper = threading.Event()

        def renew_until_released() -> None:
            while not stop.wait(interval):
                try:
                    if not self.renew():
                        return
                except (SupervisorClosed, ClientClosed):  # closed: the lease is over, quietly
                    return
                except Exception:  # the ledger failed...
                    log.warning(
                        "retain of %s: renewing failed; stopped", self.work_id, exc_info=True
                    )
                    return

        threading.Thread(
            target=renew_until_released, name=f"workunits-retain-{self.work_id}", daemon=True
        ).start()
        return self

    def __enter__(self) -> Retain:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class HeldRetains:
    """The leases one supervisor or client handed out and that are not released yet.

    So that ``release(id)`` ends them by the unit's ID, as ``retain(id)`` began
    them, for a caller that did not keep the ``Retain``.
    """

    def __init__(self) -> None:
        # Guards _by_unit: a dict or list change, O(leases of one unit).
        self._lock = threading.Lock()
        self._by_unit: dict[str, list[Retain]] = {}

    def hold(
        self,
        work_id: str,
        lease_id: str,
        lease: float,
        *,
        renew: Callable[[float], bool],
        release: Callable[[], bool],
    ) -> Retain:
        """A new ``Retain``, held here until it is released (either way)."""
        retain = Retain(
            work_id, lease_id, lease, renew=renew, release=release, on_release=self._dropped
        )
        with self._lock:
            self._by_unit.setdefault(work_id, []).append(retain)
        return retain

    def release(self, work_id: str) -> bool:
        """End every lease on ``work_id`` still held here; True if one was."""
        with self._lock:
            held = self._by_unit.pop(work_id, [])
        return any([retain.release() for retain in held])  # a list: release them all

    def _dropped(self, retain: Retain) -> None:
        with self._lock:
            held = self._by_unit.get(retain.work_id)
            if held is not None and retain in held:
                held.remove(retain)
                if not held:
                    del self._by_unit[retain.work_id]
