"""Notice claims and retain leases for consumers that are not local processes.

The HTTP API's clients claim notices and retain units with a lease they
renew, under an owner name such as ``http:<token id>`` (a local process's
claims live as long as the process instead). The ledger holds both
(``_ledger/outbox.py``, ``_ledger/retains.py``); this module is the
supervisor's side of it, so the HTTP layer reaches them through ``Supervisor``
like every other call. Runs in the caller's thread; each call is one short
ledger transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from workunits._core import ids
from workunits._core.record import Notification
from workunits._core.seconds import MAX_CLAIM_LEASE, seconds
from workunits._ledger import Ledger


@dataclass(frozen=True, slots=True)
class NoticeClaim:
    """A notice held by a remote consumer until it acks, releases, or lets the lease lapse."""

    notice: Notification
    token: str
    lease: float


def check_lease(lease: object) -> float:
    return seconds("lease", lease, most=MAX_CLAIM_LEASE)


class HttpConsumers:
    """Claims and leases on one supervisor's ledger."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def claim(self, parent: str | None, owner: str, lease: float) -> NoticeClaim | None:
        if parent is not None:
            ids.validate(parent)
        seconds = check_lease(lease)
        claimed = self._ledger.outbox.claim(parent, owner=owner, lease=seconds)
        if claimed is None:
            return None
        return NoticeClaim(claimed.notice, claimed.token, seconds)

    def ack(self, work_id: str, token: str | None) -> bool:
        ids.validate(work_id)
        return self._ledger.outbox.ack(work_id, token)

    def release(self, work_id: str, token: str) -> bool:
        ids.validate(work_id)
        return self._ledger.outbox.release(work_id, token)

    def renew(self, work_id: str, token: str, lease: float) -> bool:
        ids.validate(work_id)
        return self._ledger.outbox.renew(work_id, token, check_lease(lease))

    def retain(self, work_id: str, lease: float, owner: str) -> str:
        self._ledger.units.require(work_id)  # InvalidWorkId / UnknownWork: no lease on nothing
        return self._ledger.retains.add(work_id, check_lease(lease), owner=owner)

    def renew_retain(self, lease_id: str, lease: float, unit: str | None = None) -> bool:
        return self._ledger.retains.renew(lease_id, check_lease(lease), unit=unit)

    def release_retain(self, lease_id: str, unit: str | None = None) -> bool:
        return self._ledger.retains.release(lease_id, unit=unit)

    def retained(self, work_id: str) -> bool:
        return work_id in self._ledger.retains.held([work_id])

    def waiting(self) -> int:
        """Notices not yet acknowledged, for every parent."""
        return self._ledger.outbox.size()
