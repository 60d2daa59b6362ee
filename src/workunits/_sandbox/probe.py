"""What this machine can enforce, for the supervisor's user: the probe behind ``doctor``,
the start-up notice, and every submit's check (``Machine.check``).

Nothing here forks (the supervisor is threaded): the kernel is asked by
system call (Landlock's ABI), by ``/proc`` (seccomp) and by the cgroup files
(writable hierarchies). Whether a mount namespace can be made is known for
sure only by making one; the zygote does, at its start, and its word
replaces the guess made here (``with_namespace``); ``workunits doctor``
makes one too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from workunits._core.sandbox import Sandbox
from workunits._sandbox import landlock, limits, seccomp

# The default protection's parts (DESIGN invariant 15), by name.
HIDE = "hide-state-dir"
NO_NEW_PRIVS = "no-new-privs"
PROC = "close-proc"
SIGNALS = "signal-scope"
CAPS = "drop-capabilities"


@dataclass(frozen=True, slots=True)
class Machine:
    """What this machine offers this process's user."""

    uid: int
    landlock: int  # ABI, 0 without
    namespace: str | None  # how the state dir is hidden, or None
    namespace_missing: str  # why not, when ``namespace`` is None
    seccomp: bool  # the kernel filters system calls and we have a filter for this CPU
    cgroup_memory: str | None  # "cgroup v1"/"cgroup v2" or None (RLIMIT_AS)
    cgroup_pids: str | None
    user_namespaces: bool  # may this user make one (for a unit's own process count)

    @classmethod
    def probe(cls) -> Machine:
        uid = os.geteuid()
        userns = _user_namespaces_allowed()
        if uid == 0:
            namespace, missing = "a mount namespace", ""
        elif userns:
            namespace, missing = "a user and mount namespace", ""
        else:
            namespace, missing = (
                None,
                (
                    "hiding the state dir needs a mount namespace: root, or user namespaces "
                    "for this user (sysctl user.max_user_namespaces > 0, "
                    "kernel.unprivileged_userns_clone = 1, no AppArmor restriction)"
                ),
            )
        v1 = limits.v1_hierarchies()
        return cls(
            uid=uid,
            landlock=landlock.abi(),
            namespace=namespace,
            namespace_missing=missing,
            seccomp=seccomp.available() and seccomp.supported(),
            cgroup_memory="cgroup v1" if limits.MEMORY in v1 else None,
            cgroup_pids="cgroup v1" if limits.PIDS in v1 else None,
            user_namespaces=userns or uid == 0,
        )

    def with_namespace(self, missing: str | None) -> Machine:
        """The zygote's word on the namespace it made (None) or could not make (why)."""
        if missing is None:
            return self if self.namespace else replace(self, namespace="a mount namespace")
        return replace(self, namespace=None, namespace_missing=missing)

    # -- the default protection ---------------------------------------------------

    def default_protection(self) -> list[tuple[str, str | None, str]]:
        """Each part of the default protection: (name, how it is enforced or None, why not)."""
        parts: list[tuple[str, str | None, str]] = [
            (HIDE, self.namespace, self.namespace_missing),
            (NO_NEW_PRIVS, "prctl(PR_SET_NO_NEW_PRIVS)", ""),
        ]
        if self.landlock:
            proc = f"Landlock ABI {self.landlock}, non-dumpable runtime processes"
        else:
            proc = "non-dumpable runtime processes only (no Landlock: root units still see them)"
        parts.append((PROC, proc, ""))
        parts.append(
            (
                SIGNALS,
                f"Landlock ABI {self.landlock} signal scope" if self.landlock >= 6 else None,
                "stopping signals to processes outside a unit's tree needs Landlock ABI 6 "
                f"(Linux 6.12); this kernel has ABI {self.landlock}",
            )
        )
        if self.uid == 0:
            parts.append((CAPS, "capability bounding set", ""))
        return parts

    def missing_defaults(self) -> list[str]:
        """Why each missing part of the default protection is missing."""
        return [f"{name}: {why}" for name, how, why in self.default_protection() if how is None]

    # -- a policy -------------------------------------------------------------------

    def check(self, policy: Sandbox) -> tuple[list[str], list[str]]:
        """(enforced, not enforced) for ``policy``, each a list of ``name: how`` lines,
        the default protection included."""
        if not policy.confined:
            return [], ["none: Sandbox.none() switches every protection off"]
        enforced = [f"{n}: {how}" for n, how, _ in self.default_protection() if how is not None]
        missing = self.missing_defaults()
        if policy.write is not None or policy.read is not None:
            if self.landlock:
                enforced.append(f"filesystem: Landlock ABI {self.landlock}")
            else:
                missing.append("filesystem: write= and read= need Landlock (Linux 5.13)")
            if policy.write and self.namespace is None:
                missing.append("read_only_paths: .git and the like need a mount namespace")
        if policy.allowed_network is not True:
            self._network(policy.allowed_network, enforced, missing)
        for name, how, why in self._limits(policy):
            if how is None:
                missing.append(f"{name}: {why}")
            else:
                enforced.append(f"{name}: {how}")
        return enforced, missing

    def _network(
        self, network: bool | tuple[int, ...], enforced: list[str], missing: list[str]
    ) -> None:
        if not self.seccomp:
            missing.append(
                "network: refusing sockets needs seccomp and a filter for this CPU "
                "(x86_64, aarch64)"
            )
        elif network is False:
            enforced.append("network: seccomp (AF_UNIX sockets only, no io_uring)")
        elif self.landlock >= 4:
            enforced.append(f"network: seccomp (TCP only) and Landlock ABI {self.landlock} ports")
        else:
            missing.append("network: TCP ports need Landlock ABI 4 (Linux 6.7)")

    def _limits(self, policy: Sandbox) -> list[tuple[str, str | None, str]]:
        out: list[tuple[str, str | None, str]] = []
        if policy.memory is not None:
            how = f"{self.cgroup_memory} (the unit's tree)" if self.cgroup_memory else None
            out.append(("memory", how or "RLIMIT_AS (per process)", ""))
        if policy.cpu_seconds is not None:
            out.append(("cpu_seconds", "RLIMIT_CPU (per process; the tree's with a cgroup)", ""))
        if policy.processes is not None:
            if self.cgroup_pids:
                out.append(("processes", f"{self.cgroup_pids} (the unit's tree)", ""))
            elif self.uid != 0 and self.user_namespaces:
                out.append(("processes", "RLIMIT_NPROC in a user namespace of its own", ""))
            else:
                why = "needs a pids cgroup, or (for a user other than root) user namespaces"
                out.append(("processes", None, why))
        if policy.file_size is not None:
            out.append(("file_size", "RLIMIT_FSIZE (per process)", ""))
        if policy.open_files is not None:
            out.append(("open_files", "RLIMIT_NOFILE (per process)", ""))
        return out


def _user_namespaces_allowed() -> bool:
    """Whether this user may make a user namespace, as far as the sysctls tell."""
    # (knob, the value that forbids it): a knob this kernel lacks forbids nothing.
    checks = (
        ("/proc/sys/user/max_user_namespaces", 0),
        ("/proc/sys/kernel/unprivileged_userns_clone", 0),
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", 1),
    )
    for path, forbidding in checks:
        try:
            with open(path, encoding="ascii") as f:
                if int(f.read().strip()) == forbidding:
                    return False
        except (OSError, ValueError):
            continue
    return os.path.exists("/proc/self/ns/user")
