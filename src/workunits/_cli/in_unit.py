"""The verbs a ``workunits`` command has inside a unit, through the unit's gateway.

Inside a unit (``unit_gateway.inside_a_unit``) the state dir is out of reach,
so ``Group.get_command`` hands out these instead of the ledger's: ``submit``
(a child of the unit), ``show``, ``ls`` (the unit's descendants), ``wait``,
``result``, ``cancel`` and ``kill``. Any other verb says it is not available
in a unit. Output and exit codes are the same as outside.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from workunits._cli._app import (
    CliError,
    Exit,
    emit_json,
    exit_for,
    finish,
    parse_duration,
)
from workunits._cli.unit_gateway import UnitGateway
from workunits._core.errors import SpecError, UnknownWork, WorkunitsError
from workunits._core.record import WorkRecord
from workunits._core.status import is_terminal
from workunits._wire.results import result_of
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, AgentSpec, ShellSpec, resolve_callable

VERBS = ("submit", "show", "ls", "wait", "result", "cancel", "kill")


@contextlib.contextmanager
def _gateway() -> Iterator[UnitGateway]:
    with UnitGateway() as gateway:
        try:
            yield gateway
        except WorkunitsError as exc:
            if "not a descendant" in str(exc):
                raise UnknownWork(f"{exc} (a unit sees its own descendants only)") from None
            raise


def _doc(record: WorkRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "kind": record.kind,
        "status": record.shown_status,
        "parent": record.parent,
        "description": record.description,
        "attempt": record.attempt,
        "exit_code": record.exit_code,
        "reason": None if record.reason is None else record.reason.value,
        "error": record.error,
        "progress": record.progress,
        "progress_message": record.progress_message,
        "sandbox": None if record.sandbox is None else record.sandbox.to_json(),
    }


def _line(record: WorkRecord) -> str:
    return f"{record.id}  {record.kind:<8} {record.shown_status:<10} {record.description}"


@click.command("submit")
@click.option("--key")
@click.option("-d", "--description")
@click.option("--timeout", metavar="DURATION")
@click.option("--cwd", type=click.Path(file_okay=False, exists=True))
@click.option("--agent", "ref", metavar="MODULE:FUNCTION")
@click.option("--workflow", "workflow_ref", metavar="MODULE:FUNCTION")
@click.option("--args", "args_json", metavar="JSON")
@click.option("--kwargs", "kwargs_json", metavar="JSON")
@click.option("-q", "--quiet", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(**opts: Any) -> None:
    """Submit a child of this unit (a command, or --agent MODULE:FUNCTION) and print its ID."""
    from workunits._cli.submit import _json_arg  # noqa: PLC0415 - its one parser of arguments

    timeout = None if opts["timeout"] is None else parse_duration(opts["timeout"])
    ref = opts["ref"] or opts["workflow_ref"]
    with _gateway() as gateway:
        if ref is not None:
            args = _json_arg(opts["args_json"], list, "--args", "a JSON list")
            kwargs = _json_arg(opts["kwargs_json"], dict, "--kwargs", "a JSON object")
            spec = AgentSpec.build(resolve_callable(ref), tuple(args), kwargs)
            letter = "a" if opts["ref"] else "w"
            work_id = gateway.agent(
                letter, spec, opts["description"], key=opts["key"], timeout=timeout
            )
        else:
            command = opts["command"]
            if not command:
                raise SpecError("nothing to run: give a command after --, or --agent MODULE:FN")
            shell = ShellSpec.build(
                command[0] if len(command) == 1 else list(command),
                cwd=opts["cwd"],
                env=None,
                output_cap=DEFAULT_OUTPUT_CAP,
            )
            work_id = gateway.shell(shell, opts["description"], key=opts["key"], timeout=timeout)
    if opts["as_json"]:
        emit_json({"id": work_id, "parent": gateway.unit})
    else:
        click.echo(work_id)


@click.command("show")
@click.option("--json", "as_json", is_flag=True)
@click.argument("work_id")
def show(work_id: str, as_json: bool) -> None:
    """One descendant of this unit."""
    with _gateway() as gateway:
        record = gateway.get(work_id)
    if as_json:
        emit_json(_doc(record))
    else:
        click.echo(_line(record))
        if record.sandbox is not None:
            click.echo(f"sandbox  {record.sandbox.describe()}")
        if is_terminal(record.status):
            click.echo(f"outcome  {record.describe_end()}")


@click.command("ls")
@click.option("--json", "as_json", is_flag=True)
def ls(as_json: bool) -> None:
    """The descendants of this unit."""
    with _gateway() as gateway:
        records = gateway.list()
    for record in sorted(records, key=lambda r: r.created_at):
        if as_json:
            emit_json(_doc(record))
        else:
            click.echo(_line(record))


def _waited(work_id: str, timeout: str | None) -> WorkRecord:
    seconds = None if timeout is None else parse_duration(timeout)
    with _gateway() as gateway:
        return gateway.wait(work_id, seconds)


@click.command("wait")
@click.option("--timeout", metavar="DURATION")
@click.option("--json", "as_json", is_flag=True)
@click.argument("work_id")
def wait(work_id: str, timeout: str | None, as_json: bool) -> None:
    """Wait for a descendant of this unit to end; exit as it ended."""
    record = _waited(work_id, timeout)
    if as_json:
        emit_json(_doc(record))
    else:
        click.echo(f"{record.id} {record.describe_end()}")
    finish(exit_for(record.status) if is_terminal(record.status) else Exit.RUNNING)


@click.command("result")
@click.option("--timeout", metavar="DURATION")
@click.option("--json", "as_json", is_flag=True)
@click.argument("work_id")
def result(work_id: str, timeout: str | None, as_json: bool) -> None:
    """A descendant's value (a shell's: its output), as ``workunits result`` prints it."""
    from workunits._cli.waiting import print_result  # noqa: PLC0415 - its printing

    record = _waited(work_id, timeout)
    if not is_terminal(record.status):
        raise CliError(f"{work_id} is still {record.status.value} after {timeout}", Exit.RUNNING)
    # This unit's own descendant: it trusts what that returned.
    print_result(work_id, result_of(record), as_json=as_json)


@click.command("cancel")
@click.option("--grace", default="5s", metavar="DURATION")
@click.argument("work_id")
def cancel(work_id: str, grace: str) -> None:
    """Ask a descendant of this unit to stop (SIGKILL after the grace)."""
    with _gateway() as gateway:
        click.echo("cancelling" if gateway.cancel(work_id, parse_duration(grace)) else "ended")


@click.command("kill")
@click.argument("work_id")
def kill(work_id: str) -> None:
    """SIGKILL a descendant of this unit now."""
    with _gateway() as gateway:
        click.echo("killed" if gateway.kill(work_id) else "ended")


COMMANDS: dict[str, click.Command] = {
    "submit": submit,
    "show": show,
    "ls": ls,
    "wait": wait,
    "result": result,
    "cancel": cancel,
    "kill": kill,
}


def not_here(name: str) -> click.Command:
    """A verb a command inside a unit does not have: it says so, and what it has."""

    @click.command(name, context_settings={"ignore_unknown_options": True})
    @click.argument("rest", nargs=-1, type=click.UNPROCESSED)
    def refused(rest: tuple[str, ...]) -> None:
        raise SpecError(
            f"`workunits {name}` reads the state dir, which is hidden from units; inside a "
            f"unit, workunits has {', '.join(VERBS)} (for the unit's own descendants)"
        )

    return refused
