"""``Confinement``: what one unit process does to itself before its code runs.

The supervisor turns a unit's policy (``Sandbox``) into this plain value
(``Confinement.of``) and sends it with the spawn request; the process the
zygote forks for the unit applies it (``UnitIsolation.confine``), before it
execs a command or starts a thread, in this order:

1. into its limit cgroups (v1; a v2 cgroup per unit is the zygote's doing);
2. into the units' namespace (state dir hidden), then a namespace of its
   own if some paths must be read-only (``.git`` under a write root), then
   a user namespace of its own if its process count is limited by rlimit;
3. capabilities dropped (root: those that reach past its tree; in a user
   namespace: all), dumpable again (the zygote is not);
4. rlimits, ``no_new_privs``, Landlock, seccomp.

Nothing of it can be undone by the unit: a namespace needs capabilities it
no longer has to leave, and Landlock and seccomp only ever narrow.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from workunits._core.sandbox import ALWAYS_READ_ONLY, Sandbox
from workunits._sandbox import landlock

# Read for every unit whose reads are limited: what programs need to run at all.
# /proc: other processes' private entries stay closed (Landlock's ptrace rule).
SYSTEM_READ = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/run",
    "/proc", "/sys",
)  # fmt: skip
SYSTEM_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# Root keeps its uid and its files; these it loses, each a way past the unit's tree:
# DAC_READ_SEARCH (open_by_handle_at, around the namespace), SYS_MODULE, SYS_RAWIO
# (/dev/mem, raw I/O), SYS_PTRACE, SYS_ADMIN (mount, setns, /proc/PID/environ),
# SYS_BOOT (reboot, kexec), PERFMON (/proc/PID/environ and maps, perf), BPF,
# CHECKPOINT_RESTORE (/proc/PID/map_files).
ROOT_DROPS = (2, 16, 17, 19, 21, 22, 38, 39, 40)


@dataclass(frozen=True, slots=True)
class Confinement:
    """One unit's confinement, as plain data (pickled to the zygote)."""

    hide: bool = True  # join the units' namespace: the default protection
    write: tuple[str, ...] | None = None  # Landlock write roots (None: anywhere)
    read: tuple[str, ...] | None = None  # Landlock read roots (None: everything)
    read_only: tuple[str, ...] = ()  # existing paths inside write roots, made read-only
    network: bool | tuple[int, ...] = True
    memory: int | None = None
    cpu_seconds: float | None = None
    processes: int | None = None
    file_size: int | None = None
    open_files: int | None = None
    tmpdir: str | None = None  # the unit's private temp dir (made by the unit process)
    env: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # extra variables

    @classmethod
    def of(
        cls,
        policy: Sandbox,
        *,
        tmpdir: str | None,
        env: Mapping[str, str] = {},
        read_too: tuple[str, ...] = (),
    ) -> Confinement:
        """The confinement of a unit under ``policy`` (a confined one).

        ``read_too``: paths every unit with limited reads needs besides the
        system's (the Python the zygote runs, its import path).
        """
        assert policy.confined
        write = None if policy.write is None else tuple(policy.write)
        read = None if policy.read is None else tuple(policy.read)
        if read is not None:
            read = tuple(dict.fromkeys((*read, *SYSTEM_READ, *read_too)))
            if write is None:  # writes only where it may read
                write = tuple(policy.read or ())
        if write is not None and tmpdir is not None:
            write = (*write, tmpdir)
        read_only: list[str] = []
        for root in policy.write or ():
            for rel in (*ALWAYS_READ_ONLY, *policy.read_only_paths):
                path = rel if os.path.isabs(rel) else os.path.join(root, rel)
                if (path == root or path.startswith(root + os.sep)) and os.path.lexists(path):
                    read_only.append(path)
        extra = dict(env)
        if tmpdir is not None:
            extra["TMPDIR"] = tmpdir
        return cls(
            write=write,
            read=read,
            read_only=tuple(dict.fromkeys(read_only)),
            network=policy.allowed_network,
            memory=policy.memory,
            cpu_seconds=policy.cpu_seconds,
            processes=policy.processes,
            file_size=policy.file_size,
            open_files=policy.open_files,
            tmpdir=tmpdir if write is not None else None,
            env=tuple(sorted(extra.items())),
        )

    @property
    def is_default(self) -> bool:
        """Only the default protection (a warm process, confined ahead, may run it)."""
        return self == _DEFAULT

    def landlock_rules(self, abi: int, output_fds: tuple[int, ...] = ()) -> tuple[int, int, int]:
        """(ruleset descriptor, handled filesystem accesses, scopes) for this confinement."""
        every = landlock.fs_accesses(abi)
        # Write a file again by its name (``> /dev/null``, ``> /dev/stdout``: O_TRUNC too).
        rewrite = (landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE) & every
        rules: list[tuple[str, int]] = []
        if self.read is None:
            rules.append(("/", every if self.write is None else landlock.READ | _ioctl(abi)))
        else:
            rules.extend((p, landlock.READ | _ioctl(abi)) for p in self.read)
            rules.extend((p, rewrite) for p in SYSTEM_DEVICES)
        if self.write is not None:
            rules.extend((p, every) for p in self.write)
            rules.extend((p, rewrite) for p in SYSTEM_DEVICES)
        handled_net = 0
        ports: list[tuple[int, int]] = []
        scoped = landlock.SCOPE_SIGNAL if abi >= 6 else 0
        if self.network is not True:
            handled_net = landlock.net_accesses(abi)
            if abi >= 6:
                scoped |= landlock.SCOPE_ABSTRACT_UNIX_SOCKET
            if isinstance(self.network, tuple):
                ports = [(p, handled_net) for p in self.network]
        fd = landlock.build(
            abi, handled_fs=every, rules=rules, handled_net=handled_net, ports=ports, scoped=scoped
        )
        for out in output_fds:  # echo x > /dev/stdout: the unit's own output file
            with _suppress_os():
                landlock.allow_fd(fd, out, rewrite)
        return fd, every, scoped


def _ioctl(abi: int) -> int:
    return landlock.IOCTL_DEV if abi >= 5 else 0


class _suppress_os:  # noqa: N801 - a tiny contextlib.suppress(OSError) without the import cost
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, *_: object) -> bool:
        return isinstance(kind, type) and issubclass(kind, OSError)


_DEFAULT = Confinement()


def python_paths() -> tuple[str, ...]:
    """What a Python unit with limited reads must still read: its interpreter and imports."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)]
    paths.extend(p for p in sys.path if p and os.path.isabs(p))
    return tuple(dict.fromkeys(os.path.realpath(p) for p in paths if os.path.exists(p)))
