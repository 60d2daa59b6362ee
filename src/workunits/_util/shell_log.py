"""A shell's ``log=PATH``: checked at submit, opened at each launch.

The log is the caller's file: the command's stdout and stderr go into it by
descriptor, and the unit's output file is a second name of it while the unit
runs. What can be checked at submit is (``check``): a refusal there registers
nothing and touches no file. What goes wrong between the submit and a launch
(the directory removed, a symlink planted, a unit pending across a change)
fails the unit before its command runs (``open_for_attempt``), so no output is
ever written where nobody will look.

Security (DESIGN §7): the final component is opened with ``O_NOFOLLOW``, as
output files are, and only a regular file is written; a log inside the state
dir is refused, since a wrong name there (``ledger.db``) would truncate the
runtime's own files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from workunits._core.errors import SpecError
from workunits._util.outputfile import OutputFileError

_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def check(log: object) -> str:
    """The log's absolute path (a relative one resolves against this process's cwd).

    SpecError, saying what is wrong and what to do, for a path that is not a
    path, whose directory is missing or not writable, or that names a
    directory, a symlink, something other than a file, or a file we cannot write.
    """
    if isinstance(log, bytes) or not isinstance(log, str | os.PathLike):
        raise SpecError(f"log must be a file path (a str or os.PathLike), got {log!r:.80}")
    text = os.fspath(log)
    if not isinstance(text, str) or not text or "\0" in text:
        raise SpecError(f"log must be a non-empty file path without NUL, got {text!r:.80}")
    # Joined, not normalised: "dir/../x" means what the kernel makes of it.
    path = text if os.path.isabs(text) else os.path.join(os.getcwd(), text)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        _check_directory(path)
        return path
    except NotADirectoryError:
        raise SpecError(
            f"log {path!r}: a component of its directory is not a directory; "
            f"give a path in an existing directory"
        ) from None
    except PermissionError:
        raise SpecError(
            f"log {path!r}: cannot look into its directory (permission denied); "
            f"give a path in a directory you can write"
        ) from None
    _check_existing(path, info)
    return path


def _check_directory(path: str) -> None:
    directory = os.path.dirname(path) or os.sep
    if not os.path.isdir(directory):
        raise SpecError(
            f"log {path!r}: its directory {directory!r} does not exist; "
            f"create it first, or give a path in an existing directory"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise SpecError(
            f"log {path!r}: cannot create a file in {directory!r} (permission denied); "
            f"give a path in a directory you can write"
        )


def _check_existing(path: str, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise SpecError(
            f"log {path!r} is a symlink, and a log is never written through one; "
            f"give the path of the file itself"
        )
    if stat.S_ISDIR(info.st_mode):
        raise SpecError(
            f"log {path!r} is a directory; give the path of a file, e.g. "
            f"{os.path.join(path, 'output.log')!r}"
        )
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(
            f"log {path!r} is not a regular file (a FIFO, socket or device); "
            f"give the path of a file"
        )
    if not os.access(path, os.W_OK):
        raise SpecError(
            f"log {path!r} exists and is not writable by this user; "
            f"make it writable, or give another path"
        )


def refuse_inside(path: str, state_dir: str | os.PathLike[str]) -> None:
    """SpecError when ``path`` is in the state dir: the runtime's files are not logs."""
    here = os.path.realpath(state_dir)
    there = os.path.realpath(os.path.dirname(path))
    if there == here or there.startswith(here + os.sep):
        raise SpecError(
            f"log {path!r} is inside the state dir {os.fspath(state_dir)!r}, whose files "
            f"belong to the runtime; give a path outside it, or keep_output=True to keep "
            f"the output in the state dir"
        )


def open_for_attempt(path: str, *, append: bool) -> int:
    """A write descriptor (close-on-exec) for one attempt's output into the log.

    The first attempt creates or truncates it (mode 0600 when new), a later one
    appends, as to an output file. Every refusal is an OutputFileError naming
    the log and what to do; the command then never runs.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS | (os.O_APPEND if append else os.O_TRUNC), 0o600)
    except OSError as exc:
        raise _refusal(path, exc) from exc
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        if regular:
            # O_NONBLOCK was only so a FIFO put there could not hang the launch.
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise OutputFileError(
            errno.EINVAL,
            f"cannot write the log {path}: it is not a regular file; submit with another log",
        )
    return fd


def _refusal(path: str, exc: OSError) -> OutputFileError:
    code = exc.errno or errno.EIO
    if code == errno.ELOOP:
        why = "it is a symlink, and a log is never written through one"
    elif code == errno.ENOENT:
        why = f"its directory {os.path.dirname(path)} does not exist (any more)"
    elif code == errno.EISDIR:
        why = "it is a directory"
    elif code == errno.ENXIO:
        why = "it is not a regular file"
    elif code in (errno.EACCES, errno.EPERM):
        why = "permission denied"
    else:
        why = os.strerror(code)
    return OutputFileError(code, f"cannot write the log {path}: {why}; submit with another log")


def point_to(path: str, pointer: str) -> None:
    """Make ``pointer`` (in the state dir) a symlink to the caller's log ``path``.

    A later attempt finds it there already; anything else there is refused.
    """
    try:
        os.symlink(path, pointer)
    except FileExistsError:
        target = None
        with contextlib.suppress(OSError):
            target = os.readlink(pointer)
        if target != path:
            raise OutputFileError(
                errno.EEXIST, f"refusing to point at the log: something else is at {pointer}"
            ) from None
