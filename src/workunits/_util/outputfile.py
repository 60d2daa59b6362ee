"""Output files: created safely, read by delta, drained once at the terminal transition.

Security (DESIGN §7): files are created with ``O_NOFOLLOW | O_EXCL``, mode 0600,
inside a 0700 directory, so a planted symlink or file at a unit's path is refused
instead of written through. Memory holds only an offset; readers take the delta.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from workunits._core.record import TAIL_BYTES

# Agents' JSONL transcripts, one per unit, under the state dir; an agent's output
# file is a second name (a hard link) of its transcript. Kept after the end,
# deleted at expiry. Shells' kept logs (or their pointers) live beside them.
TRANSCRIPTS_DIR = "transcripts"

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class OutputFileError(OSError):
    """The output file could not be created safely."""


def transcript_path(state_dir: str | os.PathLike[str], work_id: str) -> str:
    """Where the unit ``work_id`` (a validated ID) keeps its transcript."""
    return os.path.join(state_dir, TRANSCRIPTS_DIR, f"{work_id}.jsonl")


def log_path(state_dir: str | os.PathLike[str], work_id: str) -> str:
    """Where the shell unit ``work_id`` (a validated ID) keeps its log.

    With ``keep_output=True`` the log itself; with ``log=PATH`` a symlink to the
    caller's file, so a reader finds an ended shell's output by its ID alone, and
    retention, deleting this name, leaves the caller's file alone.
    """
    return os.path.join(state_dir, TRANSCRIPTS_DIR, f"{work_id}.log")


def kept_paths(state_dir: str | os.PathLike[str], work_id: str) -> tuple[str, str]:
    """The names under which a unit's output outlives it: a transcript, a shell's log."""
    return transcript_path(state_dir, work_id), log_path(state_dir, work_id)


def private_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) if missing and refuse it if it is a symlink or not ours."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise OutputFileError(errno.ENOTDIR, f"{path} must be a real directory, not a symlink")
    if info.st_uid != os.getuid():
        raise OutputFileError(errno.EPERM, f"{path} belongs to uid {info.st_uid}, not to us")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def create(path: str, *, append: bool = False) -> int:
    """Create a new output file and return a write descriptor (close-on-exec)."""
    try:
        return os.open(path, _CREATE_FLAGS | (os.O_APPEND if append else 0), 0o600)
    except FileExistsError as exc:
        raise exists_error(path) from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _symlink_refused(path) from exc
        raise


def exists_error(path: str) -> OutputFileError:
    """The refusal of a new output file at ``path``, where something already is."""
    return OutputFileError(
        errno.EEXIST, f"refusing to write output: something already exists at {path}"
    )


def reopen_for_append(path: str) -> int:
    """Open an existing output file of ours to append to it; a symlink there is refused."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _symlink_refused(path) from exc
        raise


def _symlink_refused(path: str) -> OutputFileError:
    """The refusal for an O_NOFOLLOW open that met a symlink (ELOOP) at ``path``."""
    return OutputFileError(errno.ELOOP, f"refusing to write output through a symlink at {path}")


# link(2)'s answers for "not here": another file system, none supported, or not allowed.
_NO_HARD_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP})


def link(target: str, path: str) -> None:
    """Make ``path`` a second name of the file ``target``; refuse if anything is at ``path``.

    A hard link, not a symlink: the output dir and the transcripts dir are in one
    state dir, and a new name for an existing file allocates no inode. A symlink
    is a new inode, made and freed per unit; on ext4 without a journal each
    inode allocation scans the inodes freed in the last minutes, so a busy
    supervisor paid for its own churn (bench/RESULTS.md, "the file system under
    the figures"). Where a hard link cannot be made (another file system mounted
    in between, a file system without them), a symlink stands in.
    """
    try:
        os.link(target, path, follow_symlinks=False)
    except FileExistsError as exc:
        raise _exists(path) from exc
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINK:
            raise
        try:
            os.symlink(target, path)
        except FileExistsError as exc2:
            raise _exists(path) from exc2


def _exists(path: str) -> OutputFileError:
    return OutputFileError(
        errno.EEXIST, f"refusing to link output: something already exists at {path}"
    )


def open_for_reading(path: str) -> int | None:
    """Open the output file (an agent's is its transcript's other name); None when absent."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def read_delta(fd: int, offset: int, max_bytes: int | None) -> bytes:
    """Read from ``offset`` to the current end of file, at most ``max_bytes``."""
    want = os.fstat(fd).st_size - offset
    if max_bytes is not None:
        want = min(want, max_bytes)
    return _read(fd, offset, want)


def _read(fd: int, offset: int, want: int) -> bytes:
    """Up to ``want`` bytes from ``offset`` (fewer if the file ends first)."""
    if want <= 0:
        return b""
    chunks: list[bytes] = []
    while want > 0:
        chunk = os.pread(fd, min(want, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        want -= len(chunk)
    return b"".join(chunks)


def drain(fd: int) -> tuple[int, bytes]:
    """Return the file's size and its raw last 64 KiB."""
    size = os.fstat(fd).st_size
    start = max(0, size - TAIL_BYTES)
    return size, _read(fd, start, size - start)  # the size is known: no second fstat


def size_of(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def remove(path: str) -> None:
    """Remove the output file; an agent's transcript, its other name, survives."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
