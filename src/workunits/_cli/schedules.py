"""``schedules``: the cron entries of a state dir, their next due time and latest firing.

Run in the main thread; reads the ledger only, so it works whether or not a
supervisor runs (schedules are added with ``sup.schedule`` in a program).
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import click

from workunits._cli._app import cli, emit_json, json_option, opened, state_option


def _when(ts: float) -> str:
    if math.isinf(ts):  # its cron names no later time
        return "never"
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@cli.command("schedules")
@state_option
@json_option
def schedules(state_dir: Path, as_json: bool) -> None:
    """List the schedules: name, cron, next due time (UTC) and the latest firing.

    A firing due while no supervisor ran shows as missed (or ran once at the
    next start, for a schedule with catch_up="run-once").
    """
    with opened(state_dir) as client:
        found = client.ledger.schedules.listing()
    if as_json:
        for info in found:
            last = info.last
            emit_json(
                {
                    "name": info.name,
                    "cron": info.cron,
                    "tz": info.tz,
                    "catch_up": info.catch_up,
                    "next_at": info.next_at,
                    "last": None
                    if last is None
                    else {"due_at": last.due_at, "outcome": last.outcome, "unit": last.unit},
                }
            )
        return
    if not found:
        click.echo("no schedules")
        return
    rows = [("NAME", "CRON", "TZ", "NEXT DUE", "LAST FIRING")]
    for info in found:
        last = info.last
        if last is None:
            shown = "-"
        else:
            shown = f"{_when(last.due_at)} {last.outcome}" + (f" {last.unit}" if last.unit else "")
        rows.append((info.name, info.cron, info.tz, _when(info.next_at), shown))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        padded = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        click.echo("  ".join([*padded, row[4]]))
