"""How a ``workunits`` command inside a unit speaks to its supervisor (the gateway).

The state dir is hidden from units, so a command run in one (``workunits
submit``, ``wait``, ``show``...) cannot read the ledger. It reaches the
supervisor instead through a socket whose path, and the unit's ID and token,
the unit's environment holds: it says ``Hello`` with them, then sends the
requests an agent's channel carries (``frames.Spawn``, ``frames.Control``) and
gets ``frames.Reply`` back. What it starts is a child of that unit: under its
sandbox (narrowed), ended with it. The token is an HMAC of the unit's ID under
a key the supervisor keeps in memory; only the unit's own tree has it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from workunits._sandbox.isolation import ENV_UNIT

__all__ = ["ENV_GATEWAY", "ENV_TOKEN", "ENV_UNIT", "Hello", "token_of"]

ENV_GATEWAY = "WORKUNITS_GATEWAY"
ENV_TOKEN = "WORKUNITS_UNIT_TOKEN"  # noqa: S105 - a variable's name, not its value


@dataclass(frozen=True, slots=True)
class Hello:
    unit_id: str
    token: str


def token_of(key: bytes, unit_id: str) -> str:
    """The token of ``unit_id`` under the gateway's ``key``."""
    return hmac.new(key, b"workunits-gateway/" + unit_id.encode(), hashlib.sha256).hexdigest()
