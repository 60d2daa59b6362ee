"""Every verb but the submits, written once: what ``Supervisor``, ``Client``, ``HttpClient``
and ``UnitContext`` offer, each over its own transport.

A verb checks its arguments (one check, one wording, whichever surface it is
called on) and hands an operation to the transport (``transport.Transport``).
This class is the definition, not a base: ``tools/gen_surfaces.py`` copies each
verb a surface offers (``surfaces.SURFACES``) onto that surface's generated
base, with the surface's own types, and writes its ``_async`` twin by turning
each transport call into its awaited twin (``self._run(op)`` becomes ``await
self._run_async(op)``), so a twin can never take other options than its verb.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, overload

from workunits._core import ids
from workunits._core.errors import SpecError
from workunits._core.query import query
from workunits._core.record import OutputChunk, WorkRecord
from workunits._core.retain import DEFAULT_LEASE, Retain, check_lease
from workunits._core.retry import Retry
from workunits._core.sandbox import Sandbox
from workunits._core.schedule import ScheduleInfo
from workunits._core.seconds import DEFAULT_CLAIM_LEASE, ask_timeout, seconds, wait_timeout
from workunits._core.status import Status
from workunits._surface import batch, ops
from workunits._surface.handle import Handle, Stream
from workunits._surface.paging import EVERY_PAGE
from workunits._surface.schedules import scheduled_spec
from workunits._surface.transport import NoticeFeed, Transport
from workunits._surface.tree import render_tree
from workunits._wire.agent_call import AgentCall
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, check_bytes

if TYPE_CHECKING:
    from workunits._ledger import UnitRow
    from workunits._ledger.unreadable import Unreadable
    from workunits.actors.base import WorkActor

STREAM_POLL = 0.05  # seconds between looks at a quiet unit's output


class Verbs(Transport):
    """The verbs of every surface (each surface offers those ``surfaces.SURFACES`` lists)."""

    # -- starting again, and signals ----------------------------------------------------

    def retry(self, work_id: str) -> Handle:
        """Start a unit that ended ``failed`` or ``killed`` again, as a new unit.

        The new unit has the same spec, description and policy, ``retry_of``
        names the old one, and the old one's idempotency key now names the new
        one; the old unit stays as it ended. Retrying it again returns the same
        new unit (``created`` False). NotRetryable for a unit that did not fail,
        or whose spec is no longer kept.
        """
        return self._handle(self._run(ops.Retry(ids.validate(work_id))))

    def signal(self, work_id: str, name: str, value: Any = None) -> bool:
        """Send the signal ``name`` (a JSON ``value``) to a unit that waits or will wait for it.

        Inside the unit, ``ctx.wait_for(name)`` returns the value. Signals of
        one name queue in order; one sent before the unit waits is kept in the
        ledger until it does, across restarts. False, and nothing kept, when
        the unit has ended; UnknownWork for an ID the ledger does not know.
        """
        return self._run(ops.Signal(ids.validate(work_id), name, value))

    def send_input(self, work_id: str, data: bytes | str, eof: bool = False) -> bool:
        """Write ``data`` to the standard input of a unit started with ``stdin=True``.

        Writes queue in order and this returns at once (the supervisor writes
        them as the command reads; at most 16 MiB may wait unread); a ``str``
        is written as UTF-8. ``eof=True`` closes the unit's stdin after
        ``data``: the command reads end of file, and later writes are refused.
        False, and nothing written, once the unit has ended; SpecError for a
        unit started without ``stdin=True``.
        """
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, bytes | bytearray | memoryview):
            raise SpecError(f"data must be bytes or str, got {type(data).__name__}")
        if not isinstance(eof, bool):
            raise SpecError(f"eof must be True or False, got {eof!r}")
        return self._run(ops.SendInput(ids.validate(work_id), bytes(data), eof))

    # -- batches ------------------------------------------------------------------------

    def submit_many(
        self,
        calls: Iterable[AgentCall],
        *,
        max_workers: int | None = None,
        reuse: bool = False,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        sandbox: Sandbox | None = None,
    ) -> builtins.list[Handle]:
        """Submit agent units as one batch, written in one transaction; their handles.

        Every item (a ``wu.AgentCall``: a call, and its unit's own key,
        description and timeout) is checked before anything is written: one that
        cannot make a unit fails the batch with SpecError or WrongType naming its
        index. An item whose key names a unit returns that unit; one whose key
        was taken with other arguments fails alone, and ``BatchItemsFailed``
        carries every item's handle or error. At most ``max_workers`` of the
        batch run at once (default: no limit of its own). The other options are
        every unit's, as ``agent`` takes them.
        """
        submissions = batch.submissions(
            calls,
            output_cap=output_cap,
            memory_limit=memory_limit,
            reuse=reuse,
            max_attempts=max_attempts,
            retry=retry,
            sandbox=sandbox,
        )
        return batch.handles_or_raise(self._submit_batch(submissions, max_workers))

    # -- reading ------------------------------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        """The unit's current record: from memory, or from the ledger once it left memory."""
        return self._run(ops.Get(ids.validate(work_id)))

    def list(
        self,
        status: Status | str | None = None,
        kind: str | None = None,
        parent: str | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        key: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        search: str | None = None,
        order: str = "oldest",
    ) -> builtins.list[WorkRecord]:
        """The units, filtered; a page at a time with ``limit``.

        ``status="expired"`` lists the expired units; a status lists the units
        that have it and are not expired. ``kind`` is a kind's name or letter;
        ``key`` an idempotency key; ``created_after`` (inclusive) and
        ``created_before`` (exclusive) bound the submit time (seconds since the
        epoch); ``search`` matches each of its words as the start of a word of
        the ID, description or key. ``limit`` and ``after`` (a unit's ID: the
        last of the previous page) read a page at a time, oldest first
        (``order="newest"``: newest first). Each page reads only its own rows;
        without ``limit`` the pages are read in turn, ``EVERY_PAGE`` at a time.
        """
        q = query(
            status,
            kind,
            parent,
            limit=limit,
            after=after,
            key=key,
            created_after=created_after,
            created_before=created_before,
            search=search,
            order=order,
        )
        if q.limit is not None:
            return self._run(ops.List(q))
        # Page by page, so that no one read (nor one message) costs the whole ledger.
        listed: builtins.list[WorkRecord] = []
        q = replace(q, limit=EVERY_PAGE)
        while True:
            got = self._run(ops.List(q))
            listed += got
            if len(got) < EVERY_PAGE:
                return listed
            q = replace(q, after=got[-1].id)

    def tree(self, root: str | None = None) -> str:
        """The units as an indented tree (all top-level units, or ``root`` and its descendants)."""
        if root is not None:
            ids.validate(root)
        return render_tree(self.list(), root)

    @overload
    def read_output(
        self, work_id: str, max_bytes: int | None = None, *, offset: None = None
    ) -> bytes: ...

    @overload
    def read_output(
        self, work_id: str, max_bytes: int | None = None, *, offset: int
    ) -> OutputChunk: ...

    def read_output(
        self, work_id: str, max_bytes: int | None = None, *, offset: int | None = None
    ) -> bytes | OutputChunk:
        """The output written since the last read (at most ``max_bytes``, default 1 MiB);
        advances the reader's offset.

        With ``offset``, reads from there instead and returns an ``OutputChunk``
        (the offset is left alone): for an ended unit only its tail is still
        held, and ``chunk.start > offset`` says what the reader missed.
        """
        ids.validate(work_id)
        if max_bytes is not None:
            check_bytes("max_bytes", max_bytes)
        if offset is None:
            return self._run(ops.ReadOutput(work_id, max_bytes))
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise SpecError(f"offset must be an int >= 0, got {offset!r}")
        return self._run(ops.ReadChunk(work_id, offset, max_bytes))

    def stream(self, work_id: str, *, follow: bool = True, poll: float = STREAM_POLL) -> Stream:
        """Yield every byte of the unit's output exactly once, until it is terminal.

        With ``follow=False``, only what has been written so far. The unit is
        kept (retained) from this call until the stream ends or is closed, so
        its end cannot cut off unread output. ``poll``: the longest pause
        between two looks while the unit is quiet.
        """
        return self._stream(ids.validate(work_id), follow, seconds("poll", poll))

    def row(self, work_id: str) -> UnitRow:
        """Everything the ledger keeps about the unit: ``shown_status`` reads ``expired``
        once retention ran out; attempts, key, checkpoint, session too.

        InvalidWorkId for a malformed ID, UnknownWork for one the ledger never saw.
        """
        return self._run(ops.Row(ids.validate(work_id)))

    def rows(
        self,
        status: str | None = None,
        kind: str | None = None,
        parent: str | None = None,
        limit: int | None = None,
        ended_after: float | None = None,
        *,
        on_unreadable: Callable[[Unreadable], None] | None = None,
    ) -> builtins.list[UnitRow]:
        """Like ``list``, with the ledger's full rows; ``ended_after`` keeps units that
        ended at or after that time (seconds since the epoch).

        ``kind`` is a kind's name or letter. UnknownKind for one that is neither
        built in nor the kind of any unit here (a typo must not read as "none").
        A row that cannot be read is left out and handed to ``on_unreadable``
        (by default, logged as a warning).
        """
        return self._run(ops.Rows(status, kind, parent, limit, ended_after, on_unreadable))

    # -- waiting ------------------------------------------------------------------------

    def wait(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        """Block until the unit is terminal and return its record; NotFinished after
        ``timeout`` seconds (``0`` looks once)."""
        return self._wait(ids.validate(work_id), wait_timeout(timeout))

    def result(self, work_id: str, timeout: float | None = None) -> Any:
        """The unit's value once it completes (its record for kinds without one, like shell).

        Raises WorkFailed, WorkKilled, NotFinished after ``timeout``, or
        WorkExpired once the unit's retention ran out and its value is gone.
        """
        return self._result(ids.validate(work_id), wait_timeout(timeout))

    # -- ending work --------------------------------------------------------------------

    def cancel(self, work_id: str, grace: float = 5.0) -> bool:
        """Ask the unit to stop (SIGTERM, or a cooperative cancel), SIGKILL after ``grace``
        seconds. False if it had ended; a pending unit ends ``killed`` without running."""
        grace = seconds("grace", grace, zero=True)
        return self._run(ops.Cancel(ids.validate(work_id), grace))

    def kill(self, work_id: str) -> bool:
        """SIGKILL the unit's process group now. False if it had ended (a no-op)."""
        return self._run(ops.Kill(ids.validate(work_id)))

    # -- keeping a unit in view -----------------------------------------------------------

    def retain(self, work_id: str, lease: float = DEFAULT_LEASE) -> Retain:
        """Keep the unit visible while you look at it: a lease of ``lease`` seconds.

        While the lease holds, the unit's record stays in memory after its end
        and its ledger row does not expire. Renew it (``renew()``, or
        ``keep_renewing()``) before it runs out; ``release()`` it, or use it as a
        context manager, when done. It lapses by itself if not renewed, and at
        once if this process exits. The lease's ``renew`` and ``release`` are
        short blocking calls (from an event loop, run them with ``asyncio.to_thread``).
        """
        lease = check_lease(lease)
        lease_id = self._run(ops.Lease(ids.validate(work_id), lease))
        return self._held.hold(
            work_id,
            lease_id,
            lease,
            renew=lambda seconds: self._run(ops.RenewLease(work_id, lease_id, seconds)),
            release=lambda: self._run(ops.EndLease(work_id, lease_id)),
        )

    def release(self, work_id: str, lease_id: str | None = None) -> bool:
        """End the retain leases taken on the unit through this surface (``retain``) and
        not yet released; True if there was one. With ``lease_id``, that lease only."""
        ids.validate(work_id)
        if lease_id is not None:
            return self._run(ops.EndLease(work_id, lease_id))
        return self._offload(self._held.release, work_id)

    def notifications(self, *, lease: float = DEFAULT_CLAIM_LEASE) -> NoticeFeed:
        """The notices of units as they end, one per unit, each to one consumer, once.

        ``with feed.take(timeout) as n: ...`` acknowledges the notice when the
        block ends; ``feed.get()`` takes and acknowledges at once; ``async for``
        and the ``_async`` calls wait on an event loop. Over HTTP a claim holds
        for ``lease`` seconds at a time, renewed while it is held.
        """
        return self._notifications(lease)

    # -- teammates ----------------------------------------------------------------------

    def tell(self, work_id: str, message: Any) -> None:
        """Queue ``message`` for a running teammate; TeammateEnded if it ended or is ending."""
        self._run(ops.Tell(ids.validate(work_id), message))

    def ask(self, work_id: str, message: Any, timeout: float | None = None) -> Any:
        """The teammate's answer to ``message``, or the exception its handler raised.

        TeammateEnded if it ends before answering (a kill mid-ask), AskTimeout
        after ``timeout`` seconds (None: until it answers or ends).
        """
        return self._ask_teammate(ids.validate(work_id), message, ask_timeout(timeout))

    def stop(self, work_id: str) -> bool:
        """Ask a teammate to stop after the messages already sent (it ends ``completed``);
        False if it is not running."""
        return self._run(ops.Stop(ids.validate(work_id)))

    # -- schedules ------------------------------------------------------------------------

    def schedule(
        self,
        name: str,
        cron: str,
        kind: str,
        target: Any,
        *args: Any,
        tz: str = "UTC",
        catch_up: str = "skip",
        description: str | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        """Start a unit at each time the cron expression ``cron`` names, in time zone ``tz``.

        ``kind`` is ``"shell"`` (``target`` a command, as for ``shell``),
        ``"agent"`` or ``"workflow"`` (``target`` a callable, called with
        ``args`` and ``kwargs``). A schedule of the same ``name`` is replaced.
        It is kept in the ledger: each firing is a unit under the idempotency
        key ``schedule:<name>:<due time>``, so none fires twice. A firing due
        while no supervisor ran is recorded as missed; with
        ``catch_up="run-once"`` the latest missed one runs at the next start.
        """
        letter, spec = self._offload(scheduled_spec, kind, target, args, kwargs)
        options: dict[str, Any] = {"description": description, "timeout": timeout}
        self._run(ops.AddSchedule(name, cron, letter, spec, tz, catch_up, options))

    def unschedule(self, name: str) -> bool:
        """Stop the schedule ``name`` (units it started go on); False when there was none."""
        return self._run(ops.RemoveSchedule(name))

    def schedules(self) -> builtins.list[ScheduleInfo]:
        """Each schedule by name: its cron, next due time and latest firing (or miss)."""
        return self._run(ops.ListSchedules())

    # -- the supervisor's own -------------------------------------------------------------

    def shed(self, n: int | None = None) -> builtins.list[str]:
        """Kill up to ``n`` running dreams (all with None), newest first; their IDs.

        They end ``killed`` with reason ``shed``, which tells them apart from an
        explicit kill: shed work is worth resubmitting when the load falls.
        """
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise SpecError(f"n must be an int >= 0 or None, got {n!r}")
        return self._run(ops.Shed(n))

    def gc(self, older_than: float | None = None) -> int:
        """Expire ended units past their retention; forget those expired ``older_than`` ago."""
        return self._run(ops.Gc(older_than))

    def register_kind(self, letter: str, actor_class: type[WorkActor]) -> None:
        """Add a kind under an unused letter; built-in letters and ``s`` are refused."""
        self._run(ops.RegisterKind(letter, actor_class))

    def drain(self, timeout: float) -> builtins.list[str]:
        """Stop admitting work, then wait up to ``timeout`` s for the units that cannot resume.

        From this call submits raise SupervisorClosed and nothing more starts
        (pending units stay pending, for the next supervisor). Running units
        that a deploy would end -- those that cannot resume -- get up to
        ``timeout`` seconds to finish; the IDs of those still running after it
        are returned. Follow with ``close(deploy=True)`` (``serve
        --drain-timeout`` does both on SIGTERM).
        """
        return self._offload(self._drain, seconds("timeout", timeout, zero=True))


# What an ``_async`` twin's docstring adds to "Like ``verb`` without blocking the event loop".
ASYNC_NOTES = {
    "result": "The value is decoded on a worker thread: unpickling may import modules.",
    "stream": "For ``async for chunk in ...``: no thread waits while the unit is quiet.",
    "drain": "It waits on a worker thread.",
    "schedule": "The call is pickled on a worker thread.",
}
