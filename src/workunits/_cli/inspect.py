"""``ls`` and ``show``: what the ledger knows, as tables and trees or as JSON lines.

Both run in the main thread, read the ledger only (they never create one;
a read-only state dir is read through a read-only connection) and show units
whether or not a supervisor runs -- saying so when none does: a ``running``
row then makes no progress until the next supervisor resumes or fails it.
"""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from workunits._cli import _render
from workunits._cli._app import (
    cli,
    emit_json,
    id_argument,
    json_option,
    opened,
    printable,
    state_option,
)
from workunits._cli.tail import TRANSCRIPT_KINDS, rendered_line
from workunits._client.ledger_client import Client
from workunits._core.record import signal_name
from workunits._core.retry import counted, handed_over
from workunits._core.status import Reason, Status, is_terminal
from workunits._ledger import EXPIRED, UnitRow
from workunits._ledger.unreadable import Unreadable
from workunits._util import outputfile
from workunits._util.procid import pid_exists

STATUS_CHOICES = [s.value for s in Status] + [EXPIRED]
CHECKPOINT_SUMMARY = 200
TAIL_LINES = 10


@cli.command("ls")
@state_option
@json_option
@click.option("--status", type=click.Choice(STATUS_CHOICES), help="Only units with this status.")
@click.option("--kind", help="Only units of this kind (shell, agent, ...).")
@click.option("--parent", metavar="ID", help="Only children of this unit.")
@click.option("-a", "--all", "show_all", is_flag=True, help="Include ended and expired units.")
def ls(
    *,
    state_dir: Path,
    as_json: bool,
    status: str | None,
    kind: str | None,
    parent: str | None,
    show_all: bool,
) -> None:
    """List units: pending and running ones, or every one with --all."""
    with opened(state_dir) as client:
        rows = client.rows(status=status, kind=kind, parent=parent, on_unreadable=_left_out)
        supervised = client.supervisor_running()
    if status is None and not show_all:
        rows = [r for r in rows if not is_terminal(r.status)]
    if as_json:
        for row in rows:
            emit_json(_render.unit_doc(row, supervised))
        return
    console = Console()
    if not rows:
        hint = "" if show_all or status else " (--all shows ended ones)"
        console.print(f"no units{hint}", style="dim")
        return
    console.print(
        _render.units_table(rows, time.time(), width=console.width, supervised=supervised)
    )


def _left_out(bad: Unreadable) -> None:
    """A row that cannot be read: one line on stderr, and the others are listed."""
    click.echo(f"workunits: left out of the list: {printable(str(bad.error))}", err=True)


@cli.command("show")
@state_option
@json_option
@id_argument
def show(state_dir: Path, as_json: bool, work_id: str) -> None:
    """Everything about one unit: how it ended, progress, checkpoint, attempts, children."""
    with opened(state_dir) as client:
        row = client.row(work_id)
        supervised = client.supervisor_running()
        if as_json:
            emit_json(_show_doc(client, row, supervised))
            return
        Console().print(
            _details(row, time.time(), supervised, _log(client, row)),
            _children_tree(client, row, supervised),
        )


def _pid_gone(row: UnitRow) -> bool | None:
    """Whether the process on record has exited (None: no live unit, or no pid to look at)."""
    if row.pid is None or is_terminal(row.status):
        return None
    return not pid_exists(row.pid)


def _show_doc(client: Client, row: UnitRow, supervised: bool) -> dict[str, Any]:
    doc = _render.unit_doc(row, supervised)
    doc["pid_gone"] = _pid_gone(row)
    doc["checkpoint"] = row.last_checkpoint()
    doc["result_format"] = None if row.result is None else row.result.format
    # A JSON result runs nothing to read; a pickle would run the unit's code here.
    json_result = row.result is not None and row.result.format == "json"
    doc["result"] = client.ledger.units.load_result(row.id) if json_result else None
    doc["output_tail"] = row.output_tail.decode("utf-8", "replace")
    doc["log"] = _log(client, row)
    doc["children"] = [child.id for child in client.rows(parent=row.id)]
    return doc


def _when(t: float | None, now: float) -> str:
    if t is None:
        return "-"
    stamp = datetime.datetime.fromtimestamp(t).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    ago = now - t
    rel = f"{_render.age(ago)} ago" if ago >= 0 else f"in {_render.age(-ago)}"
    return f"{stamp} ({rel})"


def _log(client: Client, row: UnitRow) -> str | None:
    """Where a shell's output is kept after its end: the caller's ``log=`` file, or its
    kept log in the state dir (the state dir's name for either, which expiry removes)."""
    if row.kind != "shell":
        return None
    kept = outputfile.log_path(client.state_dir, row.id)
    try:
        return os.readlink(kept)  # log=PATH: a pointer to the caller's file
    except FileNotFoundError:
        return None
    except OSError:
        return kept  # keep_output: the log itself (readlink says EINVAL)


def _attempts(row: UnitRow) -> str:
    resumable = "resumable" if row.resumable else "not resumable"
    handed = handed_over(row.attempts)
    if handed:  # deploys raise the attempt but count as no failure (invariant 13)
        used = counted(row.attempt, row.attempts)
        return (
            f"{row.attempt}: {used} of {row.max_attempts} counted, "
            f"{handed} handed over at deploys ({resumable})"
        )
    return f"{row.attempt} of {row.max_attempts} ({resumable})"


def _details(row: UnitRow, now: float, supervised: bool, log: str | None) -> RenderableType:
    head = Text.assemble(
        (row.id, "bold"), "  ", row.kind, "  ", _render.status_text(row, supervised)
    )
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")

    def field(name: str, value: RenderableType | None) -> None:
        if value is not None and value != "":
            grid.add_row(name, value)

    field("description", Text(row.description))
    field("parent", row.parent)
    field("key", row.key)
    field("created", _when(row.created_at, now))
    field("started", _when(row.started_at, now) if row.started_at else None)
    if row.ended_at is not None:
        field("ended", _when(row.ended_at, now))
        if row.started_at is not None:
            field("ran for", _render.age(row.ended_at - row.started_at))
        field("outcome", _outcome(row))
    field("attempts", _attempts(row))
    field("session", row.session)
    field("pid", _pid(row))
    if row.progress is not None or row.progress_message:
        field("progress", _render.progress_cell(row, now=now))
    if row.evidence:
        field("evidence", Text(", ".join(f"{k}={v}" for k, v in row.evidence.items())))
    if row.retry_at is not None and not is_terminal(row.status):
        field("next attempt", _when(row.retry_at, now))
    for earlier in row.attempts:
        style = "" if earlier.reason is Reason.HANDED_OVER else "red"
        field(f"attempt {earlier.attempt}", Text(earlier.describe(), style=style))
    field("retry of", row.retry_of)
    field("stall after", None if row.stall_after is None else f"{row.stall_after:g} s")
    field("sandbox", None if row.sandbox is None else Text(row.sandbox.describe()))
    field("not enforced", Text("; ".join(row.unenforced), style="yellow") or None)
    field("checkpoint", _checkpoint(row))
    field("retained", f"by {row.retain} viewer(s)" if row.retain else None)
    if row.cancel_requested and not is_terminal(row.status):
        field("cancel", "requested")
    field("output", _output(row))
    field("log", log)
    if row.expired_at is not None:
        field("expired", _when(row.expired_at, now) + "; result and output are gone")
    elif row.expire_at is not None:
        field("expires", _when(row.expire_at, now))
    if row.error:
        field("error", Text(row.error.rstrip(), style="red"))
    return _render.stack(head, grid)


def _pid(row: UnitRow) -> Text | None:
    if row.pid is None:
        return None
    if _pid_gone(row):
        return Text(f"{row.pid} (gone: no such process)", style="red")
    return Text(str(row.pid))


def _outcome(row: UnitRow) -> Text:
    parts = [row.status.value]
    if row.reason is not None:
        parts.append(f"reason {row.reason.value}")
    if row.exit_code is not None:
        parts.append(f"exit code {row.exit_code}")
    if row.signal is not None:
        parts.append(f"signal {signal_name(row.signal)}")
    return Text(", ".join(parts), style=_render.STATUS_STYLE.get(row.status.value, ""))


def _checkpoint(row: UnitRow) -> str | None:
    if row.checkpoint is None:
        return None
    text = orjson.dumps(row.last_checkpoint()).decode()
    cut = text[:CHECKPOINT_SUMMARY]
    return cut if len(cut) == len(text) else f"{cut}… ({len(row.checkpoint)} bytes)"


def _output(row: UnitRow) -> RenderableType | None:
    if not is_terminal(row.status):
        return f"live at {row.output_path}" if row.output_path else None
    size = f"{row.output_bytes} bytes"
    if not row.output_tail:
        return size
    raw = row.output_tail.rstrip(b"\n").split(b"\n")
    if row.kind in TRANSCRIPT_KINDS:  # rendered as `tail` renders it, not as JSONL
        lines = [text for line in raw for text in rendered_line(line).split("\n")]
    else:
        lines = [line.decode("utf-8", "replace") for line in raw]
    lines = lines[-TAIL_LINES:]
    body = Text("\n".join(lines), style="dim")
    return _render.stack(Text(f"{size}; the last {len(lines)} line(s):"), body)


def _children_tree(client: Client, row: UnitRow, supervised: bool) -> RenderableType:
    children = client.rows(parent=row.id)
    if not children:
        return Text("")
    tree = Tree(Text("children", style="bold"))

    def add(branch: Tree, kids: list[UnitRow]) -> None:
        for kid in kids:
            label = Text.assemble(
                (kid.id, "bold"),
                " ",
                kid.kind,
                " ",
                _render.status_text(kid, supervised),
                "  ",
                kid.description,
            )
            add(branch.add(label), client.rows(parent=kid.id))

    add(tree, children)
    return tree
