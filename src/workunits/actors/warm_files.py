"""``WarmFiles``: new, empty files made ahead of demand, each one given to one unit.

Every unit's launch creates a file (a shell's output, an agent's transcript),
and creating a file allocates an inode. On ext4 without a journal each
allocation scans the inodes freed in the last minutes, which the kernel does
not reuse while they are recent; a supervisor whose units churn files pays for
its own churn. Measured on a VM (bench/RESULTS.md, "files made ahead of
launches"): a create took 0.9-1.5 ms where renaming an existing file took
30 µs, and a pooled unit's submit -> result was a fifth shorter with its
file made ahead.

Here a thread of its own keeps a few files ready in the state dir's ``spare``
directory, and ``create`` gives one of them the unit's name. What
``_util.outputfile.create`` promises still holds:

- The file is new: made here with ``O_EXCL``, empty, mode 0600, given to one
  unit only and never taken back once named (no unit's file is reused).
- Anything at the unit's path is refused as ``create`` refuses it:
  ``renameat2(RENAME_NOREPLACE)`` neither follows nor replaces a name that
  exists. The spare stays ready.
- The descriptor names the file by the unit's path (``/proc/<pid>/fd``), as
  a rename moves the name the file was opened by.
- With no file ready (a burst, a stock that failed to fill), one that cannot
  be moved (its spare directory was removed under it), or where names
  cannot move so (another file system mounted in between, no ``renameat2``:
  not Linux, or a libc before glibc 2.28), the file is created at launch, as before.

The ``spare`` directory belongs to the state dir's one supervisor (it holds
the state dir's lock): what a dead session left there is removed at start,
and ``close`` removes the rest.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import itertools
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from workunits._util import outputfile

log = logging.getLogger(__name__)

SPARE_DIR = "spare"  # under the state dir, beside output/ and transcripts/
KEEP = 16  # files kept ready; a thread wake makes KEEP - LOW of them
LOW = 8  # the thread refills once fewer than this are ready
JOIN_FOR = 5.0  # seconds close() waits for the thread

_SPARE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# renameat2's answers for "not here": another file system, no RENAME_NOREPLACE.
_CANNOT_MOVE = frozenset({errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM})

# Its path in the spare directory, a write descriptor, and whether that appends.
_Spare = tuple[str, int, bool]


class WarmFiles:
    """Files for units' launches; ``create`` from any thread."""

    def __init__(
        self, directory: Path, *, keep: int = KEEP, low: int = LOW, fill: bool = True
    ) -> None:
        """``fill``: keep the stock full with a thread of its own (tests call ``fill_once``)."""
        if not 0 < low <= keep:
            raise ValueError(f"need 0 < low <= keep, got low={low}, keep={keep}")
        self._dir = outputfile.private_dir(directory)
        _remove_all(self._dir)  # a dead session's spares: nobody's files
        self._keep = keep
        self._low = low
        self._lock = threading.Lock()
        self._wanted = threading.Condition(self._lock)  # the thread waits here for a refill
        self._ready: list[_Spare] = []
        self._asked = 0  # files asked for so far: a failed refill waits for the next ask
        self._moves = True  # False once a name could not be moved here: create from then on
        # Whether the last ask wanted an appending descriptor (an agent's transcript) or
        # not (a shell's output): spares are made so, as a run of units tends to ask alike.
        self._append = False
        self._closed = False
        self._names = itertools.count()
        self._thread: threading.Thread | None = None
        if fill:
            self._thread = threading.Thread(
                target=self._fill_forever, name="workunits-warm-files", daemon=True
            )
            self._thread.start()

    def create(self, path: str, *, append: bool = False) -> int:
        """A new file at ``path`` and a write descriptor (close-on-exec), as
        ``_util.outputfile.create`` gives; a ready file when there is one."""
        spare = self._take(append)
        if spare is None:
            return outputfile.create(path, append=append)
        name, fd, appends = spare
        try:
            _move(name, path)
        except FileExistsError as exc:
            self._give_back(spare)
            raise outputfile.exists_error(path) from exc
        except OSError as exc:
            if exc.errno in _CANNOT_MOVE:
                self._give_back(spare)
                self._stop_moving(exc)
            else:  # its name was removed under us, say: no use to anyone now
                _discard(spare)
            # Made here, or refused with the error a create at launch meets.
            return outputfile.create(path, append=append)
        if append != appends:  # made for the other kind of ask: two more system calls
            try:
                flags = fcntl.fcntl(fd, fcntl.F_GETFL)
                flags = flags | os.O_APPEND if append else flags & ~os.O_APPEND
                fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            except BaseException:
                os.close(fd)
                raise
        return fd

    def ready(self) -> int:
        """Files ready now."""
        with self._lock:
            return len(self._ready)

    def fill_once(self) -> int:
        """Make files until ``keep`` are ready, on this thread; how many were made."""
        with self._lock:
            missing = 0 if self._closed or not self._moves else self._keep - len(self._ready)
            append = self._append
        made = 0
        for _ in range(missing):
            spare = self._make(append)
            with self._lock:
                if self._closed:
                    _discard(spare)
                    break
                self._ready.append(spare)
            made += 1
        return made

    def close(self) -> None:
        """Stop filling, and remove the files still ready."""
        with self._lock:
            self._closed = True
            self._wanted.notify_all()
            spares, self._ready = self._ready, []
        for spare in spares:
            _discard(spare)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_FOR)

    # -- internals ------------------------------------------------------------------

    def _take(self, append: bool) -> _Spare | None:
        with self._lock:
            if not self._moves:
                return None
            self._asked += 1
            self._append = append
            spare = self._ready.pop() if self._ready else None
            if len(self._ready) < self._low:
                self._wanted.notify()
            return spare

    def _give_back(self, spare: _Spare) -> None:
        """A spare that got no name (its unit's path was refused): still new, still ready."""
        with self._lock:
            if not self._closed:
                self._ready.append(spare)
                return
        _discard(spare)

    def _stop_moving(self, exc: OSError) -> None:
        log.info("output files are created at launch from now on: %s", exc)
        with self._lock:
            self._moves = False
            spares, self._ready = self._ready, []
        for spare in spares:
            _discard(spare)

    def _make(self, append: bool) -> _Spare:
        name = os.path.join(self._dir, f"{os.getpid()}-{next(self._names)}")
        flags = _SPARE_FLAGS | os.O_APPEND if append else _SPARE_FLAGS
        return name, os.open(name, flags, 0o600), append

    def _fill_forever(self) -> None:
        failing = False  # the last fill failed: the warning was given
        while True:
            with self._lock:
                while not self._closed and (not self._moves or len(self._ready) >= self._low):
                    self._wanted.wait()
                if self._closed:
                    return
                asked = self._asked
            try:
                self.fill_once()
            except OSError as exc:
                # A full disk, no descriptors left: units create their files (and
                # meet the error themselves). Try again at the next ask; say so once.
                log.log(
                    logging.DEBUG if failing else logging.WARNING,
                    "could not make output files ahead of launches: %s",
                    exc,
                )
                failing = True
                with self._lock:
                    while not self._closed and self._asked == asked:
                        self._wanted.wait()
            else:
                failing = False


def _renameat2() -> Callable[[bytes, bytes], int] | None:
    """libc's ``renameat2`` (Linux, glibc 2.28 or later), or None where it is missing."""
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int

    def rename(source: bytes, target: bytes) -> int:
        return int(function(_AT_FDCWD, source, _AT_FDCWD, target, _RENAME_NOREPLACE))

    return rename


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1  # fail with EEXIST when the target name exists, whatever it is
_RENAME = _renameat2()


def _move(source: str, target: str) -> None:
    """Give the file ``source`` the name ``target``, refused (EEXIST) if that name exists.

    A rename, not a link and an unlink: the descriptor the unit gets names the
    file by its new path (``/proc/<pid>/fd`` shows it, not a deleted spare).
    """
    if _RENAME is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available here", target)
    if _RENAME(os.fsencode(source), os.fsencode(target)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), target)


def _discard(spare: _Spare) -> None:
    name, fd, _ = spare
    os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name)


def _remove_all(directory: Path) -> None:
    for entry in os.scandir(directory):
        if not entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
