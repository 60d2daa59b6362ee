"""``cancel``, ``kill``, ``retry`` and ``gc``: ending units through requests, starting a
failed one again, and freeing old rows.

Run in the main thread. ``cancel`` and ``kill`` never touch a process: they
append a request to the ledger, which the supervisor applies on its next
tick (or when one starts), then wait a little for its answer so they can say
what happened. ``gc`` works on the ledger directly.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from workunits._cli import _render
from workunits._cli._app import (
    cli,
    emit_json,
    id_argument,
    json_option,
    opened,
    parse_duration,
    seconds_option,
    state_option,
)
from workunits._client.ledger_client import Client
from workunits._core.status import is_terminal
from workunits._ledger.store import DEFAULT_EXPIRE_AFTER

ANSWER_WAIT = 5.0  # how long to wait for a live supervisor to apply the request


def wait_option(fn: Any) -> Any:
    return click.option(
        "--wait",
        "answer_wait",
        metavar="DURATION",
        default=f"{ANSWER_WAIT:g}s",
        show_default=True,
        help="How long to wait for the supervisor to apply the request.",
    )(fn)


@cli.command("cancel")
@state_option
@json_option
@click.option(
    "--grace",
    type=float,
    callback=seconds_option(),
    default=5.0,
    show_default=True,
    help="Seconds between the polite stop and SIGKILL.",
)
@wait_option
@id_argument
def cancel(state_dir: Path, as_json: bool, grace: float, answer_wait: str, work_id: str) -> None:
    """Stop a unit politely (SIGTERM, or a cancel at its next checkpoint), SIGKILL after --grace.

    A pending unit ends killed without ever running. On a unit that has
    already ended it does nothing, says so and exits 0.
    """
    _end(
        state_dir=state_dir,
        verb="cancel",
        work_id=work_id,
        args={"grace": grace},
        answer_wait=parse_duration(answer_wait),
        as_json=as_json,
    )


@cli.command("kill")
@state_option
@json_option
@wait_option
@id_argument
def kill(state_dir: Path, as_json: bool, answer_wait: str, work_id: str) -> None:
    """SIGKILL a unit's process group (and every unit it started) now."""
    _end(
        state_dir=state_dir,
        verb="kill",
        work_id=work_id,
        args=None,
        answer_wait=parse_duration(answer_wait),
        as_json=as_json,
    )


def _end(
    *,
    state_dir: Path,
    verb: str,
    work_id: str,
    args: dict[str, Any] | None,
    answer_wait: float,
    as_json: bool,
) -> None:
    with opened(state_dir) as client:
        seq = client.request(verb, work_id, args)
        row = client.row(work_id)
        doc: dict[str, Any] = {"id": work_id, "verb": verb, "requested": seq is not None}
        if seq is None:
            message = f"{_render.end_line(row)}: it had already ended, nothing to {verb}"
        elif not client.supervisor_running():
            doc["applied"] = False
            message = (
                f"{verb} of {work_id} queued: no supervisor is running on {state_dir}; "
                f"it applies when one starts"
            )
        else:
            message = _answer(client, verb, seq, answer_wait, doc)
        row = client.row(work_id)
    if as_json:
        emit_json({**doc, "status": row.shown_status})
    else:
        click.echo(message)


def _answer(client: Client, verb: str, seq: int, wait: float, doc: dict[str, Any]) -> str:
    work_id = doc["id"]
    answer = client.request_result(seq, timeout=wait)
    doc["applied"] = answer is not None
    if answer is None:
        return f"{verb} of {work_id} sent; the supervisor has not applied it yet"
    row = client.row(work_id)
    if isinstance(answer, dict) and answer.get("changed") is False:
        return f"{_render.end_line(row)}: it had already ended when the {verb} arrived"
    if is_terminal(row.status):
        return f"{_render.end_line(row)}"
    return f"{work_id} is stopping ({verb} applied; SIGKILL follows after the grace)"


@cli.command("retry")
@state_option
@json_option
@id_argument
def retry(state_dir: Path, as_json: bool, work_id: str) -> None:
    """Start a unit that ended failed or killed again, as a new unit with the same spec.

    The old unit stays as it ended; the new one's retry_of names it, and the
    old one's idempotency key now names the new one. Retrying the same unit
    again prints the same new unit. A supervisor starts it on its next tick.
    """
    with opened(state_dir) as client:
        handle = client.retry(work_id)
        row = client.row(handle.id)
    if as_json:
        emit_json({"id": row.id, "retry_of": row.retry_of, "status": row.shown_status})
    else:
        click.echo(f"{row.id} retries {work_id} ({row.shown_status})")


@cli.command("gc")
@state_option
@json_option
@click.option(
    "--older-than",
    metavar="DURATION",
    default=f"{DEFAULT_EXPIRE_AFTER / 86400:g}d",
    show_default=True,
    help="Expire units that ended longer ago than this, and forget rows expired as long ago.",
)
def gc(state_dir: Path, as_json: bool, older_than: str) -> None:
    """Free the ledger: drop results, output tails and checkpoints of old units.

    Units that ended before the cut read `expired` afterwards, and their notices
    are dropped, taken or not (keep the cut longer than your consumers lag);
    rows that had expired before it are deleted, and their IDs become unknown.
    """
    age = parse_duration(older_than)
    with opened(state_dir) as client:
        expired, freed = client.ledger.retention.expire_ended_before(time.time() - age)
        forgotten = client.ledger.retention.gc(age)
    if as_json:
        emit_json({"expired": expired, "bytes_freed": freed, "forgotten": forgotten})
        return
    click.echo(
        f"expired {expired} unit(s), freeing {_size(freed)}; "
        f"forgot {forgotten} unit(s) expired more than {older_than} ago"
    )


def _size(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
