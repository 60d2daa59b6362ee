"""How units look on a terminal (rich) and in ``--json`` output.

Pure functions of ledger rows, used by ``ls``, ``show``, ``watch`` and the
verbs that report an ending; they run in whichever thread renders.
"""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Group as RenderGroup
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from workunits._core.record import signal_name
from workunits._core.sandbox import sandbox_doc
from workunits._core.status import Status, is_terminal
from workunits._ledger import UnitRow

STATUS_STYLE = {
    "pending": "yellow",
    "running": "cyan",
    "completed": "green",
    "failed": "bold red",
    "killed": "magenta",
    "expired": "dim",
}
BAR_WIDTH = 10
TABLE_BAR_WIDTH = 8


NO_SUPERVISOR = "(no supervisor)"


def status_label(row: UnitRow, supervised: bool = True) -> str:
    """``running``, or ``running (no supervisor)`` when nobody holds the state dir.

    Without a supervisor a pending unit does not start and a running one makes
    no progress, whatever its row says: the next supervisor resumes it or fails
    it ``lost``.
    """
    shown = row.shown_status
    if supervised or is_terminal(row.status) or row.expired:
        return shown
    return f"{shown} {NO_SUPERVISOR}"


def status_text(row: UnitRow, supervised: bool = True) -> Text:
    shown = row.shown_status
    return Text(status_label(row, supervised), style=STATUS_STYLE.get(shown, ""))


def age(seconds: float) -> str:
    """A short age: ``42s``, ``7m``, ``3h``, ``12d``."""
    seconds = max(0.0, seconds)
    for size, suffix in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{suffix}"
    return f"{int(seconds)}s"


def how_it_ended(row: UnitRow) -> str:
    """``completed``, ``failed (exit code 2)``, ``killed (reason cancelled)``; or the status."""
    if not is_terminal(row.status):
        return row.status.value
    end = row.to_record().describe_end()
    return row.status.value if end == row.status.value else f"{row.status.value} ({end})"


def end_line(row: UnitRow) -> str:
    """One line saying how a unit ended (or where it stands)."""
    expired = " (expired)" if row.expired else ""
    return f"{row.id} {how_it_ended(row)}{expired}"


def progress_bar(fraction: float, width: int = BAR_WIDTH) -> Text:
    """``━━━━━─────``: heavy for done, light for to do, readable without colour too."""
    done = round(max(0.0, min(1.0, fraction)) * width)
    return Text.assemble(("━" * done, "bar.complete"), ("─" * (width - done), "bar.back"))


def progress_cell(row: UnitRow, bar_width: int = BAR_WIDTH, now: float | None = None) -> Text:
    """The bar and percentage (while the unit runs and has reported), its age, then its message.

    An ended unit shows no bar: its last percentage (a completed unit's 40%)
    would read as work still to do. The age (``12s ago``) is shown while the
    unit runs, so a stalled unit does not look like a working one. One Text,
    so its width is what the column gives it: a long message is cut with an
    ellipsis, never the bar.
    """
    cell = Text(no_wrap=True, overflow="ellipsis")
    if row.progress is not None and not is_terminal(row.status):
        cell.append_text(progress_bar(row.progress, bar_width))
        cell.append(f" {row.progress * 100:3.0f}% ")
    if now is not None and row.progress_at is not None and row.status == Status.RUNNING:
        cell.append(f"{age(now - row.progress_at)} ago ", style="dim")
    cell.append(row.progress_message or "")
    return cell


STATUS_WIDTH = 9
FIXED_COLUMNS = 9 + 8 + STATUS_WIDTH + 4 + 5 * 2  # ID, KIND, STATUS, AGE and six columns' gaps


def units_table(
    rows: list[UnitRow],
    now: float,
    *,
    width: int = 80,
    caption: str | None = None,
    supervised: bool = True,
) -> Table:
    """The ``ls``/``watch`` table, exactly ``width`` columns wide at most (80 by default).

    Every width is set here rather than measured by rich: a long description
    or progress message would otherwise squeeze the short columns away.
    ``supervised=False`` marks pending and running units ``(no supervisor)``.
    """
    status_width = max([STATUS_WIDTH, *(len(status_label(r, supervised)) for r in rows)])
    room = max(2 * BAR_WIDTH, width - FIXED_COLUMNS - (status_width - STATUS_WIDTH))
    progress = min(32, max(BAR_WIDTH, room * 11 // 20))  # 22 of 40 in 80 columns
    table = Table(box=None, header_style="bold", caption=caption, pad_edge=False, expand=False)
    table.add_column("ID", no_wrap=True, width=9)
    table.add_column("KIND", no_wrap=True, width=8, overflow="ellipsis")
    table.add_column("STATUS", no_wrap=True, width=status_width)
    table.add_column("AGE", no_wrap=True, justify="right", width=4)
    table.add_column("PROGRESS", no_wrap=True, width=progress, overflow="ellipsis")
    table.add_column("DESCRIPTION", no_wrap=True, width=room - progress, overflow="ellipsis")
    for row in rows:
        table.add_row(
            row.id,
            row.kind,
            status_text(row, supervised),
            age(now - row.created_at),
            progress_cell(row, TABLE_BAR_WIDTH, now),
            Text(row.description, overflow="ellipsis", no_wrap=True),
        )
    return table


def unit_doc(row: UnitRow, supervised: bool | None = None) -> dict[str, Any]:
    """A row as one JSON object: what ``ls --json`` and ``show --json`` print.

    ``supervisor_running`` says whether a supervisor held the state dir when
    it was read (None where the caller did not look).
    """
    return {
        "id": row.id,
        "kind": row.kind,
        "status": row.shown_status,
        "ended_as": row.status.value if row.expired else None,
        "parent": row.parent,
        "description": row.description,
        "key": row.key,
        "attempt": row.attempt,
        "max_attempts": row.max_attempts,
        "resumable": row.resumable,
        "created_at": row.created_at,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "exit_code": row.exit_code,
        "signal": None if row.signal is None else signal_name(row.signal),
        "reason": None if row.reason is None else row.reason.value,
        "error": row.error,
        "progress": row.progress,
        "progress_message": row.progress_message,
        "progress_at": row.progress_at,
        "evidence": row.evidence,
        "retry": None if row.retry is None else orjson.loads(row.retry.to_json()),
        "retry_at": row.retry_at,
        "retry_of": row.retry_of,
        "attempts": [a.to_doc() for a in row.attempts],
        "stall_after": row.stall_after,
        "output_bytes": row.output_bytes,
        "retain": row.retain,
        "cancel_requested": row.cancel_requested,
        "session": row.session,
        "pid": row.pid,
        "expire_at": row.expire_at,
        "expired_at": row.expired_at,
        "sandbox": sandbox_doc(row.sandbox, row.unenforced),
        "supervisor_running": supervised,
    }


def stack(*parts: RenderableType) -> RenderGroup:
    return RenderGroup(*parts)
