"""Unit specs: what a submit asks for, checked and pickled in the caller's thread.

A spec is plain data that crosses from the facade (or a client, or a unit
asking for a child) to the kind's actor and, for agent-like kinds, to the unit
process. This module sits below the ledger, the zygote and the unit runtime, so
it imports neither pykka nor sqlite3, and names the runtime's bodies (a
teammate's ``serve``, a monitor's ``watch``) by import reference.
"""

from __future__ import annotations

import importlib
import math
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from workunits._core.errors import SpecError
from workunits._core.moved import current_module, current_ref
from workunits._util import shell_log
from workunits._wire.calls import dumps_call
from workunits._wire.zygote_protocol import Limits

# Monitor events per second a monitor may send before it drops the excess.
DEFAULT_RATE_LIMIT = 10.0


@dataclass(frozen=True, slots=True)
class BodyRef:
    """A unit body named by import reference, imported in the unit process when called.

    Specs sit below the unit runtime, so the bodies the runtime provides are
    pickled as this reference rather than as the function object.
    """

    module: str
    qualname: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # A spec stored by an older version names the module where the body was then.
        target: Any = importlib.import_module(current_module(self.module))
        for part in self.qualname.split("."):
            target = getattr(target, part)
        return target(*args, **kwargs)


_TEAMMATE_BODY = BodyRef("workunits._unit.teammate", "serve")
_MONITOR_BODY = BodyRef("workunits._unit.monitor", "watch")


@dataclass(frozen=True, slots=True)
class Call:
    """A callable and its arguments, as an agent-like unit's spec.

    ``fn`` may be an import reference (``"module:qualname"``) given as a str by
    a client that does not import the code; it resolves when the spec loads.
    ``options`` are the kind's JSON settings (timeout, memory limit...).
    """

    fn: Callable[..., Any] | str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)


DEFAULT_OUTPUT_CAP = 5 * 1024**3


def check_bytes(name: str, value: object) -> None:
    """SpecError unless ``value`` is a positive int: a size in bytes (a cap, a limit)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"{name} must be a positive int of bytes, got {value!r}")


@dataclass(frozen=True, slots=True)
class ShellSpec:
    argv: tuple[str, ...]
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    output_cap: int = DEFAULT_OUTPUT_CAP
    on_lost: str = "fail"  # or "restart": run again when its supervisor died mid-run
    # Where the output is kept after the end: the caller's file (an absolute path),
    # or, with keep_output, a log in the state dir until the unit expires.
    log: str | None = None
    keep_output: bool = False
    stdin: bool = False  # fd 0 is a pipe the supervisor holds (``send_input``), not /dev/null

    @classmethod
    def build(
        cls,
        cmd: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
        output_cap: int,
        on_lost: str = "fail",
        log: str | os.PathLike[str] | None = None,
        keep_output: bool = False,
        stdin: bool = False,
    ) -> ShellSpec:
        """Check the caller's arguments; every problem is a SpecError naming the argument.

        A relative ``log`` resolves against this process's working directory, now.
        """
        if isinstance(cmd, str):
            if not cmd.strip():
                raise SpecError("cmd is an empty string; give a shell command or an argv list")
            argv: tuple[str, ...] = ("/bin/sh", "-c", cmd)
        elif isinstance(cmd, Sequence) and not isinstance(cmd, bytes | bytearray):
            if not cmd:
                raise SpecError("cmd is an empty argv list")
            if not all(isinstance(a, str) for a in cmd):
                raise SpecError(f"every argv item must be a str, got {list(cmd)!r}")
            argv = tuple(cmd)
        else:
            raise SpecError(f"cmd must be a str or a list of str, got {type(cmd).__name__}")
        if any("\0" in a for a in argv):
            raise SpecError("cmd contains a NUL character")
        if env is not None:
            if not isinstance(env, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in v
                for k, v in env.items()
            ):
                raise SpecError("env must map non-empty str names (without '=') to str values")
            env = dict(env)
        cwd_str = None if cwd is None else os.fspath(cwd)
        if cwd_str is not None and not os.path.isdir(cwd_str):
            raise SpecError(f"cwd {cwd_str!r} is not a directory")
        check_bytes("output_cap", output_cap)
        if on_lost not in ("fail", "restart"):
            raise SpecError(f"on_lost must be 'fail' or 'restart', got {on_lost!r}")
        log_path = _log(log, keep_output)
        if not isinstance(stdin, bool):
            raise SpecError(f"stdin must be True or False, got {stdin!r}")
        return cls(
            argv=argv,
            cwd=cwd_str,
            env=env,
            output_cap=output_cap,
            on_lost=on_lost,
            log=log_path,
            keep_output=keep_output,
            stdin=stdin,
        )

    def describe(self) -> str:
        """The command as text; bytes that are not UTF-8 are shown as ``\\xff`` escapes."""
        text = self.argv[2] if self.argv[:2] == ("/bin/sh", "-c") else shlex.join(self.argv)
        # The argv keeps such bytes as they were given (surrogates, as os.fsdecode
        # makes them); a description is text, stored and shown as such.
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _log(log: str | os.PathLike[str] | None, keep_output: object) -> str | None:
    """A shell's ``log`` as its absolute path, checked with ``keep_output``."""
    if not isinstance(keep_output, bool):
        raise SpecError(f"keep_output must be True or False, got {keep_output!r}")
    if log is not None and keep_output:
        raise SpecError(
            "give log=PATH or keep_output=True, not both: log= keeps the output in "
            "your file, keep_output=True in the state dir until the unit expires"
        )
    return None if log is None else shell_log.check(log)


@dataclass(frozen=True, slots=True)
class AgentSpec:
    payload: bytes  # cloudpickled (fn, args, kwargs)
    name: str
    limits: Limits = field(default_factory=Limits)
    call: Call | None = field(default=None, compare=False, repr=False)  # for the ledger
    # Transcript bytes before the supervisor kills the unit (reason output-cap). No
    # RLIMIT_FSIZE here, unlike a shell: it would cap every file the agent writes.
    output_cap: int = DEFAULT_OUTPUT_CAP
    # Run in a long-lived worker of the supervisor's pool instead of a fresh process.
    reuse: bool = False

    @classmethod
    def build(
        cls,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        memory_limit: int | None = None,
        idle_priority: bool = False,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        reuse: bool = False,
    ) -> AgentSpec:
        """Pickle the call now, in the caller's thread: a SpecError here registers nothing.

        ``fn`` may be an import reference ``"package.module:function"``, as a
        client's submit takes it: it is imported here.
        """
        if isinstance(fn, str):
            fn = resolve_callable(fn)
        if not callable(fn):
            raise SpecError(f"an agent runs a callable, got {type(fn).__name__}")
        check_limits(memory_limit, output_cap)
        if not isinstance(reuse, bool):
            raise SpecError(f"reuse must be True or False, got {reuse!r}")
        if reuse and (memory_limit is not None or idle_priority):
            # Process limits would bind the worker, and every unit it runs after.
            raise SpecError(
                "a pooled unit (reuse=True) cannot have a memory limit or idle priority: "
                "they are limits of a process; drop reuse=True to get a process of its own"
            )
        try:
            # Code pickled by value keeps its file name: the unit's tracebacks say where.
            payload = dumps_call((fn, tuple(args), dict(kwargs)))
        except Exception as exc:
            raise SpecError(
                f"cannot pickle {name_of(fn)} or its arguments for the unit process: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        limits = Limits(memory=memory_limit, idle_priority=idle_priority)
        call = Call(fn, tuple(args), dict(kwargs))
        return cls(payload, name_of(fn), limits, call, output_cap, reuse)


_REF_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", re.ASCII)


def checked_ref(ref: object) -> str:
    """``ref`` if it reads ``"module:qualname"``, else SpecError: stored, submitted or resolved."""
    if not isinstance(ref, str) or not _REF_RE.fullmatch(ref):
        raise SpecError(f"{ref!r} is not an import reference like 'package.module:function'")
    return ref


def resolve_ref(ref: str) -> Any:
    """Import ``"module:qualname"`` and return the object it names (SpecError otherwise)."""
    # A reference stored before its module moved is read as where that module is now.
    module_name, qualname = current_ref(checked_ref(ref)).split(":", 1)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"cannot import {module_name!r} for {ref!r}: {exc}") from exc
    for part in qualname.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SpecError(f"{ref!r}: {module_name} has no {qualname!r}") from None
    return target


def import_ref(fn: object) -> str | None:
    """``"module:qualname"`` when importing that string gives back ``fn`` itself, else None:
    the supervisor (storing a spec) and a unit (naming a child's function) decide alike."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    # __main__ is a different module in every process; <locals>/<lambda> have no path.
    if module == "__main__" or "<" in qualname:
        return None
    ref = f"{module}:{qualname}"
    try:
        resolved = resolve_ref(ref)
    except SpecError:
        return None
    return ref if resolved is fn else None


def resolve_callable(ref: str) -> Callable[..., Any]:
    """Import ``"module:qualname"`` and return the callable it names (SpecError otherwise)."""
    target = resolve_ref(ref)
    if not callable(target):
        raise SpecError(f"{ref!r} names a {type(target).__name__}, which is not callable")
    return cast("Callable[..., Any]", target)


def check_limits(memory_limit: object, output_cap: object) -> None:
    """SpecError unless both are positive ints of bytes (``memory_limit`` may be None)."""
    if memory_limit is not None:
        check_bytes("memory_limit", memory_limit)
    check_bytes("output_cap", output_cap)


def durable_options(
    timeout: float | None, memory_limit: int | None, output_cap: int
) -> dict[str, Any]:
    """An agent's options as its ledger Call stores them (and its spec hash covers).

    The output cap appears only when it is not the default, so specs written
    before it existed keep their hash: a resubmit by key finds the same unit.
    """
    options: dict[str, Any] = {"timeout": timeout, "memory_limit": memory_limit}
    if output_cap != DEFAULT_OUTPUT_CAP:
        options["output_cap"] = output_cap
    return options


def name_of(fn: Any) -> str:
    """How a callable (or a class) is named in messages and records: its qualified name."""
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


@dataclass(frozen=True, slots=True)
class TeammateSpec(AgentSpec):
    """An AgentSpec whose call is ``serve(cls, args, kwargs)`` in the unit runtime."""

    @classmethod
    def for_class(
        cls,
        teammate_cls: type[Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        memory_limit: int | None = None,
    ) -> TeammateSpec:
        """Pickle the class and its arguments now (caller's thread): SpecError registers nothing."""
        if not isinstance(teammate_cls, type):
            raise SpecError(f"a teammate is made from a class, got {type(teammate_cls).__name__}")
        spec = AgentSpec.build(
            _TEAMMATE_BODY, (teammate_cls, tuple(args), dict(kwargs)), {}, memory_limit=memory_limit
        )
        return cls(spec.payload, teammate_cls.__qualname__, spec.limits)


@dataclass(frozen=True, slots=True)
class MonitorSpec(AgentSpec):
    """An AgentSpec whose call is the unit runtime's ``watch(source, pattern, flags, rate)``."""

    @classmethod
    def for_source(
        cls,
        source: SourceArg,
        pattern: str | re.Pattern[str],
        *,
        rate_limit: float | None = DEFAULT_RATE_LIMIT,
    ) -> MonitorSpec:
        """Check and pickle everything now (caller's thread): a SpecError registers nothing."""
        if callable(source):
            src: Any = source
            what = getattr(source, "__qualname__", None) or repr(source)
        else:
            shell = ShellSpec.build(source, cwd=None, env=None, output_cap=DEFAULT_OUTPUT_CAP)
            src, what = shell.argv, shell.describe()
        text, flags = _pattern(pattern)
        if rate_limit is not None and (
            isinstance(rate_limit, bool)
            or not isinstance(rate_limit, int | float)
            or not (rate_limit > 0 and math.isfinite(rate_limit))
        ):
            raise SpecError(f"rate_limit must be a positive number of events/s, got {rate_limit!r}")
        rate = None if rate_limit is None else float(rate_limit)
        spec = AgentSpec.build(_MONITOR_BODY, (src, text, flags, rate), {})
        return cls(spec.payload, f"monitor {what} for /{text}/", spec.limits)


def _pattern(pattern: str | re.Pattern[str]) -> tuple[str, int]:
    if isinstance(pattern, re.Pattern):
        if not isinstance(pattern.pattern, str):
            raise SpecError("a monitor's pattern matches text: give a str pattern, not bytes")
        return pattern.pattern, pattern.flags
    if not isinstance(pattern, str):
        raise SpecError(f"pattern must be a str regex, got {type(pattern).__name__}")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise SpecError(f"pattern {pattern!r} is not a valid regex: {exc}") from None
    return pattern, compiled.flags


SourceArg = str | Sequence[str] | Callable[[], Iterable[str | bytes]]
