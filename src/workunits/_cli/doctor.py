"""``workunits doctor``: what this machine gives the runtime, and what it cannot.

Each check prints one line: its name, ``ok`` or ``degraded`` or ``missing``,
and what was found. Exit 0 unless a check the runtime cannot work without
(pidfd) is missing. It reads; it starts no supervisor and writes only a
scratch cgroup (it moves itself in, timed, and back) and a scratch file, both
removed, and a scratch mount namespace (the units' hiding, tried and dropped).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click

from workunits._cli._app import Exit, cli, emit_json, finish, json_option, state_option
from workunits._cli.doctor_isolation import isolation_lines
from workunits._zygote import _linux, containment

WEAKER = (
    "the subreaper chain cannot catch work handed to another daemon (systemd-run, at, "
    "ssh to this host), kills a fast fork loop only round by round, and leaves "
    "adopted orphans as zombies of an agent until it ends"
)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    state: str  # ok, degraded, missing
    detail: str


MOVE_PAUSE = 0.1  # seconds without a cgroup move before the timed one (a sparse start)
SLOW_MOVE = 0.001  # seconds: a move slower than this is worth naming


def _containment() -> Check:
    found = containment.probe()
    if found.own is None:
        return Check("containment", "degraded", f"subreaper: {found.reason}; {WEAKER}")
    detail = f"cgroup: {found.reason} (cgroup.kill)"
    try:
        took = containment.time_a_move(found.own, MOVE_PAUSE)
    except OSError as exc:
        return Check("containment", "ok", f"{detail}; could not time a move: {exc.strerror}")
    return Check("containment", "ok", detail + moves(took, containment.favors_moves()))


def moves(took: float, favored: bool | None) -> str:
    """What a unit start pays to be put in its cgroup, measured after a pause."""
    said = f"; a move into a cgroup after {MOVE_PAUSE * 1000:.0f} ms idle took {took * 1000:.2f} ms"
    if took > SLOW_MOVE and not favored:
        said += (
            ": the zygote waits that long for each unit it starts after a pause (the kernel "
            "waits for an RCU grace period); mounting cgroup2 with favordynmods "
            "(Linux 6.0 or later) removes the wait"
        )
    return said


def _pidfd() -> Check:
    try:
        fd = os.pidfd_open(os.getpid())
    except (AttributeError, OSError) as exc:
        return Check("pidfd", "missing", f"pidfd_open failed: {exc}; Linux 5.3 or later needed")
    os.close(fd)
    return Check("pidfd", "ok", "pidfd_open works: signals never hit a reused pid")


def _subreaper() -> Check:
    if _linux.set_child_subreaper():  # harmless here: this process ends with the command
        return Check("subreaper", "ok", "PR_SET_CHILD_SUBREAPER works")
    return Check("subreaper", "missing", "PR_SET_CHILD_SUBREAPER failed: orphans go to init")


NO_JOURNAL = (
    "; ext4 without a journal: each file a unit creates costs more the more files were "
    "deleted in the minutes before (its inode allocator skips them), so start costs "
    "drift with the work done"
)


def _filesystem(state_dir: Path) -> Check:
    where = state_dir if state_dir.exists() else state_dir.parent
    fstype, mount = _fs_of(where.resolve())
    state = "degraded" if fstype in {"nfs", "nfs4", "cifs", "smb3", "fuse.sshfs"} else "ok"
    note = "; SQLite WAL needs a local filesystem" if state == "degraded" else ""
    if fstype == "ext4" and ext4_journal(where) is False:
        note += NO_JOURNAL
    return Check("filesystem", state, f"{where} is on {fstype} (mounted at {mount}){note}")


def ext4_journal(path: Path) -> bool | None:
    """Whether the ext4 file system holding ``path`` has a journal; None if unknown."""
    try:
        dev = path.stat().st_dev
        device = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve(strict=True)
    except OSError:  # no block device below it (an anonymous device), or no sysfs
        return None
    return journaled(device.name)


def journaled(device: str, jbd2: Path = Path("/proc/fs/jbd2")) -> bool | None:
    """Whether block device ``device`` (``vda``, ``sda1``, ``dm-0``) holds a journal.

    The kernel's journal layer lists each journal it runs as ``<device>-<inode>``
    (``vda-8``) in ``jbd2``; with no journaled file system mounted there is no
    such directory at all.
    """
    try:
        entries = [entry.name for entry in jbd2.iterdir()]
    except FileNotFoundError:
        return False
    except OSError:
        return None
    return any(name.rpartition("-")[0] == device for name in entries)


def _fs_of(path: Path) -> tuple[str, str]:
    best = ("unknown", "/")
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            before, _, after = line.partition(" - ")
            mount = before.split()[4]
            inside = str(path) == mount or str(path).startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best[1]):
                best = (after.split()[0], mount)
    return best


def _fsync(state_dir: Path) -> Check:
    where = state_dir if state_dir.exists() else state_dir.parent
    try:
        fd, name = tempfile.mkstemp(prefix=".doctor-", dir=where)
    except OSError as exc:
        return Check("fsync", "missing", f"cannot write in {where}: {exc.strerror}")
    try:
        times = []
        for _ in range(5):
            os.write(fd, b"x" * 4096)
            start = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.unlink(name)
    median = sorted(times)[2] * 1000
    state = "ok" if median < 20 else "degraded"
    return Check("fsync", state, f"median {median:.2f} ms per fsync in {where} (synced writes)")


@cli.command("doctor")
@state_option
@json_option
def doctor(state_dir: Path, as_json: bool) -> None:
    """Check what this machine offers: containment, pidfd, subreaper, filesystem, fsync, and
    what confines units (namespace, landlock, no-new-privs, seccomp, limits)."""
    checks = [_containment(), _pidfd(), _subreaper(), _filesystem(state_dir), _fsync(state_dir)]
    checks += [Check(*line) for line in isolation_lines()]
    for check in checks:
        if as_json:
            emit_json({"check": check.name, "state": check.state, "detail": check.detail})
        else:
            click.echo(f"{check.name:<12} {check.state:<9} {check.detail}")
    finish(
        Exit.FAILED if any(c.state == "missing" and c.name == "pidfd" for c in checks) else Exit.OK
    )
