"""``wu.Sandbox``: what a unit may touch, as a frozen value that checks itself.

A policy narrows the default protection every unit gets (DESIGN invariant
15): where it may write and read, what network it may use, and the
resources it may take. It knows its own validation (a ``SpecError`` naming
the field), its JSON form for the ledger (``to_json``/``from_json``), and
whether a child may ask for it under a parent's (``narrowed``).

Fields left at their default are "as the default protection": no write or
read limit beyond the hidden state dir, network on, no resource limit. A
child's policy takes its parent's value for each field it leaves at the
default, and may only narrow the others.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from workunits._core.errors import SandboxEscalation, SpecError

# Always read-only beneath every writable root (as in Codex's sandbox): a unit
# that may edit a checkout must not rewrite its hooks or its config.
ALWAYS_READ_ONLY = (".git",)
LIMITS = ("memory", "cpu_seconds", "processes", "file_size", "open_files")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A unit's sandbox policy (``sandbox=`` on every submit of a kind that runs a process).

    ``write``: the only directories (or files) the unit may change, beneath
    them; a private temp dir (``TMPDIR``) is writable besides. None: anywhere
    its user may, but the state dir. ``read``: the only ones it may read
    (None: everything but the state dir); the write roots are readable too,
    and so are the system's programs and libraries it needs to run: give
    ``read`` only for paths of your own. ``read_only_paths``: paths inside
    the write roots that stay read-only (relative ones beneath each root);
    ``.git`` always is.

    ``network``: None (unset: as the default protection, on, or a parent's),
    True, False (no socket but AF_UNIX), or a list of TCP ports it may
    connect to and bind (Landlock filters ports, not addresses; UDP is
    refused under a list). ``allowed_network`` is what it comes to.

    ``memory`` (bytes), ``cpu_seconds``, ``processes``, ``file_size``
    (bytes, any one file it writes), ``open_files``: limits for the unit's
    whole tree where a cgroup can be used, per process otherwise (``workunits
    doctor`` says which); a unit that hits one ends with a reason naming it
    (``memory-limit``...).

    ``required``: a protection this machine cannot enforce fails the submit
    (``SandboxUnavailable``); with ``required=False`` the unit runs and its
    record says what was not enforced.
    """

    # Given as any sequence (a list); kept as tuples of absolute, normalised paths.
    write: Sequence[str] | None = None
    read: Sequence[str] | None = None
    read_only_paths: Sequence[str] = ()
    network: bool | Sequence[int] | None = None
    memory: int | None = None
    cpu_seconds: float | None = None
    processes: int | None = None
    file_size: int | None = None
    open_files: int | None = None
    required: bool = True
    # False only for ``Sandbox.none()``: no protection at all, the default's neither.
    confined: bool = field(default=True, init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "write", _paths("write", self.write))
        set_(self, "read", _paths("read", self.read))
        set_(self, "read_only_paths", _read_only(self.read_only_paths))
        set_(self, "network", _network(self.network))
        for name in ("memory", "processes", "file_size", "open_files"):
            _positive_int(name, getattr(self, name))
        set_(self, "cpu_seconds", _cpu(self.cpu_seconds))
        if not isinstance(self.required, bool):
            raise SpecError(f"Sandbox required= must be True or False, got {self.required!r}")

    def __repr__(self) -> str:
        if not self.confined:
            return "Sandbox.none()"
        shown = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.to_json())
        return f"Sandbox({shown})"

    # -- presets ------------------------------------------------------------------

    @classmethod
    def read_only(cls, *, network: bool | Sequence[int] = False, **limits: Any) -> Sandbox:
        """Read anything but the state dir, write nothing but a private ``TMPDIR``; no
        network unless given (as Codex's ``read-only``)."""
        return cls(write=(), network=_network(network), **limits)

    @classmethod
    def workspace(
        cls,
        path: str | os.PathLike[str],
        *,
        network: bool | Sequence[int] = False,
        read_only_paths: Sequence[str] = (),
        **limits: Any,
    ) -> Sandbox:
        """Write beneath ``path`` (its ``.git`` excepted) and a private ``TMPDIR``, read
        anything but the state dir; no network unless given (as Codex's
        ``workspace-write``)."""
        return cls(
            write=(os.fspath(path),),
            network=_network(network),
            read_only_paths=tuple(read_only_paths),
            **limits,
        )

    @classmethod
    def none(cls) -> Sandbox:
        """No protection at all for this unit, not even the default (``isolation="off"``
        for one unit): it can read the state dir and signal the supervisor."""
        return _NONE

    # -- what it is ---------------------------------------------------------------

    @property
    def allowed_network(self) -> bool | tuple[int, ...]:
        """The network it may use: True, False or its TCP ports (unset is True)."""
        if self.network is None:
            return True
        return self.network if isinstance(self.network, bool) else tuple(self.network)

    @property
    def is_default(self) -> bool:
        """Nothing beyond the default protection is asked for."""
        return self == _DEFAULT

    def limits(self) -> dict[str, int | float]:
        """The resource limits it sets, by field name."""
        return {n: getattr(self, n) for n in LIMITS if getattr(self, n) is not None}

    def describe(self) -> str:
        """One line for people: ``write /w; no network; memory 1 GiB``."""
        if not self.confined:
            return "none (no protection)"
        parts = []
        if self.write is not None:
            parts.append("write " + (", ".join(self.write) or "nowhere") + " (and TMPDIR)")
        if self.read is not None:
            parts.append("read " + (", ".join(self.read) or "nothing of yours"))
        network = self.allowed_network
        if network is False:
            parts.append("no network")
        elif network is not True:
            parts.append("TCP ports " + ", ".join(map(str, network)))
        parts.extend(f"{n.replace('_', ' ')} {v}" for n, v in self.limits().items())
        return "; ".join(parts) or "default"

    # -- the ledger's form --------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The JSON the ledger keeps (only what differs from the default, and ``none``)."""
        if not self.confined:
            return {"none": True}
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "confined" or value == f.default:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sandbox:
        """The policy ``to_json`` wrote (SpecError for anything else)."""
        if not isinstance(data, Mapping):
            raise SpecError(f"a stored sandbox policy is an object, got {data!r:.80}")
        if data.get("none") is True:
            return _NONE
        known = {f.name for f in fields(cls)} - {"confined"}
        unknown = set(data) - known
        if unknown:
            raise SpecError(f"a stored sandbox policy has unknown fields {sorted(unknown)}")
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items()
        }
        return cls(**values)

    # -- children -----------------------------------------------------------------

    def narrowed(self, child: Sandbox | None) -> Sandbox:
        """The policy a child of a unit under this one runs with, when it asked for
        ``child`` (None: the same as this one).

        Each field the child leaves at its default is this one's; the others
        must be within this one's, or ``SandboxEscalation`` says which is not.
        """
        if child is None:
            return self
        if not self.confined:
            return child
        if not child.confined:
            raise SandboxEscalation(
                "a unit under a sandbox cannot start a child with Sandbox.none(): "
                "children may only narrow their parent's policy"
            )
        changes: dict[str, Any] = {"required": child.required}
        for name in ("write", "read"):
            mine, theirs = getattr(self, name), getattr(child, name)
            if theirs is None:
                continue
            if mine is not None:
                outside = [p for p in theirs if not _beneath_any(p, mine)]
                if outside:
                    raise SandboxEscalation(
                        f"a child may {name} only beneath its parent's {name} roots "
                        f"{list(mine)}; {outside} are outside them"
                    )
            changes[name] = theirs
        changes["read_only_paths"] = tuple(
            dict.fromkeys((*self.read_only_paths, *child.read_only_paths))
        )
        changes["network"] = _narrow_network(_net(self.network), _net(child.network))
        for name in LIMITS:
            mine, theirs = getattr(self, name), getattr(child, name)
            if theirs is None:
                continue
            if mine is not None and theirs > mine:
                raise SandboxEscalation(
                    f"a child's {name} ({theirs}) may not exceed its parent's ({mine})"
                )
            changes[name] = theirs
        return replace(self, **changes)


def check_sandbox(sandbox: object) -> Sandbox | None:
    """A submit's ``sandbox=``: None or a ``Sandbox`` (SpecError otherwise)."""
    if sandbox is None or isinstance(sandbox, Sandbox):
        return sandbox
    raise SpecError(
        f"sandbox must be a wu.Sandbox (wu.Sandbox.workspace(dir), wu.Sandbox.read_only(), "
        f"wu.Sandbox(...)) or None, got {type(sandbox).__name__}"
    )


def sandbox_doc(policy: Sandbox | None, unenforced: tuple[str, ...]) -> dict[str, Any] | None:
    """A unit's sandbox as JSON (``show --json``, the HTTP API): its policy (``{}``: the
    default protection, ``{"none": true}``: unconfined) and what of it this machine did
    not enforce. None: a kind that runs no process here, or a unit recorded before
    policies were kept."""
    if policy is None:
        return None
    return {"policy": policy.to_json(), "not_enforced": list(unenforced)}


def _net(value: bool | Sequence[int] | None) -> bool | tuple[int, ...] | None:
    return value if value is None or isinstance(value, bool) else tuple(value)


def _narrow_network(
    mine: bool | tuple[int, ...] | None, theirs: bool | tuple[int, ...] | None
) -> Any:
    if theirs is None:
        return mine
    if mine in (None, True) or theirs is False:
        return theirs
    if mine is False:
        raise SandboxEscalation("a child may not use the network: its parent has none")
    if theirs is True:
        assert isinstance(mine, tuple)
        raise SandboxEscalation(
            f"a child may not use the whole network: its parent has TCP ports {list(mine)} only"
        )
    assert isinstance(mine, tuple)
    assert isinstance(theirs, tuple)
    more = sorted(set(theirs) - set(mine))
    if more:
        raise SandboxEscalation(
            f"a child may use only its parent's TCP ports {list(mine)}; {more} are not among them"
        )
    return theirs


def _beneath_any(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _paths(name: str, value: object) -> tuple[str, ...] | None:
    """Absolute, normalised paths (relative ones against this process's directory, now)."""
    if value is None:
        return None
    if isinstance(value, str | os.PathLike):
        raise SpecError(
            f"Sandbox {name}= is a list of paths; got one path {value!r}: put it in a list"
        )
    if not isinstance(value, Iterable):
        raise SpecError(f"Sandbox {name}= is a list of paths, got {type(value).__name__}")
    out = []
    for item in value:
        if not isinstance(item, str | os.PathLike):
            raise SpecError(f"Sandbox {name}= holds paths, got {item!r}")
        text = os.fspath(item)
        if not isinstance(text, str) or not text or "\0" in text:
            raise SpecError(f"Sandbox {name}= holds a bad path {item!r}")
        out.append(os.path.normpath(os.path.abspath(text)))
    return tuple(dict.fromkeys(out))


def _read_only(value: object) -> tuple[str, ...]:
    if isinstance(value, str | os.PathLike) or not isinstance(value, Iterable):
        raise SpecError(f"Sandbox read_only_paths= is a list of paths, got {value!r}")
    out = []
    for item in value:
        text = os.fspath(item) if isinstance(item, str | os.PathLike) else None
        if not isinstance(text, str) or not text or "\0" in text:
            raise SpecError(f"Sandbox read_only_paths= holds a bad path {item!r}")
        out.append(os.path.normpath(text))
    return tuple(p for p in dict.fromkeys(out) if p not in ALWAYS_READ_ONLY)


def _network(value: object) -> bool | tuple[int, ...] | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise SpecError(f"Sandbox network= is True, False or a list of TCP ports, got {value!r}")
    ports = []
    for item in value:
        if isinstance(item, str) and not item.isdigit():
            raise SpecError(
                f"Sandbox network= takes TCP ports, not addresses ({item!r}): Landlock "
                f"filters connections by port only, so an address could not be enforced"
            )
        port = int(item) if isinstance(item, str) else item
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise SpecError(f"Sandbox network= holds TCP ports from 1 to 65535, got {item!r}")
        ports.append(port)
    return tuple(sorted(set(ports)))


def _positive_int(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise SpecError(f"Sandbox {name}= must be a positive int or None, got {value!r}")


def _cpu(value: object) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise SpecError(f"Sandbox cpu_seconds= must be a positive number or None, got {value!r}")
    return float(value)


_DEFAULT = Sandbox()
_NONE = Sandbox.__new__(Sandbox)
for _f in fields(Sandbox):
    object.__setattr__(_NONE, _f.name, _f.default)
object.__setattr__(_NONE, "confined", False)
