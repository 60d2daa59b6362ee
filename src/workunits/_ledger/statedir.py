"""The state dir's own checks, in one place for every opener (DESIGN §7).

A state dir holds the ledger, the key that signs what the ledger runs, and
every unit's output. Like ssh with a key file, it is refused -- never
repaired -- when someone else could have put or changed what is in it:

- its final path component is a symlink (another local user may have planted
  it in a shared directory, pointing wherever they like);
- it belongs to another user;
- group or others may write in it.

A writer (a supervisor, or a client that submits) creates a missing state
dir 0700 and takes read and search bits away from group and others: those
only let someone look. It never adds a bit, so a state dir its owner made
read-only stays read-only and is refused for writing. A reader changes
nothing and creates nothing: ``open_for_reading`` says whether the caller may
write there, and a read-only caller gets a read-only ledger.

Every refusal is a StateDirError that names the path and the reason.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from workunits._core.errors import NoLedger, StateDirError

_LOOKERS = 0o077  # group and others: whatever bits they have, a writer takes away
_WRITERS = 0o022  # group and others may write: the state dir is refused


def prepare(state_dir: str | os.PathLike[str]) -> Path:
    """Create ``state_dir`` (0700) if missing and check it; a writer's way in.

    Raises StateDirError when it is unsafe (see the module docstring), not a
    directory, cannot be created, or is read-only for this process.
    """
    path = _text_path(state_dir)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # something that is not a directory: _checked says what
    except OSError as exc:
        raise StateDirError(f"cannot create the state dir {path}: {exc.strerror}") from None
    info = _checked(path)
    if stat.S_IMODE(info.st_mode) & _LOOKERS:
        # Units' output and the key live here: nobody else may look in.
        path.chmod(stat.S_IMODE(info.st_mode) & ~_LOOKERS)
    if not _may(path, os.W_OK | os.X_OK):
        raise StateDirError(
            f"the state dir {path} is read-only here; readers (ls, show, tail, result) can use "
            f"it, but a supervisor or a submit needs to write in it"
        )
    return path


def open_for_reading(state_dir: str | os.PathLike[str]) -> tuple[Path, bool]:
    """Check an existing state dir without changing it; ``(path, writable)``.

    Raises NoLedger when there is no such directory (nothing is created), and
    StateDirError when it is unsafe or this process cannot read it.
    """
    path = _text_path(state_dir)
    try:
        info = _checked(path)
    except FileNotFoundError:
        raise NoLedger(
            f"{path} holds no workunits ledger (there is no such directory); check the state "
            f"dir, or start one with `workunits serve --state {path}`"
        ) from None
    if not _may(path, os.R_OK | os.X_OK):
        raise StateDirError(
            f"the state dir {path} cannot be read by this user (mode "
            f"{stat.S_IMODE(info.st_mode):03o}); its owner can chmod 700 it"
        )
    return path, _may(path, os.W_OK | os.X_OK)


def _checked(path: Path) -> os.stat_result:
    """``lstat`` of the state dir, once it is a real directory of ours that only we may write.

    FileNotFoundError passes through (the caller decides what a missing dir means).
    """
    try:
        info = os.lstat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise
        raise StateDirError(f"cannot use the state dir {path}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise StateDirError(
            f"the state dir {path} is a symlink; refusing it, as anyone who can write in its "
            f"parent could have planted it. Name the real directory instead"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise StateDirError(f"the state dir {path} is a file, not a directory")
    if info.st_uid != os.geteuid():
        raise StateDirError(
            f"the state dir {path} is not ours: it belongs to uid {info.st_uid}, and this "
            f"process runs as uid {os.geteuid()}"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & _WRITERS:
        raise StateDirError(
            f"the state dir {path} is writable by group or others (mode {mode:03o}), so what "
            f"is in it cannot be trusted; check its contents, then chmod 700 it"
        )
    return info


def _may(path: Path, mode: int) -> bool:
    # access() answers for this process's credentials, and also says no on a
    # read-only mount (EROFS), where the mode bits alone would say yes.
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def _text_path(state_dir: str | os.PathLike[str]) -> Path:
    """The state dir as a Path whose name is text: the ledger stores paths under it as text."""
    path = Path(state_dir)
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise StateDirError(
            f"the state dir {shown} has a name that is not UTF-8; the ledger keeps paths as "
            f"text, so give a state dir whose name is"
        ) from None
    return path
