"""Which sandbox a unit started through MCP runs under.

The operator sets the policy (``workunits mcp --sandbox workspace|read_only|none``;
``workspace`` of the server's working directory by default). A model may ask
for a narrower one, never a broader one: ``read_only`` is narrower than
``workspace``, which is narrower than ``none``; a ``workspace`` of a
directory inside the operator's workspace is narrower than the workspace.

Units run confined by ``wu.Sandbox`` (DESIGN §5: ``Sandbox.workspace(path)``,
``Sandbox.read_only()``, ``Sandbox.none()``). Where it cannot be enforced --
the machine lacks the kernel features (the supervisor's submit says which),
or the server reaches a running ``serve`` through a client whose submits
carry no policy yet -- the server refuses to start units and says why,
unless the operator passed ``--sandbox none`` explicitly. Everything that knows how a policy
becomes submit options is in this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRESETS = ("read_only", "workspace", "none")  # narrowest first
_RANK = {name: rank for rank, name in enumerate(PRESETS)}


class SandboxRefused(Exception):
    """A sandbox that may not be used, or cannot be enforced here: one sentence why."""


@dataclass(frozen=True, slots=True)
class Policy:
    """A preset and, for ``workspace``, the directory writes are confined to."""

    preset: str
    root: Path

    def describe(self) -> str:
        if self.preset == "workspace":
            return f"workspace {self.root}"
        return self.preset.replace("_", "-")

    def narrower_or_equal(self, other: Policy) -> bool:
        """Whether this policy allows nothing ``other`` does not."""
        if _RANK[self.preset] != _RANK[other.preset]:
            return _RANK[self.preset] < _RANK[other.preset]
        if self.preset != "workspace":
            return True
        return self.root == other.root or other.root in self.root.parents


def operator_policy(preset: str, cwd: str | os.PathLike[str]) -> Policy:
    """The server's policy from ``--sandbox``; SandboxRefused for an unknown preset."""
    if preset not in _RANK:
        raise SandboxRefused(f"--sandbox takes one of {', '.join(PRESETS)}, got {preset!r}")
    return Policy(preset, Path(cwd).resolve())


def requested(operator: Policy, asked: str | None, workspace: str | None) -> Policy:
    """The policy a tool call asked for (None: the operator's), if it is no broader."""
    if asked is None and workspace is None:
        return operator
    preset = asked or "workspace"
    if preset not in _RANK:
        raise SandboxRefused(f"sandbox must be one of {', '.join(PRESETS)}, got {preset!r}")
    root = operator.root
    if workspace is not None:
        if preset != "workspace":
            raise SandboxRefused("workspace_dir goes with sandbox 'workspace' only")
        root = (operator.root / workspace).resolve()
    policy = Policy(preset, root)
    if not policy.narrower_or_equal(operator):
        raise SandboxRefused(
            f"sandbox {policy.describe()} is broader than this server's "
            f"({operator.describe()}): ask for it or something narrower"
        )
    return policy


def check_cwd(policy: Policy, cwd: Path) -> None:
    """A confined unit starts inside its workspace (read-only ones anywhere)."""
    if policy.preset == "workspace" and cwd != policy.root and policy.root not in cwd.parents:
        raise SandboxRefused(
            f"cwd {cwd} is outside the unit's workspace {policy.root}: give a directory inside it"
        )


def submit_options(policy: Policy) -> dict[str, Any]:
    """The submit options that confine a unit to ``policy`` (``none`` needs none).

    Every fleet carries them: a supervisor of its own, or one reached through
    ``--connect`` (its client writes the policy into the ledger with the unit,
    and the supervisor that starts it enforces it).
    """
    if policy.preset == "none":
        return {}
    import workunits as wu  # noqa: PLC0415 - the public API, loaded on first use

    sandbox = wu.Sandbox
    if policy.preset == "workspace":
        return {"sandbox": sandbox.workspace(str(policy.root))}
    return {"sandbox": sandbox.read_only()}
