"""The registry: ``{id -> WorkRecord}``, changed only through ``insert`` and ``update``.

Owned by the SupervisorActor and used only from its thread, so it needs no locks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from workunits._core.errors import InvalidTransition, UnknownWork
from workunits._core.record import WorkRecord
from workunits._core.status import allowed, is_terminal

Change = Callable[[WorkRecord], WorkRecord]


class Registry:
    def __init__(self) -> None:
        self._records: dict[str, WorkRecord] = {}
        # Invariant: _children[p] holds exactly the ids in _records whose parent is p.
        self._children: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, work_id: object) -> bool:
        return work_id in self._records

    def __iter__(self) -> Iterator[WorkRecord]:
        return iter(list(self._records.values()))

    def get(self, work_id: str) -> WorkRecord:
        try:
            return self._records[work_id]
        except KeyError:
            raise UnknownWork(f"no work unit {work_id!r} in this supervisor") from None

    def find(self, work_id: str) -> WorkRecord | None:
        return self._records.get(work_id)

    def children(self, work_id: str) -> set[str]:
        return set(self._children.get(work_id, ()))

    def insert(self, record: WorkRecord) -> None:
        """Only the supervisor's ``register`` chokepoint calls this."""
        if record.id in self._records:
            raise InvalidTransition(f"{record.id} is already registered")
        self._records[record.id] = record
        if record.parent is not None:
            self._children.setdefault(record.parent, set()).add(record.id)

    def update(self, work_id: str, change: Change) -> tuple[WorkRecord, WorkRecord]:
        """Apply ``change`` to the current record; return ``(old, new)``.

        ``new is old`` means nothing was written: ``change`` returned the same
        object, or it tried to leave a terminal status (a normal race, ignored).
        A change the lifecycle table forbids otherwise is a bug and raises.
        """
        old = self.get(work_id)
        new = change(old)
        if new is old:
            return old, old
        if new.id != old.id or new.kind != old.kind or new.parent != old.parent:
            raise InvalidTransition(f"{work_id}: an update may not change id, kind or parent")
        if is_terminal(old.status) and new.status != old.status:
            return old, old
        if not allowed(old.status, new.status):
            raise InvalidTransition(
                f"{work_id}: {old.status.value} -> {new.status.value} is not a lifecycle transition"
            )
        self._records[work_id] = new
        return old, new

    def remove(self, work_id: str) -> WorkRecord:
        record = self._records.pop(work_id)
        if record.parent is not None:
            siblings = self._children.get(record.parent)
            if siblings is not None:
                siblings.discard(work_id)
                if not siblings:
                    del self._children[record.parent]
        return record
