"""The submit verbs: what each takes before its options, and what it does.

``tools/gen_surfaces.py`` writes each surface's ``shell``, ``agent``... from
these and the options table (``options.OPTIONS``): the positional parameters
here, then every option the verb takes (keyword-only), then ``**kwargs`` for
the verbs that call something. The body hands a ``Submission`` to the surface's
transport (``_submit``); the docstring is ``doc`` and then each option's doc.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True, slots=True)
class SubmitVerb:
    name: str
    head: str  # the parameters before the options, as source
    target: str  # what the Submission is given: the call's target, args and kwargs
    doc: str
    tail: str = ""  # after the options: **kwargs for the verbs that call something
    returns: Literal["Handle", "TeammateHandle"] = "Handle"
    # An option this verb takes with another type and default (type, default as source).
    overrides: dict[str, tuple[str, str]] = field(default_factory=dict)


CALL_HEAD = "fn: Callable[..., Any] | str, *args: Any"
KWARGS = "**kwargs: Any"

SUBMIT_VERBS: tuple[SubmitVerb, ...] = (
    SubmitVerb(
        "shell",
        "cmd: str | Sequence[str], *",
        "cmd, (), {}",
        "Run ``cmd`` (a string for ``/bin/sh -c``, or an argv list) as a ``b`` unit.\n\n"
        "Raises only for bad arguments; a command that cannot start still gets an ID "
        "and ends ``failed``. The output file is removed at the end, leaving its last "
        "64 KiB in the record, unless ``log`` or ``keep_output`` keeps it. A ``retry`` "
        "runs it again when it exits with a retried code (any non-zero one by default).",
    ),
    SubmitVerb(
        "agent",
        CALL_HEAD,
        "fn, args, kwargs",
        "Run ``fn(*args, **kwargs)`` in its own process as an ``a`` unit.\n\n"
        '``fn`` is a callable or an import reference ``"package.module:function"``. The '
        "call is pickled here, so an unpicklable callable or argument raises SpecError "
        "before any ID exists; ``result()`` returns what ``fn`` returned. An agent whose "
        "callable is importable is resumable: if its supervisor dies, the next one runs "
        "it again from its last checkpoint, up to ``max_attempts`` attempts in all.",
        KWARGS,
    ),
    SubmitVerb(
        "workflow",
        CALL_HEAD,
        "fn, args, kwargs",
        "Run ``fn(*args, **kwargs)`` as a workflow (``w``): its ``ctx.step()``s run once.\n\n"
        "Resumable when ``fn`` is importable: after a crash the next supervisor runs it "
        "again and finished steps return their stored results.",
        KWARGS,
    ),
    SubmitVerb(
        "dream",
        "fn: Callable[..., Any], *args: Any",
        "fn, args, kwargs",
        "Run ``fn(*args, **kwargs)`` as an agent at idle CPU priority (a ``d`` unit), "
        "the first to be shed.",
        KWARGS,
    ),
    SubmitVerb(
        "monitor",
        "source: str | Sequence[str] | Callable[[], Iterable[str | bytes]], "
        "pattern: str | re.Pattern[str], *",
        "source, (pattern,), {}",
        "Watch a command's output (str for ``/bin/sh -c``, or argv) or a callable's lines "
        "(an ``m`` unit).\n\n"
        "Each line matching ``pattern`` (``re.search``) becomes a ``MonitorEvent`` in the "
        "parent's mailbox (the application's for a top-level monitor). The monitor ends "
        "``completed`` when its source ends; its result counts lines, matches and events, "
        "with the command's exit code.",
    ),
    SubmitVerb(
        "teammate",
        "cls: type[Any], *args: Any",
        "cls, args, kwargs",
        "Create ``cls(*args, **kwargs)`` in its own process as a ``t`` unit.\n\n"
        "It runs ``on_start()`` if it has one, then takes messages in "
        "``on_receive(message)`` (and method calls through ``proxy()``) one at a time, "
        "until ``stop()``, a cancel or a kill.",
        KWARGS,
        returns="TeammateHandle",
    ),
    SubmitVerb(
        "remote",
        "fn: Callable[..., Any], *args: Any",
        "fn, args, kwargs",
        "Run ``fn(*args, **kwargs)`` as a Ray task, an ``r`` unit (needs ``workunits[ray]``).\n\n"
        "Ray is reached (or started locally, see ``ray_address``) at the first remote "
        "unit; ``wu.current()`` works inside ``fn``, and its output, progress, "
        "checkpoints and events stream into the unit's local transcript.",
        KWARGS,
    ),
    SubmitVerb(
        "submit",
        "kind: str, spec: Any, *",
        "kind, (spec,), {}",
        "Start a unit of any registered kind (by letter) with a kind-specific spec.",
        overrides={"description": ("str", '""')},
    ),
)

BY_NAME = {verb.name: verb for verb in SUBMIT_VERBS}
