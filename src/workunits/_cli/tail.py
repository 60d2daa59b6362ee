"""``tail``: a unit's output from its start; with ``-f``, followed until the unit ends.

Runs in the main thread and reads the output file (or an agent's transcript)
directly, with the stream's own offset: following never moves anybody
else's. While it follows, the unit is retained (a lease it renews), and
released on every way out -- the end, an error, Ctrl-C; if it is killed
outright, the lease lapses with its process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click
import orjson

from workunits._cli import _render
from workunits._cli._app import (
    Exit,
    cli,
    emit_json,
    exit_for,
    finish,
    id_argument,
    json_option,
    opened,
    state_option,
    write_bytes,
)
from workunits._cli.waiting import warn_unsupervised
from workunits._client.ledger_client import Client
from workunits._core.errors import WorkunitsError
from workunits._core.transcript import TranscriptEvent, lines_of, render_transcript

TRANSCRIPT_KINDS = frozenset({"agent", "dream", "workflow", "teammate"})
VIEWER_LEASE = 30.0  # seconds; renewed every third of it while following


@cli.command("tail")
@state_option
@json_option
@click.option("-f", "--follow", is_flag=True, help="Follow the output until the unit ends.")
@click.option("--raw", is_flag=True, help="An agent's transcript as JSONL, not rendered.")
@id_argument
def tail(state_dir: Path, as_json: bool, follow: bool, raw: bool, work_id: str) -> None:
    """Print a unit's output (an agent's transcript as readable events).

    With -f, exits with the unit's status code once it ends: 0 completed,
    1 failed, 3 killed.
    """
    with opened(state_dir) as client:
        row = client.row(work_id)
        if follow:
            warn_unsupervised(client, work_id)  # or it would follow in silence
        transcript = row.kind in TRANSCRIPT_KINDS and not raw
        with _retained(client, work_id, follow):
            stream = client.stream(work_id, follow=follow)
            try:
                if as_json:
                    _print_json(stream, transcript=row.kind in TRANSCRIPT_KINDS)
                elif transcript:
                    _print_events(stream)
                else:
                    _print_raw(stream)
            finally:
                stream.close()
        if not follow:
            return
        row = client.row(work_id)
        if as_json:
            emit_json({"type": "status", **_render.unit_doc(row)})
        else:
            click.echo(f"-- {_render.end_line(row)}", err=True)
        code = exit_for(row.status)
    if code is not Exit.OK:
        finish(code)


@contextlib.contextmanager
def _retained(client: Client, work_id: str, follow: bool) -> Iterator[None]:
    if not follow:
        yield
        return
    # A lease renewed while we follow: if this process dies (SIGKILL, a closed
    # terminal), it lapses at once, and otherwise within its lease.
    retain = client.retain(work_id, lease=VIEWER_LEASE).keep_renewing()
    try:
        yield
    finally:
        # A release that cannot be written (the ledger went away) must not hide
        # why we are leaving; the lease lapses by itself anyway.
        with contextlib.suppress(WorkunitsError):
            retain.release()


def _print_raw(stream: Iterator[bytes]) -> None:
    for chunk in stream:
        write_bytes(chunk)


def _print_events(stream: Iterator[bytes]) -> None:
    for line in render_transcript(stream):  # the public reader (wu.render_transcript)
        click.echo(line)


def rendered_line(line: bytes) -> str:
    """One transcript line as a person reads it (a line that is not JSON, as it is)."""
    return TranscriptEvent.from_line(line).render()


def _print_json(stream: Iterator[bytes], *, transcript: bool) -> None:
    for line in lines_of(stream):
        if transcript:
            with contextlib.suppress(orjson.JSONDecodeError):
                emit_json(orjson.loads(line))
                continue
        emit_json({"type": "output", "line": line.decode("utf-8", "replace")})
