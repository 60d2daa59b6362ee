"""``submit``: a shell command or an importable callable, as a pending unit in the ledger.

Runs in the main thread. It inserts the row and returns at once: a running
``workunits serve`` (or any supervisor on the state dir) picks the unit up
on its next tick. Creates the state dir and ledger if they are missing. Its
option flags are the submit options' (``_surface.options``: each option's
``Flag``), so a new option gets its flag where it is defined.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from workunits._cli._app import cli, emit_json, opened, parse_duration, state_option
from workunits._client.ledger_client import ClientHandle
from workunits._core.errors import SpecError
from workunits._core.sandbox import Sandbox
from workunits._surface._generated import UnitOptions
from workunits._surface.options import BY_NAME, OPTIONS, Flag, Option, taken_by
from workunits._surface.submission import Submission
from workunits._util import strictjson

F = TypeVar("F", bound=Callable[..., Any])


def _flag(option: Option, flag: Flag) -> Callable[[F], F]:
    """The click option of a submit option's ``Flag`` (``_surface.options``)."""
    kinds: dict[str, dict[str, Any]] = {
        "text": {},
        "duration": {},
        "count": {"type": click.IntRange(min=1)},
        "flag": {"is_flag": True},
        "choice": {
            "type": click.Choice(list(flag.choices)),
            "default": option.default,
            "show_default": True,
        },
        "dir": {"type": click.Path(file_okay=False, exists=True)},
        "env": {"multiple": True},
        "sandbox": {},
    }
    return click.option(
        *flag.decls, option.name, metavar=flag.metavar, help=flag.help, **kinds[flag.form]
    )


# Every option a submit through the ledger takes that has a flag, in the table's order.
FLAGGED = [
    (o, o.cli)
    for o in OPTIONS
    if isinstance(o.cli, Flag) and o.verbs & {"shell", "agent", "workflow"}
]


def _option_flags(fn: F) -> F:
    for option, flag in reversed(FLAGGED):
        fn = _flag(option, flag)(fn)
    return fn


@cli.command("submit", context_settings={"ignore_unknown_options": False})
@state_option
@_option_flags
@click.option("--agent", "ref", metavar="MODULE:FUNCTION", help="Run a callable, not a command.")
@click.option(
    "--workflow",
    "workflow_ref",
    metavar="MODULE:FUNCTION",
    help="Run a callable as a workflow (its ctx.step()s run once, across restarts).",
)
@click.option("--args", "args_json", metavar="JSON", help="The callable's arguments (a list).")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Its keyword arguments (an object).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the ID.")
@click.option("--json", "as_json", is_flag=True, help="Print the unit as one JSON object.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(
    *,
    state_dir: Path,
    ref: str | None,
    workflow_ref: str | None,
    args_json: str | None,
    kwargs_json: str | None,
    quiet: bool,
    as_json: bool,
    command: tuple[str, ...],
    **flags: Any,
) -> None:
    """Submit a unit and print its ID.

    \b
    workunits submit --key nightly -d tests -- make test   (argv, no shell)
    workunits submit -- 'make test | tee log'              (one word: /bin/sh -c)
    workunits submit --log build.log -- make               (output kept in build.log)
    workunits submit --agent pkg.mod:fn --args '[1, 2]' --kwargs '{"n": 3}'
    workunits submit --workflow pkg.mod:nightly --key nightly-2024-06-01
    """
    given = {name: _value(name, value) for name, value in flags.items() if _given(name, value)}
    if ref is not None and workflow_ref is not None:
        raise SpecError("give --agent or --workflow, not both")
    target: Any
    if ref is not None or workflow_ref is not None:
        verb = "agent" if ref is not None else "workflow"
        if command or any(verb not in BY_NAME[name].verbs for name in given):
            refused = ["command", *(_flag_of(o.name) for o, _ in FLAGGED if verb not in o.verbs)]
            raise SpecError(f"--{verb} runs a callable: it takes no {_listed(refused)}")
        target = ref or workflow_ref
        args = tuple(_json_arg(args_json, list, "--args", "a JSON list"))
        kwargs = _json_arg(kwargs_json, dict, "--kwargs", "a JSON object")
    else:
        verb, args, kwargs = "shell", (), {}
        calls_only = [
            "--args",
            "--kwargs",
            *(_flag_of(o.name) for o, _ in FLAGGED if "shell" not in o.verbs),
        ]
        if (
            args_json is not None
            or kwargs_json is not None
            or any("shell" not in BY_NAME[name].verbs for name in given)
        ):
            raise SpecError(f"{_listed(calls_only, 'and')} go with --agent or --workflow")
        if not command:
            raise SpecError("nothing to run: give a command after --, or --agent MODULE:FN")
        target = command[0] if len(command) == 1 else list(command)
    unit = UnitOptions(**{k: v for k, v in given.items() if BY_NAME[k].unit})
    spec = {o.name: given.get(o.name, o.default) for o in taken_by(verb) if not o.unit}
    with opened(state_dir, create=True) as client:
        handle = client._submit(Submission(verb, target, args, kwargs, spec, unit))
        _report(handle, quiet=quiet, as_json=as_json)


def _given(name: str, value: Any) -> bool:
    """Was the flag given (not left at its default)?"""
    return value not in (None, (), False) and value != BY_NAME[name].default


def _value(name: str, value: Any) -> Any:
    """A flag's value as the Python option takes it."""
    flag = BY_NAME[name].cli
    assert isinstance(flag, Flag)
    if flag.form == "duration":
        return parse_duration(value)
    if flag.form == "env":
        return _env(value)
    if flag.form == "sandbox":
        return sandbox_policy(value)
    return value


def _flag_of(name: str) -> str:
    flag = BY_NAME[name].cli
    assert isinstance(flag, Flag)
    return flag.decls[-1]


def _listed(names: list[str], last: str = "or") -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


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


def sandbox_policy(text: str) -> Sandbox:
    """``--sandbox``: ``read-only``, ``workspace`` (this directory), ``workspace=DIR``,
    ``none``, or a policy as JSON (as ``workunits show --json`` prints one)."""
    preset, _, where = text.partition("=")
    if preset == "read-only" and not where:
        return Sandbox.read_only()
    if preset == "workspace":
        root = Path(where or ".").resolve()
        if not root.is_dir():
            raise SpecError(f"--sandbox workspace={where}: no directory {str(root)!r}")
        return Sandbox.workspace(root)
    if preset == "none" and not where:
        return Sandbox.none()
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SpecError(f"--sandbox is not valid JSON: {exc}") from None
        return Sandbox.from_json(data)
    raise SpecError(
        f"--sandbox takes read-only, workspace, workspace=DIR, none or a JSON policy "
        f'(like {{"write": ["/repo"], "network": false}}), got {text!r}'
    )
