"""Where a module moved: durable references written under an older layout still load.

The ledger keeps names of code, not only data: a pickled result or cause names
its classes by ``module`` and ``qualname`` (``workunits._errors.WorkFailed``),
a spec stored by reference is ``"module:qualname"``, and a ``Retry`` keeps the
exception types it retries as ``"module:qualname"`` names. A state dir written
before a module of workunits moved holds the old names; each place that loads
such a name asks here first (``_wire.unpickle``, ``_wire.specs.resolve_ref``,
``Retry``), so old rows load and old policies match.

Only workunits' own private modules are listed, by their full old name; a name
not listed is returned as it is. Entries are never removed: a state dir may be
opened by any later version.
"""

from __future__ import annotations

# old module -> the module that holds the same names now
MOVED: dict[str, str] = {
    "workunits._ids": "workunits._core.ids",
    "workunits._status": "workunits._core.status",
    "workunits._record": "workunits._core.record",
    "workunits._errors": "workunits._core.errors",
    "workunits._retry": "workunits._core.retry",
    "workunits._restart": "workunits._core.restart",
    "workunits._retain": "workunits._core.retain",
    "workunits._claim": "workunits._core.claim",
    "workunits._schedule": "workunits._core.schedule",
    "workunits._mailbox": "workunits._core.mailbox",
    "workunits._clock": "workunits._core.clock",
    "workunits._seconds": "workunits._core.seconds",
    "workunits._strictjson": "workunits._util.strictjson",
    "workunits._framing": "workunits._util.framing",
    "workunits._signalname": "workunits._util.signalname",
    "workunits._procid": "workunits._util.procid",
    "workunits._lazy": "workunits._util.lazy",
    "workunits._outputfile": "workunits._util.outputfile",
    "workunits._wire.shell_log": "workunits._util.shell_log",
    "workunits._client": "workunits._client.ledger_client",
    "workunits._client_http": "workunits._client.http_client",
    "workunits._client_http_notices": "workunits._client.http_notices",
    "workunits._client_http_stream": "workunits._client.http_stream",
    "workunits._follow": "workunits._client.follow",
    "workunits._remote_output": "workunits._client.other_host_output",
    "workunits._runtime": "workunits._unit",
    "workunits._runtime.capture": "workunits._unit.capture",
    "workunits._runtime.child": "workunits._unit.child",
    "workunits._runtime.context": "workunits._unit.context",
    "workunits._runtime.descendants": "workunits._unit.descendants",
    "workunits._runtime.monitor": "workunits._unit.monitor",
    "workunits._runtime.ratelimit": "workunits._unit.ratelimit",
    "workunits._runtime.steps": "workunits._unit.steps",
    "workunits._runtime.teammate": "workunits._unit.teammate",
    "workunits._runtime.transcript": "workunits._unit.transcript",
    "workunits._runtime.worker": "workunits._unit.worker",
    "workunits._remote": "workunits._ray",
    "workunits._remote.board": "workunits._ray.worker.board",
    "workunits._remote.capture": "workunits._ray.worker.capture",
    "workunits._remote.context": "workunits._ray.worker.context",
    "workunits._remote.follower": "workunits._ray.follower",
    "workunits._remote.frames": "workunits._ray.worker.frames",
    "workunits._remote.host": "workunits._ray.worker.host",
    "workunits._remote.outbox": "workunits._ray.worker.outbox",
    "workunits._remote.placement": "workunits._ray.placement",
    "workunits._remote.runtime": "workunits._ray.runtime",
    "workunits._remote.task": "workunits._ray.worker.task",
    "workunits.actors.remote": "workunits._ray.actor",
    "workunits.actors.remote_teammate": "workunits._ray.teammate_actor",
    "workunits.supervisor.actor": "workunits.supervisor.actor.supervisor_actor",
    "workunits.supervisor.asks": "workunits.supervisor.actor.asks",
    "workunits.supervisor.backlog": "workunits.supervisor.actor.failed_writes",
    "workunits.supervisor.children": "workunits.supervisor.actor.children",
    "workunits.supervisor.control": "workunits.supervisor.actor.control",
    "workunits.supervisor.delays": "workunits.supervisor.actor.delays",
    "workunits.supervisor.durable": "workunits.supervisor.actor.ledger_mirror",
    "workunits.supervisor.endings": "workunits.supervisor.actor.endings",
    "workunits.supervisor.eviction": "workunits.supervisor.actor.eviction",
    "workunits.supervisor.kinds": "workunits.supervisor.actor.kinds",
    "workunits.supervisor.messaging": "workunits.supervisor.actor.messaging",
    "workunits.supervisor.notices": "workunits.supervisor.actor.notices",
    "workunits.supervisor.output": "workunits.supervisor.actor.output",
    "workunits.supervisor.pids": "workunits.supervisor.actor.pids",
    "workunits.supervisor.recovery": "workunits.supervisor.actor.recovery",
    "workunits.supervisor.registry": "workunits.supervisor.actor.registry",
    "workunits.supervisor.rerun": "workunits.supervisor.actor.rerun",
    "workunits.supervisor.retries": "workunits.supervisor.actor.retries",
    "workunits.supervisor.schedules": "workunits.supervisor.actor.schedules",
    "workunits.supervisor.signals": "workunits.supervisor.actor.signals",
    "workunits.supervisor.slots": "workunits.supervisor.actor.slots",
    "workunits.supervisor.stalls": "workunits.supervisor.actor.activity",
    "workunits.supervisor.starts": "workunits.supervisor.actor.starts",
    "workunits.supervisor.submits": "workunits.supervisor.actor.submits",
    "workunits.supervisor.sweep": "workunits.supervisor.actor.deadlines",
    "workunits.supervisor.units": "workunits.supervisor.actor.units",
    "workunits.supervisor.requests": "workunits.supervisor.actor.requests",
    "workunits.supervisor.ticker": "workunits.supervisor.actor.ticker",
    "workunits.supervisor.runtime": "workunits.supervisor.machinery",
    "workunits.supervisor.remote_consumers": "workunits.supervisor.http_consumers",
    "workunits._ledger._db": "workunits._ledger.sqlite.db",
    "workunits._ledger.schema": "workunits._ledger.sqlite.schema",
    "workunits._ledger.backup": "workunits._ledger.sqlite.backup",
    "workunits._ledger.postgres": "workunits._ledger.postgres.db",
    "workunits._ledger.postgres_schema": "workunits._ledger.postgres.schema",
    "workunits._ledger.postgres_sql": "workunits._ledger.postgres.sql",
    "workunits._ledger.postgres_listen": "workunits._ledger.postgres.listen",
    "workunits._ledger.valuestore_db": "workunits._ledger.postgres.valuestore",
    # -- end of table --
}


def current_module(module: str) -> str:
    """The module that holds today what ``module`` held (``module`` itself when it never moved)."""
    return MOVED.get(module, module)


def current_ref(ref: str) -> str:
    """``"module:qualname"`` with its module moved to where it is now."""
    module, sep, qualname = ref.partition(":")
    if not sep:
        return ref
    return f"{current_module(module)}:{qualname}"
