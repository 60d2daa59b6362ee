"""``submit``: a shell command or an importable callable, as a pending unit in the ledger.

Runs in the main thread. It inserts the row and returns at once: a running
``workunits serve`` (or any supervisor on the state dir) picks the unit up
on its next tick. Creates the state dir and ledger if they are missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from workunits._cli._app import cli, emit_json, opened, parse_duration, state_option
from workunits._client.ledger_client import ClientHandle
from workunits._core.errors import SpecError
from workunits._util import strictjson


@cli.command("submit", context_settings={"ignore_unknown_options": False})
@state_option
@click.option("--key", help="Idempotency key: resubmitting with it returns the same unit.")
@click.option("-d", "--description", help="What the unit is for (default: the command).")
@click.option("--timeout", metavar="DURATION", help="Kill the unit after this long (90s, 15m).")
@click.option("--cwd", type=click.Path(file_okay=False, exists=True), help="Working directory.")
@click.option(
    "--env", "env_items", multiple=True, metavar="NAME=VALUE", help="Environment (replaces it)."
)
@click.option(
    "--on-lost",
    type=click.Choice(["fail", "restart"]),
    default="fail",
    show_default=True,
    help="If the supervisor dies mid-run: fail the unit, or run it again.",
)
@click.option(
    "--log",
    "log",
    metavar="PATH",
    help="Write the output into this file, which stays after the end (relative: to here).",
)
@click.option(
    "--keep-output",
    is_flag=True,
    help="Keep the whole output in the state dir until the unit expires.",
)
@click.option("--agent", "ref", metavar="MODULE:FUNCTION", help="Run a callable, not a command.")
@click.option(
    "--workflow",
    "workflow_ref",
    metavar="MODULE:FUNCTION",
    help="Run a callable as a workflow (its ctx.step()s run once, across restarts).",
)
@click.option("--args", "args_json", metavar="JSON", help="The callable's arguments (a list).")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Its keyword arguments (an object).")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Attempts for a resumable agent.")
@click.option(
    "--not-before",
    metavar="DURATION",
    help="Keep the unit pending this long before it may start (90s, 15m, 2h).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the ID.")
@click.option("--json", "as_json", is_flag=True, help="Print the unit as one JSON object.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(
    *,
    state_dir: Path,
    key: str | None,
    description: str | None,
    timeout: str | None,
    cwd: str | None,
    env_items: tuple[str, ...],
    on_lost: str,
    log: str | None,
    keep_output: bool,
    ref: str | None,
    workflow_ref: str | None,
    args_json: str | None,
    kwargs_json: str | None,
    max_attempts: int | None,
    not_before: str | None,
    quiet: bool,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Submit a unit and print its ID.

    \b
    workunits submit --key nightly -d tests -- make test   (argv, no shell)
    workunits submit -- 'make test | tee log'              (one word: /bin/sh -c)
    workunits submit --log build.log -- make               (output kept in build.log)
    workunits submit --agent pkg.mod:fn --args '[1, 2]' --kwargs '{"n": 3}'
    workunits submit --workflow pkg.mod:nightly --key nightly-2024-06-01
    """
    seconds = None if timeout is None else parse_duration(timeout)
    delay = None if not_before is None else parse_duration(not_before)
    if ref is not None and workflow_ref is not None:
        raise SpecError("give --agent or --workflow, not both")
    with opened(state_dir, create=True) as client:
        if ref is not None or workflow_ref is not None:
            option = "--agent" if ref is not None else "--workflow"
            if command or cwd or env_items or on_lost != "fail" or log or keep_output:
                raise SpecError(
                    f"{option} runs a callable: it takes no command, --cwd, --env, "
                    f"--on-lost, --log or --keep-output"
                )
            args = _json_arg(args_json, list, "--args", "a JSON list")
            kwargs = _json_arg(kwargs_json, dict, "--kwargs", "a JSON object")
            submit_call = client.agent if ref is not None else client.workflow
            handle = submit_call(
                ref or workflow_ref or "",
                *args,
                key=key,
                description=description,
                timeout=seconds,
                max_attempts=max_attempts,
                not_before=delay,
                **kwargs,
            )
        else:
            if args_json is not None or kwargs_json is not None or max_attempts is not None:
                raise SpecError("--args, --kwargs and --max-attempts go with --agent or --workflow")
            if not command:
                raise SpecError("nothing to run: give a command after --, or --agent MODULE:FN")
            handle = client.shell(
                command[0] if len(command) == 1 else list(command),
                key=key,
                cwd=cwd,
                env=_env(env_items) if env_items else None,
                timeout=seconds,
                description=description,
                on_lost=on_lost,
                not_before=delay,
                log=log,
                keep_output=keep_output,
            )
        _report(handle, quiet=quiet, as_json=as_json)


def _report(handle: ClientHandle, *, quiet: bool, as_json: bool) -> None:
    row = handle.row()
    if as_json:
        emit_json({"id": row.id, "created": handle.created, "status": row.shown_status})
        return
    click.echo(row.id)
    if quiet:
        return
    if not handle.created:
        click.echo(f"(the key names the existing unit {row.id}, {row.shown_status})", err=True)
    elif not handle.client.supervisor_running():
        click.echo(
            f"(pending: no supervisor is running on {handle.client.state_dir}; "
            f"start one with `workunits serve`)",
            err=True,
        )


def _json_arg(text: str | None, kind: type, option: str, what: str) -> Any:
    if text is None:
        return kind()
    try:
        # The standard parser: integers stay exact (orjson turns one beyond 64 bits
        # into a float), and NaN and Infinity, which are not JSON, are refused.
        value = json.loads(text, parse_constant=_not_json)
    except ValueError as exc:
        raise SpecError(f"{option} is not valid JSON: {exc}") from None
    if not isinstance(value, kind):
        raise SpecError(f"{option} must be {what}, got {text!r}")
    strictjson.dumps_argument(value, option)  # what the ledger stores must come back equal
    return value


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


def _env(items: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SpecError(f"--env takes NAME=VALUE, got {item!r}")
        env[name] = value
    return env
