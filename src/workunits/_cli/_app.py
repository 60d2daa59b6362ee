"""The command group, its shared options, exit codes, and how errors become one line.

Every command runs in the main thread of the ``workunits`` process. Errors
the library raises on purpose (``WorkunitsError``) and operating-system errors
on the state dir are printed as one line on stderr, ``workunits: <message>``,
and exit with the code named below -- never a traceback. Ctrl-C exits 130
after each command's own clean-up (``finally`` blocks) has run.
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

from workunits import _ids
from workunits._client import Client, connect
from workunits._errors import (
    IdempotencyConflict,
    InvalidWorkId,
    LedgerError,
    NotFinished,
    SpecError,
    UnknownWork,
    WorkKilled,
    WorkunitsError,
)
from workunits._status import Status

F = TypeVar("F", bound=Callable[..., Any])

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
    LEDGER = 6  # the state dir has no ledger, or one this workunits cannot use
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
    if isinstance(exc, UnknownWork):  # WorkExpired too: it is one
        return Exit.UNKNOWN
    if isinstance(exc, InvalidWorkId | SpecError | IdempotencyConflict):
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
    argument callbacks (a malformed ID) pass through here too.
    """

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
        except OSError as exc:  # the state dir itself: permissions, a full disk...
            _fail(str(exc), Exit.LEDGER)


def _quiet_stdout() -> None:
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _fail(message: str, code: Exit) -> NoReturn:
    click.echo(f"workunits: {_one_line(message)}", err=True)
    finish(code)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="workunits", prog_name="workunits")
def cli() -> None:
    """Start, watch, follow, cancel and inspect work units in a state dir.

    \b
    Exit codes: 0 completed (or done), 1 failed, 2 usage, 3 killed,
    4 still running after --timeout, 5 unknown or expired unit,
    6 no usable ledger in the state dir, 130 interrupted.
    """


# -- shared options ------------------------------------------------------------


def state_option(fn: F) -> F:
    return click.option(
        "--state",
        "state_dir",
        type=click.Path(path_type=Path, file_okay=False),
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


def _checked_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return _ids.validate(value)
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


def is_tty(stream: IO[Any]) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except ValueError:  # a closed stream
        return False
