"""``wu.connect(state_dir)``: work units from another process, through the ledger alone.

A :class:`Client` never talks to a supervisor. It reads the ledger and writes
only what DESIGN §4 lets other processes write: submits (a ``pending`` row)
and requests (``cancel``, ``kill``); retains are leases in the ledger. A supervisor on
the same state dir -- ``workunits serve`` or any ``wu.Supervisor`` -- adopts
pending rows and applies requests on its next tick; with none running, they
wait in the ledger until one starts. So a client works the same whether a
supervisor runs, has not started yet, or died and came back.

Every method runs in the caller's thread. One client may be shared by the
threads of one process (the ledger serialises them on its connection);
``close()`` from any thread ends the others' waits with ClientClosed. A client
does not cross ``fork()``: open another one in the child.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import dataclasses
import functools
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast, overload

from workunits._client.follow import (
    RECONNECT_WITHIN,
    Backoff,
    LedgerNotices,
    LedgerOutputStream,
    Outage,
)
from workunits._client.other_host_output import OtherHostOutput
from workunits._core import ids
from workunits._core.clock import Clock, SystemClock
from workunits._core.errors import (
    ClientClosed,
    NotFinished,
    NotRetryable,
    SpecError,
    UnknownKind,
    UnknownWork,
)
from workunits._core.query import Query
from workunits._core.record import WorkRecord
from workunits._core.retain import HeldRetains
from workunits._core.retry import SPEC_NOT_KEPT, check_retryable
from workunits._core.sandbox import Sandbox
from workunits._core.seconds import seconds, wait_timeout
from workunits._core.status import Status, is_terminal
from workunits._ledger import Call, Ledger, NewUnit, UnitRow, lock, secretfile
from workunits._ledger.backend import is_url
from workunits._ledger.unreadable import Unreadable
from workunits._surface import batch, ops
from workunits._surface._generated import ClientHandleVerbs, ClientVerbs, UnitOptions
from workunits._surface.submission import LETTERS, Submission, build, check_unit_options
from workunits._util import shell_log
from workunits._wire.durable import (
    agent_resumable,
    agent_to_durable,
    shell_resumable,
    shell_to_durable,
)
from workunits._wire.results import result_of
from workunits._wire.specs import AgentSpec, check_limits, durable_options
from workunits._wire.submits import check_timeout

if TYPE_CHECKING:
    from workunits._client.http_client import HttpClient

DEFAULT_POLL: Final = 0.1
"""Longest pause between two looks at the ledger while waiting (the backoff's cap)."""

RESUMABLE_ATTEMPTS: Final = 3
"""``max_attempts`` of a unit that can resume after its supervisor dies, unless given."""

_END_VERBS = frozenset({"cancel", "kill"})

R = TypeVar("R")


@overload
def connect(
    state_dir: str | os.PathLike[str] = ".workunits",
    *,
    create: bool = True,
    poll: float = DEFAULT_POLL,
    clock: Clock | None = None,
    ledger: str | None = None,
    secret_file: str | os.PathLike[str] | None = None,
    reconnect_within: float = RECONNECT_WITHIN,
) -> Client: ...


@overload
def connect(state_dir: str, *, token: str, timeout: float = 60.0) -> HttpClient: ...


def connect(
    state_dir: str | os.PathLike[str] = ".workunits",
    *,
    create: bool = True,
    poll: float = DEFAULT_POLL,
    clock: Clock | None = None,
    token: str | None = None,
    timeout: float = 60.0,
    ledger: str | None = None,
    secret_file: str | os.PathLike[str] | None = None,
    reconnect_within: float = RECONNECT_WITHIN,
) -> Client | HttpClient:
    """Open a client on ``state_dir``, creating the dir and its ledger if missing.

    ``connect("http://host:port", token=...)`` returns an HttpClient instead: the
    same calls over a ``workunits serve --http`` API (needs ``workunits[http]``).

    ``ledger="postgresql://..."`` (or such a URL in place of ``state_dir``)
    reaches a supervisor whose ledger is in PostgreSQL; the state dir is then
    the one the supervisor keeps its output files and signing key in.
    ``secret_file`` (default: ``$WORKUNITS_SECRET_FILE``) is the secret every
    host of a shared ledger is given: it signs and verifies stored specs in
    place of the state dir's key, and is the token for other hosts' HTTP APIs.

    A ledger the client cannot reach for a moment (a PostgreSQL restart or
    failover) is tried again by every read, wait and take, for up to
    ``reconnect_within`` seconds (30 by default) from the first failure; then
    the ledger's error is raised. Submits and requests are not retried: their
    caller learns at once (a submit whose COMMIT lost its answer is read back
    first, and says what happened).

    With ``create=False`` a state dir without a ledger raises NoLedger and
    nothing is created (what a reader wants when the path may be a typo); a
    state dir this process may not write in then opens read-only (``readonly``).
    An unsafe state dir (a symlink, another user's, writable by others) raises
    StateDirError either way.
    A ledger written by a newer workunits raises LedgerVersionError.
    """
    if token is not None:
        from workunits._client.http_client import HttpClient  # noqa: PLC0415 - the optional extra

        if not isinstance(state_dir, str) or not state_dir.startswith(("http://", "https://")):
            raise SpecError(f"token= is for an http(s):// address, got {state_dir!r}")
        return HttpClient(state_dir, token=token, timeout=timeout)
    if isinstance(state_dir, str) and state_dir.startswith(("http://", "https://")):
        raise SpecError(f"connecting to {state_dir} needs token= (the state dir's http.token)")
    if ledger is None and is_url(state_dir):
        ledger, state_dir = str(state_dir), ".workunits"
    return Client(
        state_dir,
        create=create,
        poll=poll,
        clock=clock,
        ledger=ledger,
        secret_file=secret_file,
        reconnect_within=reconnect_within,
    )


@overload
async def connect_async(
    state_dir: str | os.PathLike[str] = ".workunits",
    *,
    create: bool = True,
    poll: float = DEFAULT_POLL,
    clock: Clock | None = None,
    ledger: str | None = None,
    secret_file: str | os.PathLike[str] | None = None,
    reconnect_within: float = RECONNECT_WITHIN,
) -> Client: ...


@overload
async def connect_async(state_dir: str, *, token: str, timeout: float = 60.0) -> HttpClient: ...


async def connect_async(
    state_dir: str | os.PathLike[str] = ".workunits",
    *,
    create: bool = True,
    poll: float = DEFAULT_POLL,
    clock: Clock | None = None,
    token: str | None = None,
    timeout: float = 60.0,
    ledger: str | None = None,
    secret_file: str | os.PathLike[str] | None = None,
    reconnect_within: float = RECONNECT_WITHIN,
) -> Client | HttpClient:
    """``connect`` without blocking the event loop: the ledger is opened on a worker thread.

    It takes what ``connect`` takes: an ``http(s)://`` address with ``token=``
    gives an HttpClient, a ``postgresql://`` URL (or ``ledger=``) a client of
    that ledger. The client's ``_async`` methods then read and write the
    ledger on worker threads (one short call each) and wait with
    ``asyncio.sleep``, never with a thread parked per waiter.
    """
    opened = functools.partial(
        connect,
        state_dir,
        create=create,
        poll=poll,
        clock=clock,
        token=token,
        timeout=timeout,
        ledger=ledger,
        secret_file=secret_file,
        reconnect_within=reconnect_within,
    )
    return await asyncio.to_thread(opened)


class Client(ClientVerbs):
    """Submit, inspect, wait for, follow and end work units through a state dir's ledger.

    Its verbs are every surface's (``workunits._surface``); this class carries
    them out against the ledger (``_run``, ``_submit``...).
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str] = ".workunits",
        *,
        create: bool = True,
        poll: float = DEFAULT_POLL,
        clock: Clock | None = None,
        ledger: str | None = None,
        secret_file: str | os.PathLike[str] | None = None,
        reconnect_within: float = RECONNECT_WITHIN,
    ) -> None:
        seconds("poll", poll)
        self._clock = clock or SystemClock()
        self._secret = secretfile.resolve(secret_file)
        self._ledger = Ledger.open(
            state_dir, create=create, clock=self._clock, ledger=ledger, secret=self._secret
        )
        self.state_dir: Path = self._ledger.state_dir
        token = None if self._secret is None else self._secret.token
        self._other_host_output = OtherHostOutput(self._ledger, token)
        self._poll = float(poll)
        self._closed = threading.Event()
        self._outage = Outage(reconnect_within, self._closed)
        self._held = HeldRetains()  # leases retain() gave out: release(id) ends them

    def __repr__(self) -> str:
        return f"<workunits.Client {str(self.state_dir)!r}{' closed' if self.closed else ''}>"

    @property
    def ledger(self) -> Ledger:
        """The ledger this client reads (for what the client's calls do not cover)."""
        if self._closed.is_set():
            raise ClientClosed("the client is closed")
        return self._ledger

    @property
    def readonly(self) -> bool:
        """True in a state dir this process may not write in: reads work, submits and
        requests raise StateDirError."""
        return self._ledger.readonly

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed.is_set()

    # -- the transport of its verbs (``workunits._surface``): the ledger -----------------

    def _run(self, op: ops.Op[R]) -> R:  # noqa: PLR0912 - a case each
        """Carry ``op`` out against the ledger, in the caller's thread (a short transaction)."""
        answer: Any
        match op:
            case ops.Get(work_id):  # reads carry on across a ledger's restart (``Outage``)
                answer = self._outage.call(
                    lambda: self.ledger.units.record(self.ledger.units.require(work_id))
                )
            case ops.Row(work_id):
                answer = self._require(work_id)
            case ops.List(q):
                answer = self._page(q)
            case ops.Rows(status, kind, parent, limit, ended_after, on_unreadable):
                answer = self._rows(status, kind, parent, limit, ended_after, on_unreadable)
            case ops.Kill(work_id):
                answer = self.request("kill", work_id) is not None
            case ops.Cancel(work_id, grace):
                answer = self.request("cancel", work_id, {"grace": grace}) is not None
            case ops.Signal(work_id, name, value):
                answer = self.ledger.signals.send(work_id, name, value) is not None
            case ops.SendInput(work_id, data, eof):
                answer = self._send_input(work_id, data, eof)
            case ops.Retry(work_id):
                answer = self._again(work_id)
            case ops.Lease(work_id, lease):
                self.ledger.units.require(work_id)  # UnknownWork now, not a stray lease
                answer = self.ledger.retains.add(work_id, lease)
            case ops.RenewLease(_, lease_id, lease):
                answer = self.ledger.retains.renew(lease_id, lease)
            case ops.EndLease(_, lease_id):
                answer = self.ledger.retains.release(lease_id)
            case _:
                raise SpecError(f"a ledger client has no {type(op).__name__} operation")
        return cast("R", answer)

    async def _run_async(self, op: ops.Op[R]) -> R:
        """``_run`` on a worker thread: one short ledger call, no thread parked per waiter."""
        return await asyncio.to_thread(self._run, op)

    def _submit(self, submission: Submission) -> ClientHandle:
        """A ``pending`` row in the ledger, fully synced, for a supervisor to adopt."""
        row, created = self.ledger.units.submit(self._new_unit(submission))
        return ClientHandle(self, row.id, created=created)

    def _submit_batch(
        self, submissions: builtins.list[Submission], max_workers: int | None = None
    ) -> builtins.list[ClientHandle | BaseException]:
        """Rows for every submission, checked first (an error names its item), then
        written in one fully synced transaction that wakes the supervisor once. A
        client's batch has no ``max_workers``: that limit lives in a supervisor's memory."""
        news = batch.each_item(submissions, self._new_unit)
        answers = self.ledger.units.submit_many(news, wake=True)
        return [
            a if isinstance(a, BaseException) else ClientHandle(self, a[0].id, created=a[1])
            for a in answers
        ]

    def _new_unit(self, submission: Submission) -> NewUnit:
        """A submit's row, checked; nothing is written."""
        letter, kind, durable, description = self._durable(submission)
        unit = dataclasses.replace(submission.unit, description=description)
        return self._unit_row(letter, kind, durable, unit)

    async def _submit_batch_async(
        self, submissions: builtins.list[Submission], max_workers: int | None = None
    ) -> builtins.list[ClientHandle | BaseException]:
        return await asyncio.to_thread(self._submit_batch, submissions, max_workers)

    async def _submit_async(self, submission: Submission) -> ClientHandle:
        # Pickled and submitted on a worker thread (the synced submit, too).
        return await asyncio.to_thread(self._submit, submission)

    def _handle(self, submitted: ops.Submitted) -> ClientHandle:
        return ClientHandle(self, submitted.id, created=submitted.created)

    def _durable(self, sub: Submission) -> tuple[str, str, Any, str]:
        """The letter, kind, stored spec and description of a shell, agent or workflow.

        A callable given as ``"module:qualname"`` is not imported here (the
        supervisor does that), so its arguments must be exact JSON; a reference
        and the callable it names make the same spec, so they share idempotency keys.
        """
        timeout = check_timeout(sub.unit.timeout)
        given = sub.unit.description
        if sub.verb == "shell":
            built = build(sub)
            if built.spec.log is not None:
                shell_log.refuse_inside(built.spec.log, self.state_dir)
            return "b", "shell", shell_to_durable(built.spec, timeout), built.description
        if sub.verb not in ("agent", "workflow"):
            raise SpecError(
                f"a ledger client submits shell, agent and workflow units, not {sub.verb}"
            )
        letter = LETTERS[sub.verb]
        memory_limit, output_cap = sub.spec["memory_limit"], sub.spec["output_cap"]
        if isinstance(sub.target, str):
            check_limits(memory_limit, output_cap)
            options = durable_options(timeout, memory_limit, output_cap)
            durable = Call(sub.target, tuple(sub.args), dict(sub.kwargs), options)
            return letter, sub.verb, durable, sub.target if given is None else given
        spec = AgentSpec.build(
            sub.target, sub.args, dict(sub.kwargs), memory_limit=memory_limit, output_cap=output_cap
        )
        durable = agent_to_durable(spec, timeout)
        return letter, sub.verb, durable, spec.name if given is None else given

    def _unit_row(self, letter: str, kind: str, durable: Any, unit: UnitOptions) -> NewUnit:
        unit = check_unit_options(unit, self._clock.now())
        work_id = ids.mint(letter)
        stored = self.ledger.units.encode_spec(durable, work_id)
        resumable = shell_resumable(durable) if kind == "shell" else agent_resumable(stored.format)
        max_attempts = unit.max_attempts
        if max_attempts is None:
            max_attempts = RESUMABLE_ATTEMPTS if resumable else 1
        return NewUnit(
            id=work_id,
            kind=kind,
            spec=stored,
            created_at=self._clock.now(),
            description=unit.description or "",
            key=unit.key,
            max_attempts=max_attempts,
            resumable=resumable,
            session=None,
            output_path=str(self.state_dir / "output" / f"{work_id}.out"),
            not_before=cast("float | None", unit.not_before),
            retry=unit.retry,
            stall_after=unit.stall_after,
            # The policy asked for; the supervisor that adopts the unit enforces it.
            sandbox=unit.sandbox,
        )

    def _again(self, work_id: str) -> ops.Submitted:
        """``retry``: a unit that ended failed or killed, again, as a new pending unit.

        Same spec, description and policy; ``retry_of`` names the old unit, whose
        idempotency key moves to the new one (in the submit's transaction); a
        second call returns the same new unit. The supervisor starts it on its
        next tick, as the application's unit (no parent). The spec must be in
        the ledger: NotRetryable otherwise.
        """
        again = self.ledger.units.retried_by(work_id)
        if again is not None:
            return ops.Submitted(again, created=False)
        row = self.ledger.units.require(work_id)
        check_retryable(row.to_record())
        try:
            durable = self.ledger.units.load_spec(work_id)
        except UnknownWork as exc:
            raise NotRetryable(
                f"{work_id} cannot be started again: {exc}. {SPEC_NOT_KEPT}"
            ) from None
        new_id = ids.mint(work_id[0])
        new = NewUnit(
            id=new_id,
            kind=row.kind,
            spec=self.ledger.units.encode_spec(durable, new_id),
            created_at=self._clock.now(),
            description=row.description,
            key=row.key,
            max_attempts=row.max_attempts,
            resumable=row.resumable,
            session=None,
            output_path=str(self.state_dir / "output" / f"{new_id}.out"),
            retry=row.retry,
            retry_of=work_id,
            stall_after=row.stall_after,
        )
        made, created = self.ledger.units.submit(new)
        return ops.Submitted(made.id, created)

    def _page(self, q: Query) -> builtins.list[WorkRecord]:
        """One page of records, read by the ledger's indexes (only its own rows)."""
        found = q.found
        if found.kind is not None:
            found = dataclasses.replace(found, kind=self._kind_name(found.kind))

        def read() -> builtins.list[WorkRecord]:
            if found.parent is not None:
                self.ledger.units.require(found.parent)  # UnknownWork, as a supervisor says
            mark = None if q.after is None else self.ledger.listing.mark_of(q.after)
            rows = self.ledger.listing.page(found, limit=q.limit, after=mark, newest=q.newest)
            return self.ledger.units.records(rows)

        return self._outage.call(read)

    def _rows(  # noqa: PLR0917 - ``rows``' own parameters, passed on
        self,
        status: str | None,
        kind: str | None,
        parent: str | None,
        limit: int | None,
        ended_after: float | None,
        on_unreadable: Callable[[Unreadable], None] | None,
    ) -> builtins.list[UnitRow]:
        name = None if kind is None else self._kind_name(kind)
        return self._outage.call(
            lambda: self.ledger.units.list(
                status=status,
                kind=name,
                parent=parent,
                limit=limit,
                ended_after=ended_after,
                on_unreadable=on_unreadable,
            )
        )

    def _send_input(self, work_id: str, data: bytes, eof: bool) -> bool:
        """An ``input`` request, applied in order by the supervisor that runs the unit
        (or adopts it); False, and no request, once the unit has ended."""
        row = self.ledger.units.require(work_id)
        if is_terminal(row.status):
            return False
        # A spec the ledger keeps says; one it does not (a unit that cannot resume) is
        # checked by the supervisor, which answers the request with the same error.
        spec = self.ledger.units.load_spec(work_id) if row.spec is not None else {"stdin": True}
        if row.kind != "shell" or not (isinstance(spec, dict) and spec.get("stdin") is True):
            raise SpecError(
                f"{work_id} was not started with stdin=True: its standard input is "
                "/dev/null, and nothing can be written to it"
            )
        args = {"data": base64.b64encode(data).decode("ascii"), "eof": eof}
        self.ledger.requests.add("input", work_id, args)
        return True

    def _kind_name(self, kind: str) -> str:
        """The name of a kind given by letter or name; UnknownKind for one that is neither
        built in nor the kind of any unit here (a typo must not read as "none")."""
        name = ids.BUILTIN_KINDS.get(kind, kind)
        if name in ids.BUILTIN_KINDS.values() or self.ledger.units.list(kind=name, limit=1):
            return name
        built_in = ", ".join(sorted(ids.BUILTIN_KINDS.values()))
        raise UnknownKind(
            f"no kind {name!r}: it is not built in ({built_in}), and no unit in "
            f"{self.state_dir} is of it"
        )

    def _require(self, work_id: str) -> UnitRow:
        """The unit's row; a ledger restarting meanwhile is waited for (``Outage``)."""
        return self._outage.call(lambda: self.ledger.units.require(work_id))

    def _record(self, row: UnitRow) -> WorkRecord:
        return self._outage.call(lambda: self.ledger.units.record(row))

    def _wait(self, work_id: str, timeout: float | None) -> WorkRecord:
        """Looks back off from a few milliseconds to ``poll`` seconds."""
        return self._record(self._wait_row(work_id, timeout))

    async def _wait_async(self, work_id: str, timeout: float | None) -> WorkRecord:
        row = await self._wait_row_async(work_id, timeout)
        return await asyncio.to_thread(self._record, row)

    def _wait_row(self, work_id: str, timeout: float | None) -> UnitRow:
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff(self._closed, self._poll)
        while True:
            row = self._require(work_id)
            if is_terminal(row.status):
                return row
            if deadline is not None and time.monotonic() >= deadline:
                raise NotFinished(row.to_record(), timeout)
            backoff.pause(deadline)

    async def _wait_row_async(self, work_id: str, timeout: float | None) -> UnitRow:
        """Each look is a short call on a worker thread, each pause an ``asyncio.sleep``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff(self._closed, self._poll)
        while True:
            row = await asyncio.to_thread(self._require, work_id)
            if is_terminal(row.status):
                return row
            if deadline is not None and time.monotonic() >= deadline:
                raise NotFinished(row.to_record(), timeout)
            await backoff.pause_async(deadline)

    def _result(self, work_id: str, timeout: float | None) -> Any:
        return self._result_of_row(self._wait_row(work_id, timeout))

    async def _result_async(self, work_id: str, timeout: float | None) -> Any:
        row = await self._wait_row_async(work_id, timeout)
        return await asyncio.to_thread(self._result_of_row, row)

    def _result_of_row(self, row: UnitRow) -> Any:
        if row.expired or row.result is None or row.status is not Status.COMPLETED:
            return result_of(row.to_record())  # raises, or the record of a value-less unit
        return self._outage.call(lambda: self.ledger.units.load_result(row.id))

    def _stream(self, work_id: str, follow: bool, poll: float) -> LedgerOutputStream:
        """The offset is this stream's own. Output of a unit that ended before it was read
        comes from the stored tail: its last 64 KiB (an agent's transcript is kept
        whole). Retain the unit while following it for long, so its row does not
        expire meanwhile."""
        self._require(work_id)  # UnknownWork now, not at the first next()
        return self._stream_async(work_id, follow, poll)

    def _stream_async(self, work_id: str, follow: bool, poll: float) -> LedgerOutputStream:
        """Each look at the ledger and the output file of ``async for`` is a short call
        on a worker thread; waits are ``asyncio.sleep``. An unknown ID raises at the
        first step."""
        return LedgerOutputStream(
            self.ledger,
            work_id,
            stop=self._closed,
            poll=self._poll,
            follow=follow,
            other_host=self._other_host_output,
            outage=self._outage,
        )

    def _notifications(self, lease: float) -> LedgerNotices:
        """Consumers on the same state dir (other clients, other processes) share the
        notices: a notice one of them took is not seen by the others."""
        return LedgerNotices(self.ledger, stop=self._closed, poll=self._poll, outage=self._outage)

    async def _notifications_async(self, lease: float) -> LedgerNotices:
        return self._notifications(lease)

    # -- batches (``_surface.batch``) ------------------------------------------------------

    def map(
        self,
        fn: Callable[..., Any] | str,
        *iterables: Iterable[Any],
        timeout: float | None = None,
        sandbox: Sandbox | None = None,
    ) -> Generator[Any, None, None]:
        """``fn`` over the zipped items as agent units, one batch; results in order, as
        ``Executor.map`` (a failure raised at its place, ``timeout`` for the whole map).
        Leaving the loop early kills the units whose results were not read."""
        end = batch.deadline(timeout)
        handles = self.submit_many(batch.calls_of(fn, iterables), sandbox=sandbox)
        return batch.results([h.id for h in handles], end, self.result, self.kill)

    async def map_async(
        self,
        fn: Callable[..., Any] | str,
        *iterables: Iterable[Any],
        timeout: float | None = None,
        sandbox: Sandbox | None = None,
    ) -> AsyncGenerator[Any, None]:
        """Like ``map``, as an async iterator: ``async for value in client.map_async(...)``."""
        end = batch.deadline(timeout)
        handles = await self.submit_many_async(batch.calls_of(fn, iterables), sandbox=sandbox)
        ids = [h.id for h in handles]
        async for value in batch.results_async(ids, end, self.result_async, self.kill_async):
            yield value

    # -- the ledger's own ------------------------------------------------------------------

    def supervisor_running(self) -> bool:
        """True while a supervisor holds this state dir (its lock; see ``_ledger.lock``).

        Without one, pending units wait and running ones make no progress: they
        are resumed or failed ``lost`` when the next supervisor starts. Known at
        once when a supervisor dies, SIGKILL included.
        """
        if self._closed.is_set():
            raise ClientClosed("the client is closed")
        return lock.is_held(self.state_dir)

    def request(self, verb: str, work_id: str, args: dict[str, Any] | None = None) -> int | None:
        """Append a request for the supervisor; return its sequence number.

        ``cancel`` and ``kill`` of a unit that has ended return None and add
        nothing. See ``request_result`` for what the supervisor made of it.
        """
        row = self.ledger.units.require(work_id)
        if verb in _END_VERBS and is_terminal(row.status):
            return None
        return self.ledger.requests.add(verb, work_id, args)

    def request_result(self, seq: int, timeout: float | None = 0.0) -> Any:
        """The supervisor's answer to request ``seq`` (``{"changed": bool, "status": ...}``
        for a cancel or kill), or None while it has not applied it (within ``timeout``)."""
        timeout = wait_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff(self._closed, self._poll)
        while True:
            request = self.ledger.requests.get(seq)
            if request is None:
                raise SpecError(f"the ledger has no request {seq}")
            if request.done_at is not None:
                return request.result
            if deadline is not None and time.monotonic() >= deadline:
                return None
            backoff.pause(deadline)

    # -- closing ---------------------------------------------------------------

    def close(self) -> None:
        """End every wait in progress (ClientClosed) and close the ledger. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._ledger.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ClientHandle(ClientHandleVerbs):
    """What ``Client.shell``/``agent`` return: one unit's ID and the client that submitted it.

    ``created`` is False when an idempotency key named a unit that already existed.
    """

    __slots__ = ()

    def __init__(self, client: Client, work_id: str, *, created: bool = True) -> None:
        super().__init__(client, work_id, created=created)

    @property
    def client(self) -> Client:
        """The client the unit was submitted through."""
        return self._surface

    def row(self) -> UnitRow:
        """The unit's full ledger row (``Client.row``)."""
        return self.client.row(self.id)
