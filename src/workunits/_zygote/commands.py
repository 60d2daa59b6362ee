"""Starting a shell unit's command, in the zygote: found on its PATH, spawned or forked.

Runs in the zygote's one thread, between two requests. An unconfined command is
``posix_spawn``ed (vfork-like: no copy of the zygote, which may briefly change
its own working directory and file-size limit for the child to inherit). A
confined one cannot be: it must confine itself before it execs. Under the
default protection a warm process, forked and confined ahead, execs it
(``spare``); otherwise it is forked, confines itself and execs (``fork_exec``).
Either reports an error through a descriptor that closes at the exec
(``exec_or_report``), as a keeper does (``keeper``). Either way a
command that cannot start fails its unit with the cause (``exec_error``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import resource
import shutil
import socket
from collections.abc import Callable, Mapping

from workunits._wire.zygote_protocol import SpawnExec, exec_file_actions
from workunits._zygote import keeper, nofile, unit_process
from workunits._zygote.unit_process import RESET_SIGNALS


def posix_spawn(msg: SpawnExec, path: str, output_fd: int, input_fd: int | None) -> int:
    """An unconfined command in a new session: its cwd and output cap set for the spawn."""
    cap = msg.limits.output_cap
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    cwd = os.getcwd() if msg.cwd is not None else None
    try:
        if cap is not None:
            limit = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        if msg.cwd is not None:
            os.chdir(msg.cwd)
        with nofile.lowered_for_spawn():
            return os.posix_spawn(
                path,
                list(msg.argv),
                os.environ if msg.env is None else dict(msg.env),
                file_actions=exec_file_actions(output_fd, input_fd),
                setsid=True,
                setsigdef=RESET_SIGNALS,
                setsigmask=(),
            )
    finally:
        if cwd is not None:
            os.chdir(cwd)
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def fork_exec(
    msg: SpawnExec,
    path: str,
    output_fd: int,
    input_fd: int | None,
    *,
    ready: Callable[[], None],
    env: Mapping[str, str],
) -> int:
    """Fork a process that gets ready (becomes the unit and confines itself) and execs
    the command, with ``env`` added to its environment.

    As posix_spawn: stdin the pipe or /dev/null, fds 1 and 2 the output, a new
    session, default signal actions, the output cap as RLIMIT_FSIZE. Waits for
    the exec (the report pipe closes) or for the error the child sends.
    """

    def child(report_w: int) -> None:  # pragma: no cover - runs in the unit's process
        try:
            exec_or_report(msg, path, output_fd, input_fd, env=env, report_fd=report_w, ready=ready)
        finally:
            os._exit(keeper.EXIT_NOT_STARTED)

    pid, error = forked(child)
    if not error:
        return pid
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    raise rebuilt(error)


def forked(child: Callable[[int], None]) -> tuple[int, str]:
    """Fork; the child runs ``child(report_fd)``, which must end the process (``os._exit``)
    and may write a report first. The parent waits for the report pipe to close (the
    exec, or the child's end) and answers the child's pid and what it reported."""
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = unit_process.fork()
    except OSError:
        os.close(report_r)
        os.close(report_w)
        raise
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(report_r)
        child(report_w)
        os._exit(keeper.EXIT_NOT_STARTED)  # ``child`` ends the process; never reached
    os.close(report_w)
    try:
        return pid, read_all(report_r)
    finally:
        os.close(report_r)


def exec_or_report(
    msg: SpawnExec,
    path: str,
    output_fd: int,
    input_fd: int | None,
    *,
    env: Mapping[str, str],
    report_fd: int,
    ready: Callable[[], None],
) -> None:
    """In the command's process: ``ready`` (become the unit, confine), then exec; what
    failed is written to ``report_fd`` as ``-ERRNO\0FILENAME\0TEXT`` (``rebuilt``
    reads it) and this returns. ``report_fd`` closes at the exec (close-on-exec),
    which is how the zygote learns the command started."""
    try:
        ready()
        _exec(msg, path, output_fd, input_fd, env)
    except OSError as exc:
        with contextlib.suppress(OSError):
            filename = os.fsencode(exc.filename or "")
            os.write(report_fd, b"-%d\0%s\0%s" % (exc.errno or 0, filename, _what(exc)))


def _exec(
    msg: SpawnExec, path: str, output_fd: int, input_fd: int | None, env: Mapping[str, str]
) -> None:
    """In a forked command's process: its descriptors, directory and limits, then exec."""
    stdin = os.open(os.devnull, os.O_RDONLY) if input_fd is None else input_fd
    os.dup2(stdin, 0)
    os.close(stdin)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    cap = msg.limits.output_cap
    if cap is not None:
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
        resource.setrlimit(resource.RLIMIT_FSIZE, (min(limit, soft), hard))
    if msg.cwd is not None:
        os.chdir(msg.cwd)
    environ = dict(os.environ if msg.env is None else msg.env)
    environ.update(env)
    os.execve(path, list(msg.argv), environ)  # noqa: S606 - the command, as posix_spawn runs it


def _what(exc: OSError) -> bytes:
    """The text of an OSError raised by our own code (a refused confinement), not errno's."""
    return str(exc).encode(errors="replace")[:400] if not exc.filename else b""


def rebuilt(report: str) -> OSError:
    """The OSError a forked child reported as ``-ERRNO\0FILENAME[\0TEXT]``."""
    code, _, rest = report[1:].partition("\0")
    filename, _, text = rest.partition("\0")
    errno_ = int(code) if code.isdigit() else errno.ECHILD
    if text:
        return OSError(errno_, text)
    return OSError(errno_, os.strerror(errno_), filename or None)


def read_all(source: int | socket.socket) -> str:
    """A report read to its end: from a pipe's descriptor, or from a socket (whose
    timeout then bounds each read)."""
    read = source.recv if isinstance(source, socket.socket) else functools.partial(os.read, source)
    chunks = []
    while chunk := read(4096):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def resolve(msg: SpawnExec) -> str:
    """Find the program as execvpe would, with the unit's PATH, relative to its cwd."""
    program = msg.argv[0]
    if "/" in program:
        full = program if msg.cwd is None else os.path.join(msg.cwd, program)
        if not os.path.exists(full):
            raise FileNotFoundError(errno.ENOENT, "no such file", program)
        return program
    env_path = (os.environ if msg.env is None else msg.env).get("PATH", os.defpath)
    found = shutil.which(program, path=env_path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "command not found", program)
    return found


_START_ERROR_HINTS = {
    errno.EAGAIN: "too many processes (RLIMIT_NPROC or the cgroup's pids.max)",
    errno.ENOMEM: "out of memory",
    errno.EMFILE: "out of file descriptors (RLIMIT_NOFILE)",
    errno.ENFILE: "the system is out of file descriptors",
}


def describe_start_error(exc: OSError) -> str:
    """``EAGAIN (Resource temporarily unavailable): too many processes (...)``."""
    code = exc.errno or 0
    name = errno.errorcode.get(code, str(code))
    text = f"{name} ({exc.strerror or exc})"
    hint = _START_ERROR_HINTS.get(code)
    return f"{text}: {hint}" if hint else text


def exec_error(msg: SpawnExec, exc: BaseException) -> str:
    """Why ``msg``'s command could not start, in the words its unit's error gives."""
    what = msg.argv[0]
    if isinstance(exc, FileNotFoundError | NotADirectoryError) and exc.filename == msg.cwd:
        return f"could not start {what!r}: no directory {msg.cwd!r}"
    if isinstance(exc, FileNotFoundError):
        return f"could not start: command not found: {what!r}"
    if isinstance(exc, PermissionError):
        return f"could not start: permission denied: {what!r}"
    if isinstance(exc, OSError):
        return f"could not start {what!r}: {describe_start_error(exc)}"
    return f"could not start {what!r}: {type(exc).__name__}: {exc}"
