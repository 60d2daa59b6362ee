"""``backup DEST``: a consistent copy of a live state dir (``_ledger.sqlite.backup``)."""

from __future__ import annotations

from pathlib import Path

import click

from workunits._cli._app import cli, emit_json, json_option, opened, state_option


@cli.command("backup")
@state_option
@json_option
@click.argument("dest", type=click.Path(path_type=Path))
def backup(state_dir: Path, as_json: bool, dest: Path) -> None:
    """Copy the state dir to DEST while a supervisor may be running.

    The ledger is copied as of one transaction (SQLite's backup API), with
    its key and the value files and transcripts it refers to. Restore by
    pointing `workunits serve --state DEST` (or Supervisor(DEST)) at the copy:
    units that were running resume from their checkpoints or fail `lost`.
    """
    with opened(state_dir) as client:
        report = client.ledger.backup(dest)
    if as_json:
        emit_json(
            {
                "dest": str(report.dest),
                "units": report.units,
                "value_files": report.value_files,
                "transcripts": report.transcripts,
                "bytes": report.bytes,
            }
        )
        return
    click.echo(
        f"backed up {report.units} unit(s), {report.value_files} value file(s) and "
        f"{report.transcripts} transcript(s) ({report.bytes} bytes) to {report.dest}"
    )
