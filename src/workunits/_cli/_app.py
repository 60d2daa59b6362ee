"""The command group, its shared options, exit codes, and how errors become one line.

Every command runs in the main thread of the ``workunits`` process. Errors
the library raises on purpose (``WorkunitsError``), click's own usage errors,
text that is not UTF-8 where the ledger needs text, and operating-system
errors on the state dir are printed as one line on stderr,
``workunits: <message>``, and exit with the code named below -- never a
traceback. Ctrl-C exits 130 after each command's own clean-up (``finally``
blocks) has run.

Arguments arrive as Python decoded them: bytes that are not UTF-8 are lone
surrogates (``os.fsdecode``), which give the same bytes back when passed to the
OS -- a command's argv, ``--cwd``, ``--env`` keep them. Where the ledger must
hold text (a key, a description, a kind), they are refused with one line.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NoReturn, TypeVar

import click
import orjson

from workunits._client.ledger_client import Client, connect
from workunits._core import ids
from workunits._core.errors import (
    IdempotencyConflict,
    InvalidWorkId,
    LedgerError,
    NotFinished,
    NotRetryable,
    SpecError,
    SupervisorBusy,
    UnknownKind,
    UnknownWork,
    WorkKilled,
    WorkunitsError,
)
from workunits._core.seconds import seconds
from workunits._core.status import Status

F = TypeVar("F", bound=Callable[..., Any])

# Click 8.2+ raises this for a group called with no arguments: its message is the help.
_NO_ARGS_IS_HELP: tuple[type[click.ClickException], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ("NoArgsIsHelpError",)
    if hasattr(click.exceptions, name)
)

DEFAULT_STATE = ".workunits"
STATE_ENV = "WORKUNITS_STATE"


class Exit(enum.IntEnum):
    """The exit codes of every command; scripts may rely on them."""

    OK = 0  # done; for wait/result/tail -f: the unit completed
    FAILED = 1  # the unit failed (or an unexpected error)
    USAGE = 2  # bad command line: unknown option, malformed ID, bad argument
    KILLED = 3  # the unit was killed (cancelled, timed out, killed...)
    RUNNING = 4  # the unit was still running when --timeout ran out
    UNKNOWN = 5  # no such unit in this ledger, or it has expired
    LEDGER = 6  # no usable ledger: none there, unreadable, damaged, or an unsafe state dir
    BUSY = 7  # serve: another supervisor holds the state dir
    INTERRUPTED = 130  # Ctrl-C


def exit_for(status: Status) -> Exit:
    """The exit code that reports a terminal status."""
    match status:
        case Status.COMPLETED:
            return Exit.OK
        case Status.FAILED:
            return Exit.FAILED
        case Status.KILLED:
            return Exit.KILLED
        case Status.PENDING | Status.RUNNING:
            return Exit.RUNNING


class CliError(Exception):
    """An error a command reports as one line on stderr, exiting with ``code``."""

    def __init__(self, message: str, code: Exit) -> None:
        super().__init__(message)
        self.code = code


def finish(code: Exit) -> NoReturn:
    """Leave the command with ``code`` (after its clean-up), printing nothing more."""
    raise click.exceptions.Exit(int(code)) from None


def _code_of(exc: WorkunitsError) -> Exit:
    if isinstance(exc, SupervisorBusy):
        return Exit.BUSY
    if isinstance(exc, UnknownWork):  # WorkExpired too: it is one
        return Exit.UNKNOWN
    usage = InvalidWorkId | UnknownKind | SpecError | IdempotencyConflict | NotRetryable
    if isinstance(exc, usage):
        return Exit.USAGE
    if isinstance(exc, LedgerError):
        return Exit.LEDGER
    if isinstance(exc, NotFinished):
        return Exit.RUNNING
    if isinstance(exc, WorkKilled):
        return Exit.KILLED
    return Exit.FAILED  # WorkFailed, and anything else we raised on purpose


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if len(lines) == 1 else " ".join(lines) if lines else "error"


class Group(click.Group):
    """The ``workunits`` group: every error becomes one line on stderr and an exit code.

    Subcommands parse their arguments inside ``invoke``, so errors raised by
    argument callbacks (a malformed ID) pass through here too. Click's own
    errors (an unknown option, a missing argument) are caught in ``main``.
    Inside a unit, the verbs are the unit gateway's (``in_unit``).
    """

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        from workunits._cli import in_unit, unit_gateway  # noqa: PLC0415 - they import us

        if not unit_gateway.inside_a_unit() or cmd_name == "doctor":
            return super().get_command(ctx, cmd_name)
        if super().get_command(ctx, cmd_name) is None:
            return None
        return in_unit.COMMANDS.get(cmd_name) or in_unit.not_here(cmd_name)

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as exc:  # bare `workunits`: the help is what was asked for
            exc.show()
            code = exc.exit_code
        except click.ClickException as exc:
            message, code = _click_error(exc)
            _say(message)
        except click.Abort:  # Ctrl-C or end of input at a prompt
            _say("interrupted")
            code = Exit.INTERRUPTED
        # Without standalone mode, click returns the exit code of click.exceptions.Exit
        # (--help, --version, finish()), or the command's return value.
        sys.exit(code if isinstance(code, int) else Exit.OK)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """``workunits --state DIR ls`` as ``workunits ls --state DIR``: the options every
        verb shares (``GLOBAL_OPTIONS``) are taken before the verb as after it. They
        are handed to the verb, so one that has no such option says so, as after it."""
        return super().parse_args(ctx, _verb_first(args))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as exc:
            _fail(str(exc), exc.code)
        except WorkunitsError as exc:
            _fail(str(exc), _code_of(exc))
        except KeyboardInterrupt:
            _fail("interrupted", Exit.INTERRUPTED)
        except BrokenPipeError:
            # The reader left (`workunits ls | head -1`): that is its right, not our
            # error. Point stdout at /dev/null so the final flush cannot fail again.
            _quiet_stdout()
            finish(Exit.OK)
        except UnicodeEncodeError as exc:  # an argument's non-UTF-8 bytes, where text is needed
            _fail(
                f"'{printable(str(exc.object))}' holds bytes that are not UTF-8, and text is "
                f"needed there",
                Exit.USAGE,
            )
        except OSError as exc:  # the state dir itself: permissions, a full disk...
            _fail(str(exc), Exit.LEDGER)


# Options the verbs share, taken before the verb too: whether each takes a value.
GLOBAL_OPTIONS = {"--state": True, "--ledger": True, "--json": False}


def _verb_first(args: list[str]) -> list[str]:
    """``args`` with the shared options given before the verb moved to just after it."""
    moved: list[str] = []
    rest = list(args)
    while rest and rest[0].startswith("--"):
        name, eq, _ = rest[0].partition("=")
        takes_value = GLOBAL_OPTIONS.get(name)
        if takes_value is None:
            break  # --help, --version, or a mistake: the group's own parsing says
        if takes_value and not eq:
            if len(rest) < 2:
                break
            moved += rest[:2]
            del rest[:2]
        else:
            moved.append(rest.pop(0))
    if not moved or not rest:
        return list(args)
    return [rest[0], *moved, *rest[1:]]


def _click_error(exc: click.ClickException) -> tuple[str, int]:
    """Click's error as one line (not its usage block) saying where help is, and its code."""
    message = exc.format_message().rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if isinstance(ctx, click.Context):
        message = f"{message}; see {ctx.command_path} --help"
    return message, Exit.USAGE if isinstance(exc, click.UsageError) else exc.exit_code


def _quiet_stdout() -> None:
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _fail(message: str, code: Exit) -> NoReturn:
    _say(message)
    finish(code)


def _say(message: str) -> None:
    click.echo(f"workunits: {printable(_one_line(message))}", err=True)


def printable(text: str) -> str:
    """``text`` with the non-UTF-8 bytes an argument carried shown as ``\\xff`` escapes."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that is no escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="workunits", prog_name="workunits")
def cli() -> None:
    """Start, watch, follow, cancel and inspect work units in a state dir.

    \b
    Exit codes: 0 completed (or done), 1 failed, 2 usage, 3 killed,
    4 still running after --timeout, 5 unknown or expired unit,
    6 no usable ledger in the state dir (none, unreadable, damaged or
    unsafe), 7 another supervisor holds the state dir, 130 interrupted.
    """


# -- shared options ------------------------------------------------------------


def state_option(fn: F) -> F:
    return click.option(
        "--state",
        "state_dir",
        # No checks of click's: the state dir's own (a symlink, a file, not ours,
        # unreadable) say why in one line, and exit 6.
        type=click.Path(path_type=Path, readable=False),
        default=DEFAULT_STATE,
        envvar=STATE_ENV,
        show_default=True,
        show_envvar=True,
        help="The state dir holding the ledger.",
    )(fn)


def json_option(fn: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Write one JSON object per line instead."
    )(fn)


def tls_options(fn: F) -> F:
    """``--tls-cert``, ``--tls-key`` and ``--insecure``: one meaning wherever ``--http`` serves."""
    path = click.Path(dir_okay=False, exists=True)
    # Innermost first, so that --help lists them as the decorators would read.
    fn = click.option(
        "--insecure", is_flag=True, help="Allow plain HTTP on an address that is not loopback."
    )(fn)
    fn = click.option("--tls-key", type=path, default=None)(fn)
    return click.option("--tls-cert", type=path, default=None)(fn)


def _checked_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return ids.validate(value)
    except InvalidWorkId as exc:
        raise CliError(str(exc), Exit.USAGE) from None


def id_argument(fn: F) -> F:
    return click.argument("work_id", metavar="ID", callback=_checked_id)(fn)


@contextmanager
def opened(state_dir: Path, *, create: bool = False) -> Iterator[Client]:
    """A client on ``state_dir``; read verbs never create a ledger (NoLedger, exit 6)."""
    client = connect(state_dir, create=create)
    try:
        yield client
    finally:
        client.close()


def emit_json(doc: object) -> None:
    """One JSON object on its own line of stdout."""
    click.echo(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS, default=repr) + b"\n", nl=False)


def write_bytes(data: bytes) -> None:
    """Bytes to stdout as they are (a unit's output is not necessarily text), flushed."""
    click.echo(data, nl=False)


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """``90``, ``250ms``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` as seconds; SpecError else."""
    raw = text.strip().lower()
    number, scale = raw, 1.0
    for suffix in ("ms", "s", "m", "h", "d", "w"):  # "ms" before "m" and "s"
        if raw.endswith(suffix):
            number, scale = raw[: -len(suffix)], _DURATION_UNITS[suffix]
            break
    try:
        value = float(number) * scale
    except ValueError:
        raise SpecError(f"{text!r} is not a duration like 90s, 15m, 12h or 7d") from None
    if not value >= 0 or value == float("inf"):
        raise SpecError(f"{text!r} is not a duration >= 0")
    return value


def seconds_option(least: float = 0.0) -> Callable[[click.Context, click.Parameter, float], float]:
    """An option callback: its number of seconds checked as the library checks one
    (``_core.seconds``): finite, and at least ``least`` (0 allowed by default)."""

    def check(ctx: click.Context, param: click.Parameter, value: float) -> float:
        name = param.name or "seconds"
        try:
            return seconds(name, value, least=least)
        except SpecError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return check


def is_tty(stream: IO[Any]) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except ValueError:  # a closed stream
        return False
