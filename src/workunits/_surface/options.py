"""Every submit option, defined once: what the surfaces, the CLI and the HTTP API read.

An ``Option`` holds everything about one option: its name, its type and
default as users read them in signatures, its documentation, the submit verbs
that take it, where it goes (the unit's own row, or its kind's spec), how it
is checked, its ``workunits submit`` flag and its field in ``POST /v1/units``.

From this table ``tools/gen_surfaces.py`` writes each surface's submit verbs
(``Supervisor.shell``, ``Client.agent``, ``UnitContext.shell``...), sync and
async, with real parameters and their docs; ``_cli/submit.py`` makes its flags
and ``_http/models.py`` its request bodies from it at import. Adding an
option is one entry here, then ``make generate`` (see docs/contributing.md).

A unit option (``unit=True``) travels in ``UnitOptions`` to the registration
chokepoint (``Starts.prepare``) or the ledger (a client's submit), where
``check`` refuses a bad value, with the same words whichever way it came. A
spec option is passed to its kind's spec builder (``submission.build``),
which checks it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from workunits._core.retry import check_retry
from workunits._core.sandbox import check_sandbox
from workunits._surface import json_forms
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, DEFAULT_RATE_LIMIT
from workunits._wire.submits import (
    check_attempt_count,
    check_description,
    check_key,
    check_stall_after,
    check_timeout,
)

Form = Literal["text", "duration", "count", "flag", "choice", "dir", "env", "sandbox"]


@dataclass(frozen=True, slots=True)
class Flag:
    """How ``workunits submit`` takes an option (``_cli/submit.py`` makes the click option).

    ``form``: ``text`` as given; ``duration`` like ``90s`` or ``15m``; ``count``
    an int >= 1; ``flag`` on or off; ``choice`` one of ``choices``; ``dir`` an
    existing directory; ``env`` ``NAME=VALUE``, repeated; ``sandbox`` a preset
    (``read-only``, ``workspace[=DIR]``, ``none``) or a policy as JSON.
    """

    decls: tuple[str, ...]
    help: str
    metavar: str | None = None
    form: Form = "text"
    choices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Json:
    """How ``POST /v1/units`` takes an option: a body field, null meaning its default.

    ``type`` is the JSON value's type as pydantic reads it, or the name of a
    type the HTTP layer defines (``"retry"``, ``"not_before"``, ``"positive_whole"``,
    ``"attempts"``); ``limits`` are
    pydantic ``Field`` constraints. ``header`` puts it in a header instead.
    """

    type: object
    limits: Mapping[str, object] = field(default_factory=dict)
    description: str | None = None
    header: str | None = None
    encode: Callable[[Any], Any] | None = None  # the HTTP client's JSON form of a value


@dataclass(frozen=True, slots=True)
class Option:
    """One submit option. ``cli`` and ``http`` are a ``Flag``/``Json``, or the reason
    there is none (a test holds every option to one or the other)."""

    name: str
    type: str  # the annotation users read in signatures (source text)
    default: object
    doc: str
    verbs: frozenset[str]
    unit: bool  # True: the unit's own (UnitOptions); False: its kind's spec
    cli: Flag | str
    http: Json | str
    check: Callable[[Any], object] | None = None  # a unit option's check (SpecError)


SHELL = frozenset({"shell"})
CALLS = frozenset({"agent", "workflow"})  # what the ledger and HTTP clients submit besides shell
IN_PROCESS = frozenset({"agent", "workflow", "dream"})  # a callable in a process of its own
EVERY = frozenset(
    {"shell", "agent", "workflow", "dream", "monitor", "teammate", "remote", "submit"}
)
# What runs in a process on this machine (a remote unit runs on Ray, out of the sandbox's scope).
PROCESSES = EVERY - {"remote"}

NO_POLICY_FLAG = "a policy object: give it from Python or in the HTTP body"

OPTIONS: tuple[Option, ...] = (
    Option(
        "description",
        "str | None",
        None,
        "What the unit is for, as listings show it (default: the command, or the callable's name).",
        EVERY,
        unit=True,
        check=check_description,
        cli=Flag(("-d", "--description"), "What the unit is for (default: the command)."),
        http=Json(str, {"max_length": 64 << 10}),
    ),
    Option(
        "parent",
        "str | None",
        None,
        "The unit this one is a child of: it hears of this unit's end, which its own "
        "end brings about (default: none, the application's).",
        EVERY,
        unit=True,
        cli="a child is started by its parent (wu.current()) or through the supervisor",
        http=Json(str, {"max_length": 64}),
    ),
    Option(
        "key",
        "str | None",
        None,
        "An idempotency key: a submit under a key that names a unit returns that unit, "
        "whatever its status (``created`` is False); the same key with other arguments "
        "raises IdempotencyConflict.",
        EVERY,
        unit=True,
        check=check_key,
        cli=Flag(("--key",), "Idempotency key: resubmitting with it returns the same unit."),
        http=Json(str, header="Idempotency-Key"),
    ),
    Option(
        "max_attempts",
        "int | None",
        None,
        "Attempts in all for a unit that can resume after its supervisor dies (an "
        "importable callable): default 3; with ``retry``, give the count there.",
        frozenset({"agent", "workflow", "submit"}),
        unit=True,
        check=check_attempt_count,
        cli=Flag(("--max-attempts",), "Attempts for a resumable agent.", None, "count"),
        http=Json("attempts"),
    ),
    Option(
        "timeout",
        "float | None",
        None,
        "Seconds the unit may run before it is killed (default: no limit).",
        EVERY,
        unit=True,
        check=check_timeout,
        cli=Flag(
            ("--timeout",), "Kill the unit after this long (90s, 15m).", "DURATION", "duration"
        ),
        http=Json(float, {"gt": 0}),
    ),
    Option(
        "retry",
        "Retry | None",
        None,
        "``wu.Retry(...)``: run the unit again, same ID, after a failure the policy "
        "names (an exception, or a non-zero exit code).",
        EVERY,
        unit=True,
        check=check_retry,
        cli=NO_POLICY_FLAG,
        http=Json("retry", encode=json_forms.retry),
    ),
    Option(
        "stall_after",
        "float | None",
        None,
        "Seconds without progress, output or checkpoint after which the parent gets a "
        "``StallEvent`` (default: never).",
        EVERY,
        unit=True,
        check=check_stall_after,
        cli=Flag(
            ("--stall-after",),
            "Tell the parent when the unit is quiet this long (90s, 15m).",
            "DURATION",
            "duration",
        ),
        http=Json(
            float,
            {"gt": 0, "allow_inf_nan": False},
            "Send the parent a stalled event after this many seconds without "
            "progress, output or checkpoint",
        ),
    ),
    Option(
        "not_before",
        "float | datetime.datetime | None",
        None,
        "Keep the unit ``pending`` until then (a ``datetime``, or seconds from now); "
        "it can be cancelled meanwhile, and the delay is in the ledger, so it "
        "outlives a restart.",
        EVERY,
        unit=True,
        cli=Flag(
            ("--not-before",),
            "Keep the unit pending this long before it may start (90s, 15m, 2h).",
            "DURATION",
            "duration",
        ),
        http=Json(
            "not_before",
            description="Stay pending until then: seconds from now, or an ISO 8601 time "
            "with its offset (e.g. 2026-01-01T03:00:00Z)",
            encode=json_forms.not_before,
        ),
    ),
    Option(
        "sandbox",
        "Sandbox | None",
        None,
        "``wu.Sandbox(...)``: what the unit may touch, narrowing the default protection "
        "every unit gets (``Sandbox.workspace(dir)``, ``Sandbox.read_only()``, limits such "
        "as ``memory``; ``Sandbox.none()`` opts out). None: the default, or a child's "
        "parent's policy, which a child's may only narrow. The ledger keeps it: every "
        "attempt runs under the same one.",
        PROCESSES,
        unit=True,
        check=check_sandbox,
        cli=Flag(
            ("--sandbox",),
            "What the unit may touch: read-only, workspace (this directory), "
            "workspace=DIR, none, or a policy as JSON.",
            "POLICY",
            "sandbox",
        ),
        http=Json(
            "sandbox",
            description='A sandbox policy as the API shows it: {"write": ["/repo"], '
            '"network": false, "memory": 1073741824}, {"write": []} (read-only), '
            '{"none": true}; null: the default protection',
            encode=json_forms.sandbox,
        ),
    ),
    # -- the kinds' own options -------------------------------------------------------
    Option(
        "cwd",
        "str | os.PathLike[str] | None",
        None,
        "The command's working directory (default: this process's).",
        SHELL,
        unit=False,
        cli=Flag(("--cwd",), "Working directory.", None, "dir"),
        http=Json(str, {"max_length": 4096}, encode=json_forms.path),
    ),
    Option(
        "env",
        "Mapping[str, str] | None",
        None,
        "The command's environment, in place of this process's (as ``subprocess``).",
        SHELL,
        unit=False,
        cli=Flag(("--env",), "Environment (replaces it).", "NAME=VALUE", "env"),
        http=Json(dict[str, str], encode=json_forms.mapping),
    ),
    Option(
        "output_cap",
        "int",
        DEFAULT_OUTPUT_CAP,
        "Most bytes of output (an agent's: of transcript) kept; more ends the unit "
        "``killed``, reason ``output-cap`` (default 5 GiB).",
        frozenset({"shell", "agent", "workflow", "dream"}),
        unit=False,
        cli=Flag(
            ("--output-cap",), "Most bytes of output kept; more ends it killed.", "BYTES", "count"
        ),
        http=Json(
            "positive_whole",
            description="Most bytes of output kept (default 5 GiB); more ends it killed",
        ),
    ),
    Option(
        "on_lost",
        "str",
        "fail",
        '``"restart"`` runs the command again (same ID, next attempt) if its supervisor '
        'dies while it runs; ``"fail"`` (default) ends it ``failed``, reason ``lost``.',
        SHELL,
        unit=False,
        cli=Flag(
            ("--on-lost",),
            "If the supervisor dies mid-run: fail the unit, or run it again.",
            None,
            "choice",
            ("fail", "restart"),
        ),
        http=Json(
            Literal["fail", "restart"],
            description="restart: run it again (same ID) if its supervisor dies while it runs",
        ),
    ),
    Option(
        "log",
        "str | os.PathLike[str] | None",
        None,
        "Write the output into this file (relative: to the current directory), which "
        "the output file names while the unit runs and which stays yours after the "
        "end; later attempts append to it.",
        SHELL,
        unit=False,
        cli=Flag(
            ("--log",),
            "Write the output into this file, which stays after the end (relative: to here).",
            "PATH",
        ),
        http=Json(
            str,
            {"min_length": 1, "max_length": 4096, "json_schema_extra": {"pattern": "^/"}},
            "An absolute path on the server's host: the output goes into this file, "
            "which stays after the end (the first attempt truncates it, later ones append)",
            encode=json_forms.absolute_path,
        ),
    ),
    Option(
        "keep_output",
        "bool",
        False,
        "Keep the whole output in the state dir until the unit expires (give this or "
        "``log``, not both).",
        SHELL,
        unit=False,
        cli=Flag(
            ("--keep-output",),
            "Keep the whole output in the state dir until the unit expires.",
            None,
            "flag",
        ),
        http=Json(
            bool,
            description="true: keep the whole output in the state dir until the unit expires",
        ),
    ),
    Option(
        "stdin",
        "bool",
        False,
        "Give the command a pipe as its standard input, which the supervisor holds: "
        "``send_input(id, data)`` writes to it, in order, and ``eof=True`` closes it. "
        "Without it, standard input is ``/dev/null``.",
        SHELL,
        unit=False,
        cli="the CLI submits and exits: write to a unit's stdin from Python, HTTP or MCP",
        http=Json(
            bool,
            description="true: its standard input is a pipe the supervisor holds; "
            "write to it with POST /v1/units/{id}/input",
        ),
    ),
    Option(
        "memory_limit",
        "int | None",
        None,
        "A memory limit in bytes (default: none): ``Sandbox(memory=N)`` in short, for the "
        "unit's whole tree where a cgroup can be used (its process's otherwise).",
        frozenset({"agent", "workflow", "dream", "teammate"}),
        unit=False,
        cli=Flag(
            ("--memory-limit",), "Memory limit of the unit (its sandbox's).", "BYTES", "count"
        ),
        http=Json("positive_whole", description="Memory limit of the unit, in bytes"),
    ),
    Option(
        "reuse",
        "bool",
        False,
        "Run it in a long-lived worker process of the supervisor's pool (``pool_size``) "
        "instead of a process of its own: much faster for short work, but module-level "
        'state may carry over between units (see the guide "pooled units").',
        frozenset({"agent"}),
        unit=False,
        cli="a pooled worker belongs to one supervisor's process: submit pooled work there",
        http=Json(bool, description="true: run it in a pooled worker process"),
    ),
    Option(
        "resources",
        "Mapping[str, float] | None",
        None,
        'Ray\'s resources for it: ``{"CPU": 2, "GPU": 1, "memory": bytes, "custom": 1}``.',
        frozenset({"remote", "teammate"}),
        unit=False,
        cli="Ray units are started from Python (the remote kind)",
        http="Ray units are started from Python (the remote kind)",
    ),
    Option(
        "rate_limit",
        "float | None",
        DEFAULT_RATE_LIMIT,
        "Most monitor events per second; the matches dropped past it are counted in the "
        "next event's ``suppressed`` (None: no limit).",
        frozenset({"monitor"}),
        unit=False,
        cli="monitors are started from Python",
        http="monitors are started from Python",
    ),
    Option(
        "remote",
        "bool",
        False,
        "Put the instance in a Ray actor (``workunits[ray]``), with Ray ``resources``; "
        "the handle and its semantics are the same.",
        frozenset({"teammate"}),
        unit=False,
        cli="teammates are started from Python",
        http="teammates are started from Python",
    ),
    Option(
        "restart",
        "str",
        "temporary",
        '``"permanent"`` starts it again (same ID, next attempt, ``on_start`` again) '
        'after any end nobody asked for; ``"transient"`` only after it ended '
        '``failed``; ``"temporary"`` (default) never. ``stop()``, a cancel or a kill is '
        "never restarted.",
        frozenset({"teammate"}),
        unit=False,
        cli="teammates are started from Python",
        http="teammates are started from Python",
    ),
    Option(
        "max_restarts",
        "int",
        3,
        "More restarts than this within ``within`` seconds and it ends ``failed``, "
        "reason ``restart-intensity``.",
        frozenset({"teammate"}),
        unit=False,
        cli="teammates are started from Python",
        http="teammates are started from Python",
    ),
    Option(
        "within",
        "float",
        60.0,
        "The window, in seconds, that ``max_restarts`` counts restarts in.",
        frozenset({"teammate"}),
        unit=False,
        cli="teammates are started from Python",
        http="teammates are started from Python",
    ),
)

BY_NAME: Mapping[str, Option] = {option.name: option for option in OPTIONS}
UNIT_OPTIONS: tuple[Option, ...] = tuple(o for o in OPTIONS if o.unit)


def taken_by(verb: str) -> tuple[Option, ...]:
    """The options ``verb`` takes, in the table's order."""
    return tuple(o for o in OPTIONS if verb in o.verbs)
