"""The units' mount namespace: the state dir hidden, the runtime's secrets too.

Landlock cannot take one subtree out of a tree it allows, and a unit must
keep every path outside the state dir, the directory that holds the state dir
included (``ls ..``, new files beside it). A mount namespace can: in it an
empty, read-only tmpfs lies over the state dir and ``/dev/null`` over each
secret file outside it, so opening, listing, renaming or deleting anything
there fails, and everything else is the same file system (mounts made later
outside still arrive: the copy is a slave of the original).

The zygote makes the namespace once, at its start (``create``): a helper
process it forks unshares, mounts and waits while the zygote opens its
namespace files, then goes. Every unit process joins it (``join``: one or
two ``setns``, a few microseconds) before any of its code runs. Root needs
only a mount namespace. Another user needs a user namespace to own it, mapped
to itself alone (its uid and gid are unchanged); joining it gives the unit
every capability *inside* that namespace, which it drops at once
(``confine`` does), so it cannot unmount what hides the state dir.

For root, the namespace also makes read-only what would let a process undo
the rest from outside its tree: ``/sys`` (cgroups included: no moving out of
its cgroup, no ``cgroup.kill`` of another unit's), ``/proc/sys`` (a core
pattern runs a program as root outside every namespace) and
``/proc/sysrq-trigger``. Not ``/proc`` itself: ``/proc/PID`` of processes
outside the unit's tree is closed by Landlock and by the capabilities a root
unit drops (``confine``).
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Sequence
from dataclasses import dataclass

from workunits._sandbox import _libc

# Made read-only for a root unit: what writes there reaches outside every namespace.
ROOT_READ_ONLY = ("/sys", "/proc/sys", "/proc/sysrq-trigger")
HELPER_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Hiding:
    """What the namespace hides: directories (each under an empty read-only tmpfs) and
    files (each under ``/dev/null``, read-only), real paths; and what it makes read-only."""

    directories: tuple[str, ...]
    files: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()

    @classmethod
    def of(cls, directories: Sequence[str], files: Sequence[str] = ()) -> Hiding:
        """Real paths, files inside a hidden directory left out; root's read-only list."""
        dirs = tuple(dict.fromkeys(os.path.realpath(d) for d in directories))
        kept = tuple(
            f
            for f in dict.fromkeys(os.path.realpath(f) for f in files)
            if not any(f.startswith(d + os.sep) for d in dirs) and os.path.isfile(f)
        )
        read_only = ROOT_READ_ONLY if os.geteuid() == 0 else ()
        return cls(dirs, kept, tuple(p for p in read_only if os.path.exists(p)))


class UnitNamespace:
    """The namespace units join: its namespace files, open in the zygote.

    ``user`` is None for root (a mount namespace alone). Used by the zygote
    (single-threaded) and by each unit process it forks, before the unit runs.
    """

    def __init__(self, mnt: int, user: int | None, hiding: Hiding) -> None:
        self.mnt = mnt
        self.user = user
        self.hiding = hiding

    @classmethod
    def create(cls, hiding: Hiding) -> UnitNamespace:
        """Make the namespace (a helper process does the unsharing); OSError when the
        machine refuses it (no user namespaces for this user, no mount rights...)."""
        uid, gid = os.geteuid(), os.getegid()
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the helper
            code = 1
            try:
                os.close(ready_r)
                _make(hiding, uid, gid)
                # It waits for the zygote to kill it: a zygote killed first (its start
                # cut short) must take it along, or it would wait for ever. Asked after
                # the unsharing, which may change credentials (and a change of them
                # clears the request); a zygote gone meanwhile is seen here too.
                _libc.die_with(parent)
                os.write(ready_w, b"+")
                select.select([], [], [])  # until the zygote, done with us, kills us
            except BaseException as exc:  # noqa: BLE001 - told to the zygote through the pipe
                with contextlib.suppress(OSError):
                    os.write(ready_w, b"-" + str(exc).encode(errors="replace")[:500])
            finally:
                os._exit(code)
        os.close(ready_w)
        try:
            readable, _, _ = select.select([ready_r], [], [], HELPER_TIMEOUT)
            word = os.read(ready_r, 600) if readable else b"-it did not answer"
            if not word.startswith(b"+"):
                raise OSError(f"cannot make the units' namespace: {word[1:].decode()}")
            user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC) if uid else None
            try:
                mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            except BaseException:
                if user is not None:
                    os.close(user)
                raise
        finally:
            os.close(ready_r)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        return cls(mnt, user, hiding)

    def join(self) -> None:
        """In a unit process (single-threaded, before its code): enter the namespace, and
        go back to the working directory by its path (``setns`` leaves us at the root).

        Raises OSError when the working directory is hidden (inside the state dir).
        """
        try:
            cwd: str | None = os.getcwd()
        except OSError:  # deleted
            cwd = None
        if self.user is not None:
            _libc.setns(self.user, _libc.CLONE_NEWUSER)
        _libc.setns(self.mnt, _libc.CLONE_NEWNS)
        if cwd is not None:
            try:
                os.chdir(cwd)
            except OSError as exc:
                raise OSError(
                    exc.errno,
                    f"its working directory {cwd!r} is hidden from units (it is inside the "
                    f"state dir): give it a cwd outside",
                ) from None

    def close(self) -> None:
        """Close the namespace files (a unit process, once in; the zygote at its end)."""
        for fd in (self.mnt, self.user):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _make(hiding: Hiding, uid: int, gid: int) -> None:
    """In the helper: a new mount namespace (owned by a new user namespace unless root)."""
    # The zygote is not dumpable, nor its fork: its /proc/self files are root's, and a
    # user other than root could not write its own maps, nor the zygote open them.
    _libc.set_dumpable(True)
    if uid == 0:
        _libc.unshare(_libc.CLONE_NEWNS)
    else:
        _libc.unshare(_libc.CLONE_NEWUSER | _libc.CLONE_NEWNS)
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    # Nothing done here may travel back to the original namespace.
    _libc.mount(None, "/", None, _libc.MS_REC | _libc.MS_SLAVE, "")
    hidden = _libc.MS_RDONLY | _libc.MS_NOSUID | _libc.MS_NODEV | _libc.MS_NOEXEC
    for path in hiding.read_only:
        _libc.make_read_only(path)
    for path in hiding.directories:
        _libc.mount("workunits-hidden", path, "tmpfs", hidden, "mode=000,size=4k,nr_inodes=1")
    for path in hiding.files:
        _libc.mount(os.devnull, path, None, _libc.MS_BIND, "")
        _libc.mount(None, path, None, _libc.MS_BIND | _libc.MS_REMOUNT | hidden, "")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)
