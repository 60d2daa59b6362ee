"""The zygote's means of confinement, and the unit process's way into them.

``UnitIsolation.start`` runs once in the zygote, before it serves: it makes
the units' namespace (``namespace``), builds the default Landlock ruleset
(one descriptor every default unit restricts itself with, each into a domain
of its own) and the directories for units' limits (``limits``). What it could
not make it says (``missing``), and the zygote passes that on to the
supervisor in its handshake.

``confine`` runs in a process forked for a unit (or a warm one, or a shell's
keeper), single-threaded, before the unit's code or command; see ``plan``
for the order. Every descriptor of ours is closed once it is done.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

from workunits._sandbox import _libc, landlock, limits, seccomp
from workunits._sandbox.namespace import Hiding, UnitNamespace
from workunits._sandbox.plan import ROOT_DROPS, Confinement

ENV = "WORKUNITS_ISOLATION"
MODES = ("default", "required", "off")


@dataclass(frozen=True, slots=True)
class Settings:
    """What the supervisor tells its zygote (in its environment, taken out at once)."""

    mode: str
    hide: tuple[str, ...] = ()
    hide_files: tuple[str, ...] = ()

    def environment(self) -> dict[str, str]:
        body = {"mode": self.mode, "hide": self.hide, "hide_files": self.hide_files}
        return {ENV: json.dumps(body)}

    @classmethod
    def from_environment(cls) -> Settings:
        """The settings, taken out of this process's environment (no unit sees them)."""
        raw = os.environ.pop(ENV, None)
        if raw is None:
            return cls("off")
        body = json.loads(raw)
        return cls(body["mode"], tuple(body["hide"]), tuple(body["hide_files"]))


@dataclass(frozen=True, slots=True)
class UnitLimits:
    """A unit's limit cgroups (v1 directories it joins) and the limits they hold."""

    directories: tuple[str, ...] = ()
    by_cgroup: frozenset[str] = frozenset()  # "memory", "pids"
    memory_dir: str | None = None  # the cgroup that holds its memory limit (its OOM count)


class UnitIsolation:
    """The zygote's namespace, default ruleset and limit cgroups (zygote thread, then
    each forked unit process for ``confine``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.on = settings.mode != "off"
        self.namespace: UnitNamespace | None = None
        self.default_ruleset: int | None = None
        self.abi = landlock.abi() if self.on else 0
        self.cgroups: limits.UnitCgroups | None = None
        self.v2_limits: set[str] = set()  # controllers enabled in the containment cgroups
        self.missing: list[str] = []  # what of the default protection could not be made
        self.uid = os.geteuid()

    @classmethod
    def start(
        cls, settings: Settings, cgroups: limits.UnitCgroups | None, v2_root: str | None
    ) -> UnitIsolation:
        """Make what units will join; never raises (what failed is in ``missing``).

        ``cgroups``: the v1 directories for units' limits (made before the guard
        forked us, so that it removes them); ``v2_root``: the containment's.
        """
        self = cls(settings)
        self.cgroups = cgroups
        if not self.on:
            return self
        try:
            hiding = Hiding.of(settings.hide, settings.hide_files)
            self.namespace = UnitNamespace.create(hiding)
        except OSError as exc:
            self.missing.append(f"hide-state-dir: {exc}")
        if self.abi:
            try:
                self.default_ruleset, _, _ = Confinement().landlock_rules(self.abi)
            except OSError as exc:
                self.abi = 0
                self.missing.append(f"close-proc: Landlock refused its ruleset: {exc}")
        if v2_root is not None:
            self.v2_limits = limits.enable_v2(v2_root)
        return self

    # -- the zygote's side ----------------------------------------------------------

    def prepare_limits(
        self,
        unit_id: str,
        memory: int | None,
        processes: int | None,
        v2_unit_dir: str | None,
    ) -> UnitLimits:
        """Cgroups for the unit's memory and process limits, where we have them (zygote)."""
        if not self.on or (memory is None and processes is None):
            return UnitLimits()
        by: set[str] = set()
        memory_dir = None
        if v2_unit_dir is not None:
            v2_memory = memory if limits.MEMORY in self.v2_limits else None
            v2_pids = processes if limits.PIDS in self.v2_limits else None
            with contextlib.suppress(OSError):
                limits.write_v2(v2_unit_dir, v2_memory, v2_pids)
                by |= {c for c, v in ((limits.MEMORY, v2_memory), (limits.PIDS, v2_pids)) if v}
                memory_dir = v2_unit_dir if v2_memory is not None else None
        dirs: tuple[str, ...] = ()
        if self.cgroups is not None:
            memory = None if limits.MEMORY in by else memory
            processes = None if limits.PIDS in by else processes
            with contextlib.suppress(OSError):
                dirs = self.cgroups.prepare(unit_id, memory, processes)
                for controller, limit in ((limits.MEMORY, memory), (limits.PIDS, processes)):
                    if limit is not None and self.cgroups.has(controller):
                        by.add(controller)
                if memory is not None and self.cgroups.has(limits.MEMORY):
                    memory_dir = self.cgroups.unit_path(limits.MEMORY, unit_id)
        return UnitLimits(dirs, frozenset(by), memory_dir)

    def close(self) -> None:
        """The zygote's end: close the namespace and the ruleset."""
        self.forget()

    # -- the unit process's side ------------------------------------------------------

    def forget(self) -> None:
        """Close every descriptor of ours (in a unit process: none may stay with the unit)."""
        if self.namespace is not None:
            self.namespace.close()
            self.namespace = None
        if self.default_ruleset is not None:
            with contextlib.suppress(OSError):
                os.close(self.default_ruleset)
            self.default_ruleset = None

    def confine(
        self,
        plan: Confinement | None,
        unit_limits: UnitLimits = UnitLimits(),
        output_fds: tuple[int, ...] = (),
    ) -> None:
        """In the unit's process (single-threaded, before its code): apply ``plan``.

        None (``Sandbox.none()``, ``isolation="off"``) applies nothing but
        leaves nothing of ours behind either. Raises OSError when a step the
        plan needs fails: the unit must not run unconfined.
        """
        try:
            # The zygote is not dumpable, nor its fork: a process that is not cannot write
            # its own /proc/self/uid_map (a user namespace of its own, below), and a unit
            # is a process like any.
            with contextlib.suppress(OSError):
                _libc.set_dumpable(True)
            if plan is None or not self.on:
                return
            limits.join(unit_limits.directories)
            in_user_ns = False
            if plan.hide and self.namespace is not None:
                self.namespace.join()
                in_user_ns = self.namespace.user is not None
            privileged = self.uid == 0 or in_user_ns
            if plan.read_only and privileged:
                _libc.unshare(_libc.CLONE_NEWNS)
                for path in plan.read_only:
                    _libc.make_read_only(path)
            by_cgroup = unit_limits.by_cgroup
            nproc_by_rlimit = plan.processes is not None and limits.PIDS not in by_cgroup
            if nproc_by_rlimit and self.uid != 0:
                _own_user_namespace(self.uid, os.getegid())
                in_user_ns = True
            if self.uid == 0:
                _libc.drop_capabilities(False, ROOT_DROPS)
            elif in_user_ns:
                _libc.drop_capabilities(True)
            if plan.tmpdir is not None:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(plan.tmpdir, 0o700)
            limits.apply_rlimits(
                limits.rlimits(
                    memory=None if limits.MEMORY in unit_limits.by_cgroup else plan.memory,
                    cpu_seconds=plan.cpu_seconds,
                    processes=plan.processes if nproc_by_rlimit else None,
                    file_size=plan.file_size,
                    open_files=plan.open_files,
                )
            )
            _libc.set_no_new_privs()
            if self.abi:
                self._landlock(plan, output_fds)
            if plan.network is not True and seccomp.supported():
                seccomp.load(seccomp.network_program(tcp=plan.network is not False))
        finally:
            self.forget()

    def _landlock(self, plan: Confinement, output_fds: tuple[int, ...]) -> None:
        if plan.is_default and self.default_ruleset is not None:
            landlock.restrict_self(self.default_ruleset)
            return
        ruleset, _, _ = plan.landlock_rules(self.abi, output_fds)
        try:
            landlock.restrict_self(ruleset)
        finally:
            os.close(ruleset)


def _own_user_namespace(uid: int, gid: int) -> None:
    """A user namespace of the unit's own (its process count is its own), mapped to itself."""
    _libc.unshare(_libc.CLONE_NEWUSER)
    for path, text in (
        ("/proc/self/setgroups", "deny"),
        ("/proc/self/uid_map", f"{uid} {uid} 1"),
        ("/proc/self/gid_map", f"{gid} {gid} 1"),
    ):
        with open(path, "w", encoding="ascii") as f:
            f.write(text)
