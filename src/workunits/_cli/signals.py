"""``signal``: outside input for a unit that waits for it (``ctx.wait_for(NAME)``).

Run in the main thread. The signal is written to the ledger directly (no
request to wait for): a running supervisor hands it to the unit on its next
tick, and one sent while none runs waits in the ledger for the unit.
"""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from workunits._cli import _render
from workunits._cli._app import Exit, cli, emit_json, id_argument, json_option, opened, state_option


@cli.command("signal")
@state_option
@json_option
@click.option(
    "--value",
    "value_json",
    metavar="JSON",
    default="null",
    show_default=True,
    help="The signal's value, as JSON.",
)
@id_argument
@click.argument("name")
def signal(state_dir: Path, as_json: bool, value_json: str, work_id: str, name: str) -> None:
    """Send the signal NAME to a unit; ctx.wait_for(NAME) inside it returns the value.

    Signals of one name queue in order, and one sent before the unit waits is
    kept until it does. Exits 3 (and keeps nothing) when the unit has ended.
    """
    try:
        value = orjson.loads(value_json)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON ({exc}); quote strings: --value '\"yes\"'") from None
    with opened(state_dir) as client:
        sent = client.signal(work_id, name, value)
        row = client.row(work_id)
    if as_json:
        emit_json({"id": work_id, "name": name, "sent": sent, "status": row.shown_status})
    elif sent:
        click.echo(f"signal {name} sent to {work_id} ({row.shown_status})")
    else:
        click.echo(f"{_render.end_line(row)}: it has ended, the signal {name} was not kept")
    if not sent:
        raise SystemExit(Exit.KILLED)
