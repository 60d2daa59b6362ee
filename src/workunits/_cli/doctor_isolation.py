"""``workunits doctor``'s isolation lines: what confines units on this machine, and what cannot.

One line per protection (DESIGN invariant 15), in the words the supervisor
uses at start and a refused submit uses (``_sandbox.probe``): the units'
namespace (made for real here, in a scratch directory, then dropped),
Landlock, ``no_new_privs``, seccomp, and the mechanism of each resource limit.
"""

from __future__ import annotations

import os
import tempfile

from workunits._sandbox.namespace import Hiding, UnitNamespace
from workunits._sandbox.probe import Machine

# (name, state, detail), as ``doctor.Check`` takes them.
Line = tuple[str, str, str]


def isolation_lines() -> list[Line]:
    """Each protection's line; ``degraded`` where units get less than the whole of it."""
    machine = _with_a_real_namespace(Machine.probe())
    lines: list[Line] = []
    if machine.namespace is not None:
        lines.append(("namespace", "ok", f"{machine.namespace} hides the state dir from units"))
    else:
        lines.append(("namespace", "degraded", machine.namespace_missing))
    abi = machine.landlock
    if abi >= 6:
        lines.append(
            (
                "landlock",
                "ok",
                f"ABI {abi}: filesystem rules, TCP ports, signal and abstract-socket scopes; "
                "units cannot signal or trace a process outside their own tree (the "
                "user's unrelated processes included)",
            )
        )
    elif abi:
        lines.append(("landlock", "degraded", _why_signals(machine)))
    else:
        lines.append(
            (
                "landlock",
                "degraded",
                "no Landlock (Linux 5.13, lsm=landlock): no write=/read= policies, and units "
                "can signal and trace other processes of this user",
            )
        )
    lines.append(("no-new-privs", "ok", "units run setuid programs without their privileges"))
    if machine.uid == 0:
        lines.append(
            (
                "capabilities",
                "ok",
                "root's units drop what reaches past their tree (ptrace, sys_admin, "
                "perfmon, modules, raw I/O, bpf, open_by_handle_at); /sys and /proc/sys "
                "are read-only for them",
            )
        )
    if machine.seccomp:
        lines.append(("seccomp", "ok", "network=False and TCP port lists refuse other sockets"))
    else:
        lines.append(
            ("seccomp", "degraded", "no seccomp filter here: network= policies cannot be enforced")
        )
    lines.append(("limits", "ok" if machine.cgroup_memory else "degraded", _limits(machine)))
    return lines


def _why_signals(machine: Machine) -> str:
    for name, how, why in machine.default_protection():
        if how is None and name == "signal-scope":
            return f"ABI {machine.landlock}: {why}"
    return f"ABI {machine.landlock}"


def _limits(machine: Machine) -> str:
    tree = "the unit's whole tree"
    memory = f"{machine.cgroup_memory} ({tree})" if machine.cgroup_memory else "RLIMIT_AS"
    if machine.cgroup_pids:
        processes = f"{machine.cgroup_pids} ({tree})"
    elif machine.uid != 0 and machine.user_namespaces:
        processes = "RLIMIT_NPROC in a user namespace per unit (its tree)"
    else:
        processes = "not enforceable (no pids cgroup)"
    return (
        f"memory: {memory}; processes: {processes}; cpu_seconds: RLIMIT_CPU, and the "
        f"tree's with a cgroup per unit; file_size, open_files: rlimits (per process)"
    )


def _with_a_real_namespace(machine: Machine) -> Machine:
    """``machine`` corrected by making a units' namespace over a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="workunits-doctor-") as scratch:
        hidden = os.path.join(scratch, "state")
        os.mkdir(hidden)
        try:
            UnitNamespace.create(Hiding.of([hidden])).close()
        except OSError as exc:
            return machine.with_namespace(f"cannot make the units' namespace here: {exc}")
    return machine.with_namespace(None)
