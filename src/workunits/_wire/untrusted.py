"""What the supervisor accepts from a unit's process: plain data, in these classes only.

A unit runs code the supervisor does not trust. Its channel's frames are
pickles, and a pickle may name any importable callable and call it as it
loads: read with plain ``pickle.loads``, a unit could run any code in the
supervisor's process, outside every sandbox. So the supervisor reads a
unit's frames (an agent's channel, a pooled worker's control socket) with a
``RestrictedReader`` that finds these classes alone: frames, specs and the
values they hold, none of which does anything as it is made or called. What
a unit passes on for others (a result, an exception, a teammate's message,
a child's call) travels as bytes, opened only where its reader chose to
trust it (``sup.result()`` in the caller's process; a child's own process).
"""

from __future__ import annotations

from workunits._util.framing import RestrictedReader

_BUILTINS = (
    "bool",
    "bytearray",
    "bytes",
    "complex",
    "dict",
    "float",
    "frozenset",
    "int",
    "list",
    "range",
    "set",
    "slice",
    "str",
    "tuple",
)

FROM_UNITS: frozenset[tuple[str, str]] = frozenset(
    {("builtins", name) for name in _BUILTINS}
    | {("datetime", name) for name in ("datetime", "date", "time", "timedelta", "timezone")}
    | {
        ("workunits._wire.frames", name)
        for name in (
            "Progress",
            "Checkpoint",
            "ReturnValue",
            "Error",
            "NoticeTaken",
            "OutputCapped",
            "Spawn",
            "SpawnMany",
            "Control",
            "Send",
            "Answer",
            "MonitorMatch",
        )
    }
    | {
        ("workunits._wire.specs", name)
        for name in ("ShellSpec", "AgentSpec", "TeammateSpec", "MonitorSpec", "Call")
    }
    | {
        ("workunits._wire.zygote_protocol", "Limits"),
        ("workunits._wire.pool_protocol", "UnitDone"),
        ("workunits._wire.gateway_protocol", "Hello"),
        ("workunits._core.retry", "Retry"),
        ("workunits._core.query", "Filter"),
        ("workunits._core.query", "Query"),
        ("workunits._core.restart", "Restart"),
        ("workunits._core.restart", "RestartMode"),
        ("workunits._core.sandbox", "Sandbox"),
        ("workunits._surface._generated", "UnitOptions"),
    }
)


def unit_frames() -> RestrictedReader:
    """A reader for one unit's frames (see the module docstring)."""
    return RestrictedReader(FROM_UNITS)
