"""Which surface offers which verb and option -- and, for each it does not, why.

``tools/gen_surfaces.py`` writes each surface's generated base from this
table; ``tests/test_surfaces.py`` holds the surfaces to it: a verb or an option
one surface offers and another lacks fails the test unless ``absent`` gives the
reason here. So nothing goes missing from one surface by accident (as options
did from async twins and clients before).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The verbs of ``verbs.Verbs`` and the submit verbs (``submits``), by audience.
READ = frozenset({"get", "list", "tree", "wait", "result", "stream", "notifications"})
CONTROL = frozenset({"retry", "signal", "cancel", "kill", "send_input"})
RETAIN = frozenset({"retain", "release"})
TEAMMATE_CALLS = frozenset({"tell", "ask", "stop"})
SCHEDULES = frozenset({"schedule", "unschedule", "schedules"})
SUPERVISOR_ONLY = frozenset({"shed", "gc", "register_kind", "drain"})
LEDGER_ROWS = frozenset({"row", "rows"})
# Batches: ``submit_many`` is a verb (each surface carries the batch over its own
# transport: one ``SubmitMany`` ask, one ledger transaction, one ``POST
# /v1/units:batch``, one spawn request); ``map`` is written by hand on each (its
# twin is an async generator, which the generator does not write), and held to
# parity here all the same.
BATCHES = frozenset({"submit_many", "map"})
CALLS = frozenset({"shell", "agent", "workflow"})
IN_PROCESS_KINDS = frozenset({"dream", "monitor", "teammate"})

THROUGH_THE_CHANNEL = (
    "a unit reaches the runtime only through its channel (DESIGN invariant 15), never the ledger"
)
CLIENT_SIDE = {
    "tell": "messages to a teammate go through its supervisor's process, not the ledger",
    "ask": "messages to a teammate go through its supervisor's process, not the ledger",
    "stop": "messages to a teammate go through its supervisor's process, not the ledger",
    "dream": "a dream's idle priority and its shedding are its supervisor's: start it "
    "from Python (Supervisor.dream) or from a unit",
    "monitor": "a monitor's events go to a mailbox in its supervisor's process",
    "teammate": "a teammate takes its messages in its supervisor's process",
    "remote": "Ray units are started by a supervisor's process, which reaches Ray",
    "submit": "a kind's spec is an object of the supervisor's process: clients submit "
    "the built-in kinds by name",
    "read_output": "a client reads output with stream(), from a read position of its "
    "own; read_output moves the unit's one offset, which its supervisor keeps",
    "schedule": "schedules are kept and fired by the supervisor (workunits schedule, "
    "or the HTTP API's /v1/schedules)",
    "unschedule": "schedules are kept and fired by the supervisor",
    "schedules": "schedules are kept and fired by the supervisor",
    "shed": "dreams are shed by the supervisor that runs them, under its load",
    "gc": "retention is the ledger's: Client.ledger.gc(), or workunits gc",
    "register_kind": "kinds are classes in the supervisor's process",
    "drain": "draining is the supervisor's own shutdown",
}
CLIENT_PARENT = (
    "a unit submitted through the ledger is the application's: a child is started by "
    "its parent (wu.current()) or through a supervisor"
)
BATCH_LIMIT = (
    "a batch's limit of units running at once is held in its supervisor's memory; a "
    "batch written to the ledger runs under its kinds' concurrency"
)
CLIENT_REUSE = (
    "a pooled worker belongs to one supervisor's process: submit pooled work there "
    "(Supervisor.agent(reuse=True), sup.pool())"
)


@dataclass(frozen=True, slots=True)
class Surface:
    """One surface: the class it is, what it offers, and the reasons for what it does not.

    ``types`` maps the names ``transport`` uses for a surface's own types
    (``Handle``, ``Teammate``, ``Stream``, ``AsyncStream``, ``NoticeFeed``) to
    this surface's classes, by module. ``absent`` keys: a verb, ``verb.param``
    for one parameter of a verb, or an option's name for every verb that takes
    it. ``renames``: a verb's parameter under this surface's own name (the
    unit's context names the unit it acts on ``child`` or ``teammate``).
    ``unit_type``: the type of that parameter, when it is not ``str``.
    """

    name: str
    generated: str  # the generated base's name
    types: dict[str, tuple[str, str]]
    verbs: frozenset[str]
    absent: dict[str, str]
    twins: bool = True
    renames: dict[str, dict[str, str]] = field(default_factory=dict)
    unit_type: str | None = None
    # Public names of this surface that are not verbs of every surface: what each is.
    own: dict[str, str] = field(default_factory=dict)


def _reasons(surface_verbs: frozenset[str], reasons: dict[str, str], **more: str) -> dict[str, str]:
    """The reasons of ``reasons`` that concern what the surface does not offer."""
    kept = {k: v for k, v in reasons.items() if k.split(".")[0] not in surface_verbs}
    return {**kept, **more}


SUPERVISOR_VERBS = (
    (READ | CONTROL | RETAIN | TEAMMATE_CALLS | SCHEDULES | SUPERVISOR_ONLY | CALLS | BATCHES)
    | IN_PROCESS_KINDS
    | {"read_output", "remote", "submit"}
)
CLIENT_VERBS = READ | CONTROL | RETAIN | CALLS | LEDGER_ROWS | BATCHES
HTTP_VERBS = READ | CONTROL | RETAIN | CALLS | BATCHES
CONTEXT_VERBS = (
    READ | CONTROL | TEAMMATE_CALLS | CALLS | IN_PROCESS_KINDS | BATCHES | {"read_output"}
)

NOTICE_LEASE = (
    "its notices are claimed in its own process or in the ledger, and held until "
    "acknowledged: there is no lease to renew"
)

SURFACES: tuple[Surface, ...] = (
    Surface(
        "Supervisor",
        "SupervisorVerbs",
        {
            "Self": ("Supervisor", "workunits.supervisor.facade"),
            "Handle": ("WorkHandle", "workunits.supervisor.handle"),
            "Teammate": ("TeammateHandle", "workunits.supervisor.teammate"),
            "Stream": ("OutputStream", "workunits._surface.output_stream"),
            "AsyncStream": ("AsyncOutputStream", "workunits._surface.output_stream"),
            "NoticeFeed": ("Mailbox", "workunits._core.mailbox"),
        },
        frozenset(SUPERVISOR_VERBS),
        {
            "row": "a supervisor answers with records (get, list); the ledger's rows are "
            "a ledger client's view (wu.connect)",
            "rows": "a supervisor answers with records (get, list); the ledger's rows are "
            "a ledger client's view (wu.connect)",
            "notifications.lease": NOTICE_LEASE,
        },
        own={
            "aclose": "close() on an event loop: the waits for its units do not block it",
            "advertise": "the URL its HTTP API is reached at, kept in its session's row",
            "ask_future": "an ask answered in a concurrent.futures.Future (for proxies)",
            "close": "ends its work, actors and threads",
            "close_for_signal": "close() as a signal asks: SIGTERM hands resumable work over",
            "event_feed": "the change journal its HTTP API's event streams follow",
            "events": "a unit's events after a cursor, for its HTTP API",
            "executor": "isolated agents as a concurrent.futures.Executor (UnitFuture)",
            "http_consumers": "notice claims and leases of its HTTP API's consumers",
            "pool": "its pooled workers, as an object shaped like an executor",
            "resident_ids": "the units in its memory",
            "tick": "runs its deadlines and sweep now (a manual clock's tests)",
        },
    ),
    Surface(
        "Client",
        "ClientVerbs",
        {
            "Self": ("Client", "workunits._client.ledger_client"),
            "Handle": ("ClientHandle", "workunits._client.ledger_client"),
            "Stream": ("LedgerOutputStream", "workunits._client.follow"),
            "AsyncStream": ("LedgerOutputStream", "workunits._client.follow"),
            "NoticeFeed": ("LedgerNotices", "workunits._client.follow"),
        },
        frozenset(CLIENT_VERBS),
        _reasons(
            frozenset(CLIENT_VERBS),
            CLIENT_SIDE,
            parent=CLIENT_PARENT,
            reuse=CLIENT_REUSE,
            max_workers=BATCH_LIMIT,
            **{
                "stream.poll": "a client looks as often as connect(poll=) says",
                "notifications.lease": NOTICE_LEASE,
            },
        ),
        own={
            "close": "ends its waits and closes its ledger",
            "closed": "whether close() was called",
            "ledger": "the ledger it reads, for what its calls do not cover",
            "readonly": "whether this process may only read the state dir",
            "request": "appends a request to the ledger's queue for the supervisor",
            "request_result": "the supervisor's answer to a request",
            "supervisor_running": "whether a supervisor holds the state dir's lock",
        },
    ),
    Surface(
        "HttpClient",
        "HttpClientVerbs",
        {
            "Self": ("HttpClient", "workunits._client.http_client"),
            "Handle": ("HttpHandle", "workunits._client.http_client"),
            "Stream": ("HttpOutputStream", "workunits._client.http_stream"),
            "AsyncStream": ("HttpOutputStream", "workunits._client.http_stream"),
            "NoticeFeed": ("HttpNotices", "workunits._client.http_notices"),
        },
        frozenset(HTTP_VERBS),
        _reasons(
            frozenset(HTTP_VERBS),
            CLIENT_SIDE,
            **{
                "row": "the ledger's rows are the ledger client's: the server answers "
                "with records (get, list)",
                "rows": "the ledger's rows are the ledger client's: the server answers "
                "with records (get, list)",
                "stream.poll": "it follows the server's event stream: nothing to poll",
            },
        ),
        own={
            "ack_notice": "acknowledges a claimed notice (what its notifications() call)",
            "aclose": "close() on an event loop, closing its async connections",
            "close": "releases its claims and closes its connections",
            "closed": "whether close() was called",
            "events": "a unit's raw server-sent events",
            "release_notice": "gives a claimed notice back (what its notifications() call)",
            "renew_notice": "extends a notice's claim (what its notifications() call)",
            "renew_retain": "renews a retain lease by its ID (what a Retain calls)",
            "take_notice": "claims the next notice (what its notifications() call)",
        },
    ),
    Surface(
        "UnitContext",
        "UnitContextVerbs",
        {
            "Self": ("UnitContext", "workunits._unit.context"),
            "Handle": ("ChildHandle", "workunits._unit.child_handles"),
            "Teammate": ("ChildTeammate", "workunits._unit.child_handles"),
            "Stream": ("OutputStream", "workunits._surface.output_stream"),
            "NoticeFeed": ("Mailbox", "workunits._core.mailbox"),
        },
        frozenset(CONTEXT_VERBS),
        {
            "row": THROUGH_THE_CHANNEL,
            "rows": THROUGH_THE_CHANNEL,
            "retain": "a child's record stays in memory until this unit takes its notice",
            "release": "a child's record stays in memory until this unit takes its notice",
            "schedule": "schedules are the application's: kept and fired by the supervisor",
            "unschedule": "schedules are the application's: kept and fired by the supervisor",
            "schedules": "schedules are the application's: kept and fired by the supervisor",
            "shed": CLIENT_SIDE["shed"],
            "gc": "retention is the supervisor's and the ledger's",
            "register_kind": CLIENT_SIDE["register_kind"],
            "drain": CLIENT_SIDE["drain"],
            "remote": "a unit's children run beside it; Ray units are started by the "
            "supervisor's process",
            "submit": "a unit starts children of the built-in kinds (a kind's spec is an "
            "object of the supervisor's process)",
            "parent": "a unit's children are its own: their parent is the unit",
            "resources": "Ray resources: a unit's children run beside it, not on Ray",
            "teammate.remote": "a unit's children run beside it; Ray actors are started "
            "by the supervisor's process",
            "notifications.lease": NOTICE_LEASE,
            "submit_many.reuse": "a unit's children run in processes of their own: pooled "
            "workers are its supervisor's (Supervisor.submit_many(reuse=True))",
            "map.reuse": "a unit's children run in processes of their own: pooled workers "
            "are its supervisor's (Supervisor.map(reuse=True))",
        },
        twins=False,
        renames={
            "wait": {"work_id": "child"},
            "result": {"work_id": "child"},
            "kill": {"work_id": "child"},
            "cancel": {"work_id": "child"},
            "read_output": {"work_id": "child"},
            "stream": {"work_id": "child"},
            "retry": {"work_id": "child"},
            "signal": {"work_id": "child"},
            "send_input": {"work_id": "child"},
            "tell": {"work_id": "teammate"},
            "ask": {"work_id": "teammate"},
            "stop": {"work_id": "teammate"},
        },
        unit_type="ChildHandle | str",
        own={
            "cancelled": "whether a cancel of this unit was requested",
            "checkpoint": "saves this unit's state for a later attempt",
            "close_channel": "ends the unit's channel (a pooled worker's, between units)",
            "emit": "an event of this unit into its transcript",
            "open_inbox": "a teammate's queue of messages",
            "progress": "this unit's progress, message and evidence",
            "send": "one raw message on the unit's channel",
            "step": "one durable step of this workflow",
            "wait_for": "waits for a signal sent to this unit",
        },
    ),
)

BY_NAME = {surface.name: surface for surface in SURFACES}
