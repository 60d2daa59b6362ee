"""``wait`` and ``result``: block until a unit ends; say how with the exit code.

Both run in the main thread and wait on the ledger (timed waits that back
off), so they work from any shell whether the supervisor is this machine's
``workunits serve`` or a program's own ``wu.Supervisor``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson

from workunits._cli import _render
from workunits._cli._app import (
    CliError,
    Exit,
    cli,
    emit_json,
    exit_for,
    finish,
    id_argument,
    json_option,
    opened,
    parse_duration,
    state_option,
    write_bytes,
)
from workunits._client.ledger_client import Client
from workunits._core.errors import NotFinished, WorkExpired
from workunits._core.record import WorkRecord
from workunits._core.status import is_terminal


def timeout_option(fn: Any) -> Any:
    return click.option(
        "--timeout",
        metavar="DURATION",
        help="Give up after this long (90s, 15m) and exit 4 if the unit still runs.",
    )(fn)


@cli.command("wait")
@state_option
@json_option
@timeout_option
@id_argument
def wait(state_dir: Path, as_json: bool, timeout: str | None, work_id: str) -> None:
    """Wait until a unit ends; exit 0 completed, 1 failed, 3 killed, 4 still running."""
    seconds = None if timeout is None else parse_duration(timeout)
    with opened(state_dir) as client:
        if seconds is None:
            warn_unsupervised(client, work_id)
        try:
            client.wait(work_id, seconds)
        except NotFinished:
            row = client.row(work_id)
            supervised = client.supervisor_running()
            if as_json:
                emit_json(_render.unit_doc(row, supervised))
                finish(Exit.RUNNING)
            raise CliError(
                f"{work_id} is still {_render.status_label(row, supervised)} after {seconds} s",
                Exit.RUNNING,
            ) from None
        row = client.row(work_id)
    if row.expired:
        raise WorkExpired(row.to_record())
    if as_json:
        emit_json(_render.unit_doc(row))
    else:
        click.echo(_render.end_line(row))
    code = exit_for(row.status)
    if code is not Exit.OK:
        finish(code)


@cli.command("result")
@state_option
@json_option
@timeout_option
@id_argument
def result(state_dir: Path, as_json: bool, timeout: str | None, work_id: str) -> None:
    """Wait for a unit and print its value (JSON where it can be).

    A shell unit has no value: its result is its output (the last 64 KiB).
    Exits like `wait` when the unit did not complete.
    """
    seconds = None if timeout is None else parse_duration(timeout)
    with opened(state_dir) as client:
        if seconds is None:
            warn_unsupervised(client, work_id)
        try:
            value = client.result(work_id, seconds)
        except NotFinished:
            row = client.row(work_id)
            label = _render.status_label(row, client.supervisor_running())
            raise CliError(f"{work_id} is still {label} after {seconds} s", Exit.RUNNING) from None
    print_result(work_id, value, as_json=as_json)


def print_result(work_id: str, value: Any, *, as_json: bool) -> None:
    """Print a unit's value as ``result`` does, here and inside a unit (``in_unit``)."""
    if isinstance(value, WorkRecord):  # a kind without values
        if as_json:
            tail = value.output_tail.decode("utf-8", "replace")
            emit_json({"id": value.id, "exit_code": value.exit_code, "output": tail})
        else:
            write_bytes(value.output_tail)
        return
    if as_json:
        emit_json({"id": work_id, "result": _jsonable(value)})
    else:
        click.echo(_text(value))


def warn_unsupervised(client: Client, work_id: str) -> None:
    """One line on stderr when a wait without a timeout (or ``tail -f``) can only end once
    a supervisor starts.

    (With a timeout, the line that reports it says so instead.)
    """
    row = client.row(work_id)
    if not is_terminal(row.status) and not client.supervisor_running():
        click.echo(
            f"workunits: {work_id} is {_render.status_label(row, supervised=False)}: nothing "
            f"will change until a supervisor runs on {client.state_dir} (`workunits serve`)",
            err=True,
        )


def _jsonable(value: Any) -> Any:
    try:
        orjson.dumps(value)
    except TypeError:
        return repr(value)
    return value


def _text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)
