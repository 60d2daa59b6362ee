"""Rendering the parent/child tree of units as text."""

from __future__ import annotations

from workunits._core.errors import UnknownWork
from workunits._core.record import WorkRecord


def _label(record: WorkRecord) -> str:
    end = f" ({record.describe_end()})" if record.ended_at is not None else ""
    return f"{record.id} {record.kind} {record.status.value}{end}  {record.description}"


def render_tree(records: list[WorkRecord], root: str | None = None) -> str:
    by_id = {r.id: r for r in records}
    children: dict[str | None, list[WorkRecord]] = {}
    for record in sorted(records, key=lambda r: r.created_at):
        parent = record.parent if record.parent in by_id else None
        children.setdefault(parent, []).append(record)
    if root is not None and root not in by_id:
        raise UnknownWork(f"no work unit {root!r} in this supervisor")
    tops = [by_id[root]] if root is not None else children.get(None, [])
    lines: list[str] = []

    def walk(record: WorkRecord, prefix: str, last: bool, top: bool) -> None:
        lines.append(
            _label(record) if top else f"{prefix}{'└─ ' if last else '├─ '}{_label(record)}"
        )
        kids = children.get(record.id, [])
        inner = "" if top else prefix + ("   " if last else "│  ")
        for i, kid in enumerate(kids):
            walk(kid, inner, i == len(kids) - 1, False)

    for top in tops:
        walk(top, "", True, True)
    return "\n".join(lines)
