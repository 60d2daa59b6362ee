"""How units look on a terminal (rich) and in ``--json`` output.

Pure functions of ledger rows, used by ``ls``, ``show``, ``watch`` and the
verbs that report an ending; they run in whichever thread renders.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group as RenderGroup
from rich.console import RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from workunits._record import signal_name
from workunits._status import Status, is_terminal
from workunits.ledger import UnitRow

STATUS_STYLE = {
    "pending": "yellow",
    "running": "cyan",
    "completed": "green",
    "failed": "bold red",
    "killed": "magenta",
    "expired": "dim",
}
BAR_WIDTH = 10


def status_text(row: UnitRow) -> Text:
    shown = row.shown_status
    return Text(shown, style=STATUS_STYLE.get(shown, ""))


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


def progress_cell(row: UnitRow) -> RenderableType:
    """A bar with the unit's progress message; a pulsing bar while running without one."""
    message = Text(row.progress_message or "", overflow="ellipsis", no_wrap=True)
    if row.progress is None and row.status is not Status.RUNNING:
        return message
    if row.progress is None:
        bar = ProgressBar(total=None, width=BAR_WIDTH)  # indeterminate: a pulse
    else:
        bar = ProgressBar(total=1.0, completed=row.progress, width=BAR_WIDTH)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=BAR_WIDTH, no_wrap=True)
    grid.add_column(no_wrap=True, overflow="ellipsis")
    grid.add_row(bar, message)
    return grid


def units_table(rows: list[UnitRow], now: float, *, caption: str | None = None) -> Table:
    """The ``ls``/``watch`` table; fits 80 columns (the last two columns give way)."""
    table = Table(box=None, header_style="bold", caption=caption, pad_edge=False, expand=False)
    table.add_column("ID", no_wrap=True, min_width=9)
    table.add_column("KIND", no_wrap=True, max_width=8)
    table.add_column("STATUS", no_wrap=True, min_width=9)
    table.add_column("AGE", no_wrap=True, justify="right", min_width=3)
    table.add_column("PROGRESS", no_wrap=True, ratio=1, min_width=BAR_WIDTH, max_width=34)
    table.add_column("DESCRIPTION", no_wrap=True, overflow="ellipsis", ratio=1, min_width=6)
    for row in rows:
        table.add_row(
            row.id,
            row.kind,
            status_text(row),
            age(now - row.created_at),
            progress_cell(row),
            Text(row.description, overflow="ellipsis", no_wrap=True),
        )
    return table


def unit_doc(row: UnitRow) -> dict[str, Any]:
    """A row as one JSON object: what ``ls --json`` and ``show --json`` print."""
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
        "output_bytes": row.output_bytes,
        "retain": row.retain,
        "cancel_requested": row.cancel_requested,
        "session": row.session,
        "pid": row.pid,
        "expire_at": row.expire_at,
        "expired_at": row.expired_at,
    }


def stack(*parts: RenderableType) -> RenderGroup:
    return RenderGroup(*parts)
