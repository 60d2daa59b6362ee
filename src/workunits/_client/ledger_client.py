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
import builtins
import dataclasses
import datetime
import functools
import os
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, overload

from workunits._client import batch as client_batch
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
from workunits._core.record import WorkRecord
from workunits._core.retain import HeldRetains, Retain
from workunits._core.retry import SPEC_NOT_KEPT, Retry, check_retry, check_retryable
from workunits._core.seconds import seconds, wait_timeout
from workunits._core.status import Status, is_terminal
from workunits._ledger import Call, Ledger, NewUnit, UnitRow, listing, lock, secretfile
from workunits._ledger.backend import is_url
from workunits._ledger.retains import check_lease
from workunits._ledger.unreadable import Unreadable
from workunits._util import shell_log
from workunits._wire.agent_call import AgentCall
from workunits._wire.durable import (
    agent_resumable,
    agent_to_durable,
    shell_resumable,
    shell_to_durable,
)
from workunits._wire.results import result_of
from workunits._wire.specs import (
    DEFAULT_OUTPUT_CAP,
    AgentSpec,
    ShellSpec,
    check_limits,
    durable_options,
)
from workunits._wire.submits import (
    check_attempts,
    check_not_before,
    check_stall_after,
    check_submit,
    check_timeout,
)

if TYPE_CHECKING:
    from workunits._client.http_client import HttpClient

DEFAULT_POLL: Final = 0.1
"""Longest pause between two looks at the ledger while waiting (the backoff's cap)."""

RESUMABLE_ATTEMPTS: Final = 3
"""``max_attempts`` of a unit that can resume after its supervisor dies, unless given."""

_END_VERBS = frozenset({"cancel", "kill"})


DEFAULT_LEASE = 30.0  # seconds a retain lease lasts unless renewed


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


class Client:
    """Submit, inspect, wait for, follow and end work units through a state dir's ledger."""

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

    # -- submitting ------------------------------------------------------------

    def shell(
        self,
        cmd: str | Sequence[str],
        *,
        key: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        description: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        on_lost: str = "fail",
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        log: str | os.PathLike[str] | None = None,
        keep_output: bool = False,
    ) -> ClientHandle:
        """Submit ``cmd`` (a string for ``/bin/sh -c``, or an argv list) as a ``b`` unit.

        It stays ``pending`` until a supervisor adopts it (and, with
        ``not_before``, a ``datetime`` or seconds from now, until then). ``key``
        makes the submit idempotent: the same key returns the unit it already
        names (``handle.created`` is False); the same key with another command
        raises IdempotencyConflict. ``on_lost="restart"`` runs it again (same
        ID, next attempt) if its supervisor dies while it runs. ``log`` and
        ``keep_output`` keep its output after the end, as ``Supervisor.shell``.
        """
        spec = ShellSpec.build(
            cmd,
            cwd=cwd,
            env=env,
            output_cap=output_cap,
            on_lost=on_lost,
            log=log,
            keep_output=keep_output,
        )
        if spec.log is not None:
            shell_log.refuse_inside(spec.log, self.state_dir)
        durable = shell_to_durable(spec, check_timeout(timeout))
        name = spec.describe() if description is None else description
        return self._submit(
            "b",
            "shell",
            durable,
            name,
            key=key,
            max_attempts=None,
            not_before=not_before,
            retry=retry,
            stall_after=stall_after,
        )

    def agent(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        key: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        **kwargs: Any,
    ) -> ClientHandle:
        """Submit ``fn(*args, **kwargs)`` as an ``a`` unit (pending until ``not_before``, if given).

        ``fn`` is an importable callable or an import reference
        ``"package.module:function"``; a reference is not imported here (the
        supervisor does that), so its arguments must be exact JSON. An agent
        stored by reference resumes from its last checkpoint if its supervisor
        dies, up to ``max_attempts`` (default 3) attempts in all.
        """
        return self._call_unit(
            "a",
            "agent",
            fn,
            args,
            kwargs,
            key=key,
            description=description,
            timeout=timeout,
            max_attempts=max_attempts,
            memory_limit=memory_limit,
            output_cap=output_cap,
            not_before=not_before,
            retry=retry,
            stall_after=stall_after,
        )

    def workflow(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        key: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        **kwargs: Any,
    ) -> ClientHandle:
        """Submit ``fn(*args, **kwargs)`` as a workflow (``w``): its ``ctx.step()``s run once.

        ``fn`` as for ``agent``: a callable or ``"package.module:function"``.
        Stored by reference, it resumes after a crash at its first unfinished step.
        """
        return self._call_unit(
            "w",
            "workflow",
            fn,
            args,
            kwargs,
            key=key,
            description=description,
            timeout=timeout,
            max_attempts=max_attempts,
            memory_limit=memory_limit,
            output_cap=DEFAULT_OUTPUT_CAP,
            not_before=not_before,
            retry=retry,
            stall_after=stall_after,
        )

    def _call_unit(
        self,
        letter: str,
        kind: str,
        fn: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        key: str | None,
        description: str | None,
        timeout: float | None,
        max_attempts: int | None,
        memory_limit: int | None,
        output_cap: int,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
    ) -> ClientHandle:
        durable, name = self._call_durable(
            fn, args, kwargs, timeout=timeout, memory_limit=memory_limit, output_cap=output_cap
        )
        if description is not None:
            name = description
        return self._submit(
            letter,
            kind,
            durable,
            name,
            key=key,
            max_attempts=max_attempts,
            not_before=not_before,
            retry=retry,
            stall_after=stall_after,
        )

    def _call_durable(
        self,
        fn: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        timeout: float | None,
        memory_limit: int | None,
        output_cap: int,
    ) -> tuple[Any, str]:
        """An agent call as the ledger stores it, and its default description."""
        if isinstance(fn, str):
            check_limits(memory_limit, output_cap)
            # The options agent_to_durable would write: a reference and the
            # callable it names make the same spec, so they share idempotency keys.
            options = durable_options(check_timeout(timeout), memory_limit, output_cap)
            return Call(fn, tuple(args), dict(kwargs), options), fn
        spec = AgentSpec.build(fn, args, kwargs, memory_limit=memory_limit, output_cap=output_cap)
        return agent_to_durable(spec, check_timeout(timeout)), spec.name

    def _submit(
        self,
        letter: str,
        kind: str,
        durable: Any,
        description: str,
        *,
        key: str | None,
        max_attempts: int | None,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
    ) -> ClientHandle:
        new = self._new_unit(
            letter,
            kind,
            durable,
            description,
            key=key,
            max_attempts=max_attempts,
            not_before=not_before,
            retry=retry,
            stall_after=stall_after,
        )
        row, created = self.ledger.units.submit(new)
        return ClientHandle(self, row.id, created=created)

    def _new_unit(
        self,
        letter: str,
        kind: str,
        durable: Any,
        description: str,
        *,
        key: str | None,
        max_attempts: int | None,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
    ) -> NewUnit:
        """A submit's row, checked; nothing is written."""
        check_submit(description=description, key=key, max_attempts=max_attempts)
        # One attempt counter for retries and resumes, as Starts.register keeps it.
        max_attempts = check_attempts(check_retry(retry), max_attempts)
        stall_after = check_stall_after(stall_after)
        start_at = check_not_before(not_before, self._clock.now())
        work_id = ids.mint(letter)
        stored = self.ledger.units.encode_spec(durable, work_id)
        resumable = shell_resumable(durable) if kind == "shell" else agent_resumable(stored.format)
        if max_attempts is None:
            max_attempts = RESUMABLE_ATTEMPTS if resumable else 1
        return NewUnit(
            id=work_id,
            kind=kind,
            spec=stored,
            created_at=self._clock.now(),
            description=description,
            key=key,
            max_attempts=max_attempts,
            resumable=resumable,
            session=None,
            output_path=str(self.state_dir / "output" / f"{work_id}.out"),
            not_before=start_at,
            retry=retry,
            stall_after=stall_after,
        )

    def submit_many(
        self,
        calls: Iterable[AgentCall],
        *,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        retry: Retry | None = None,
    ) -> list[ClientHandle]:
        """Submit agent units as one batch, written in one transaction; their handles.

        As ``Supervisor.submit_many``: a bad item fails the batch, named by its
        index, before anything is written; one whose key is taken with other
        arguments fails alone (``BatchItemsFailed``). The supervisor starts them at
        its next tick, under its kinds' ``concurrency``.
        """
        return client_batch.submit_many(
            self, calls, client_batch.Shared(max_attempts, memory_limit, output_cap, retry)
        )

    def map(
        self, fn: Callable[..., Any] | str, *iterables: Iterable[Any], timeout: float | None = None
    ) -> Generator[Any, None, None]:
        """``fn`` over the zipped items as agent units, one batch; results in order, as
        ``Executor.map`` (a failure raised at its place, ``timeout`` for the whole map).
        Leaving the loop early kills the units whose results were not read."""
        return client_batch.map_calls(self, fn, iterables, timeout)

    def retry(self, work_id: str) -> ClientHandle:
        """Start a unit that ended ``failed`` or ``killed`` again, as a new pending unit.

        Like ``Supervisor.retry``: same spec, description and policy, ``retry_of``
        names the old unit, whose idempotency key moves to the new one (in the
        submit's transaction); a second call returns the same new unit. The
        supervisor starts it on its next tick, as the application's unit (no
        parent). The spec must be in the ledger: NotRetryable otherwise.
        """
        again = self.ledger.units.retried_by(work_id)
        if again is not None:
            return ClientHandle(self, again, created=False)
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
        return ClientHandle(self, made.id, created=created)

    # -- reading ---------------------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        """The unit's record. An expired unit keeps its terminal status here; see ``row``."""
        return self._outage.call(
            lambda: self.ledger.units.record(self.ledger.units.require(work_id))
        )

    def row(self, work_id: str) -> UnitRow:
        """Everything the ledger keeps about the unit: ``shown_status`` reads ``expired``
        once retention ran out; attempts, key, checkpoint, session too.

        InvalidWorkId for a malformed ID, UnknownWork for one the ledger never saw.
        """
        return self._outage.call(lambda: self.ledger.units.require(work_id))

    def list(
        self,
        status: str | None = None,
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
        """Records, oldest first, filtered and a page at a time as ``Supervisor.list``
        (``status="expired"`` lists the expired units); each page reads only its rows."""
        q = listing.query(
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
        (by default, logged as a warning: see ``Units.list``).
        """
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

    def supervisor_running(self) -> bool:
        """True while a supervisor holds this state dir (its lock; see ``_ledger.lock``).

        Without one, pending units wait and running ones make no progress: they
        are resumed or failed ``lost`` when the next supervisor starts. Known at
        once when a supervisor dies, SIGKILL included.
        """
        if self._closed.is_set():
            raise ClientClosed("the client is closed")
        return lock.is_held(self.state_dir)

    # -- waiting ---------------------------------------------------------------

    def wait(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        """Block until the unit is terminal and return its record.

        NotFinished after ``timeout`` seconds (``0`` looks once). Waits back off
        from a few milliseconds to ``poll`` seconds between looks.
        """
        row = self._wait_row(work_id, timeout)
        return self._outage.call(lambda: self.ledger.units.record(row))

    def _wait_row(self, work_id: str, timeout: float | None) -> UnitRow:
        wait_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff(self._closed, self._poll)
        while True:
            row = self.row(work_id)
            if is_terminal(row.status):
                return row
            if deadline is not None and time.monotonic() >= deadline:
                raise NotFinished(row.to_record(), timeout)
            backoff.pause(deadline)

    def result(self, work_id: str, timeout: float | None = None) -> Any:
        """The unit's value once it completes (its record for kinds without values, like shell).

        Raises WorkFailed (from the unit's exception, when it unpickles here),
        WorkKilled, NotFinished after ``timeout``, or WorkExpired once the
        unit's retention ran out and its value is gone.
        """
        return self._result_of_row(self._wait_row(work_id, timeout))

    def _result_of_row(self, row: UnitRow) -> Any:
        if row.expired or row.result is None or row.status is not Status.COMPLETED:
            return result_of(row.to_record())  # raises, or the record of a value-less unit
        return self.ledger.units.load_result(row.id)

    # -- output and notices ----------------------------------------------------

    def stream(self, work_id: str, *, follow: bool = True) -> LedgerOutputStream:
        """Yield the unit's output from its start, every byte once, until it is terminal.

        With ``follow=False``, only what has been written so far.

        The offset is this stream's own. Output of a unit that ended before it
        was read comes from the stored tail: its last 64 KiB (an agent's
        transcript is kept whole). Retain the unit (``retain``) while following
        it for long, so that its row does not expire meanwhile.
        """
        self.row(work_id)  # InvalidWorkId / UnknownWork now, not at the first next()
        return LedgerOutputStream(
            self.ledger,
            work_id,
            stop=self._closed,
            poll=self._poll,
            follow=follow,
            other_host=self._other_host_output,
            outage=self._outage,
        )

    def notifications(self) -> LedgerNotices:
        """Notices of top-level units as they end; each goes to one consumer, once.

        Consumers on the same state dir (other clients, other processes) share
        them: a notice one of them took is not seen by the others.
        """
        return LedgerNotices(self.ledger, stop=self._closed, poll=self._poll, outage=self._outage)

    # -- requests to the supervisor ------------------------------------------

    def cancel(self, work_id: str, grace: float = 5.0) -> bool:
        """Ask for a cancel (SIGTERM or a cooperative cancel, SIGKILL after ``grace``).

        False, and no request, when the unit has already ended. A pending unit
        is ended ``killed`` (reason ``cancelled``) without ever running.
        """
        grace = seconds("grace", grace, zero=True)
        return self.request("cancel", work_id, {"grace": grace}) is not None

    def kill(self, work_id: str) -> bool:
        """Ask for a SIGKILL of the unit's process group; False (no request) if it has ended."""
        return self.request("kill", work_id) is not None

    def signal(self, work_id: str, name: str, value: Any = None) -> bool:
        """Send the signal ``name`` (a JSON ``value``) to a unit, as ``Supervisor.signal``.

        Kept in the ledger (fully synced) until the unit consumes it, so it
        waits there while no supervisor runs; a running supervisor routes it
        on its next tick. False, and nothing kept, when the unit has ended.
        """
        return self.ledger.signals.send(work_id, name, value) is not None

    def retain(self, work_id: str, lease: float = DEFAULT_LEASE) -> Retain:
        """Keep the unit visible while you look at it: a lease of ``lease`` seconds.

        While it holds, the supervisor keeps the unit's record in memory after
        its end, and the ledger does not expire its row. Renew it before it
        runs out (``renew()``, or ``keep_renewing()``); ``release()`` it or use
        it as a context manager. It lapses by itself if not renewed, and at
        once when this process exits. A read-only state dir cannot hold one.
        """
        self.row(work_id)  # InvalidWorkId / UnknownWork now
        lease = check_lease(lease)
        lease_id = self.ledger.retains.add(work_id, lease)
        return self._held.hold(
            work_id,
            lease_id,
            lease,
            renew=lambda seconds: self.ledger.retains.renew(lease_id, seconds),
            release=lambda: self.ledger.retains.release(lease_id),
        )

    def release(self, work_id: str) -> bool:
        """End the retain leases taken on the unit through this client (``retain``) and
        not yet released; True if there was one. ``Retain.release()`` ends one."""
        ids.validate(work_id)
        return self._held.release(work_id)

    def request(self, verb: str, work_id: str, args: dict[str, Any] | None = None) -> int | None:
        """Append a request for the supervisor; return its sequence number.

        ``cancel`` and ``kill`` of a unit that has ended return None and add
        nothing. See ``request_result`` for what the supervisor made of it.
        """
        row = self.row(work_id)
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

    # -- the async twins: short ledger calls on a worker thread, waits on the loop --

    async def shell_async(
        self,
        cmd: str | Sequence[str],
        *,
        key: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        description: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        on_lost: str = "fail",
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        log: str | os.PathLike[str] | None = None,
        keep_output: bool = False,
    ) -> ClientHandle:
        """Like ``shell`` without blocking the event loop (the synced submit runs on a
        worker thread)."""
        return await asyncio.to_thread(
            self.shell,
            cmd,
            key=key,
            cwd=cwd,
            env=env,
            timeout=timeout,
            description=description,
            output_cap=output_cap,
            on_lost=on_lost,
            not_before=not_before,
            retry=retry,
            stall_after=stall_after,
            log=log,
            keep_output=keep_output,
        )

    async def agent_async(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        key: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        **kwargs: Any,
    ) -> ClientHandle:
        """Like ``agent`` without blocking the event loop (pickled and submitted on a
        worker thread)."""
        return await asyncio.to_thread(
            self._call_unit,
            "a",
            "agent",
            fn,
            args,
            kwargs,
            key=key,
            description=description,
            timeout=timeout,
            max_attempts=max_attempts,
            memory_limit=memory_limit,
            output_cap=output_cap,
            not_before=not_before,
            retry=retry,
            stall_after=stall_after,
        )

    async def workflow_async(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        key: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        memory_limit: int | None = None,
        not_before: float | datetime.datetime | None = None,
        retry: Retry | None = None,
        stall_after: float | None = None,
        **kwargs: Any,
    ) -> ClientHandle:
        """Like ``workflow`` without blocking the event loop."""
        return await asyncio.to_thread(
            self._call_unit,
            "w",
            "workflow",
            fn,
            args,
            kwargs,
            key=key,
            description=description,
            timeout=timeout,
            max_attempts=max_attempts,
            memory_limit=memory_limit,
            output_cap=DEFAULT_OUTPUT_CAP,
            not_before=not_before,
            retry=retry,
            stall_after=stall_after,
        )

    async def get_async(self, work_id: str) -> WorkRecord:
        """Like ``get`` without blocking the event loop."""
        return await asyncio.to_thread(self.get, work_id)

    async def row_async(self, work_id: str) -> UnitRow:
        """Like ``row`` without blocking the event loop."""
        return await asyncio.to_thread(self.row, work_id)

    async def list_async(
        self,
        status: str | None = None,
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
        """Like ``list`` without blocking the event loop."""
        return await asyncio.to_thread(
            functools.partial(
                self.list,
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
        )

    async def rows_async(
        self,
        status: str | None = None,
        kind: str | None = None,
        parent: str | None = None,
        limit: int | None = None,
        ended_after: float | None = None,
        *,
        on_unreadable: Callable[[Unreadable], None] | None = None,
    ) -> builtins.list[UnitRow]:
        """Like ``rows`` without blocking the event loop."""
        return await asyncio.to_thread(
            functools.partial(self.rows, on_unreadable=on_unreadable),
            status,
            kind,
            parent,
            limit,
            ended_after,
        )

    async def retain_async(self, work_id: str, lease: float = DEFAULT_LEASE) -> Retain:
        """Like ``retain`` without blocking the event loop (``renew`` and ``release``
        are short ledger writes: from the loop, run them with ``asyncio.to_thread``)."""
        return await asyncio.to_thread(self.retain, work_id, lease)

    async def release_async(self, work_id: str) -> bool:
        """Like ``release`` without blocking the event loop."""
        return await asyncio.to_thread(self.release, work_id)

    async def wait_async(self, work_id: str, timeout: float | None = None) -> WorkRecord:
        """Like ``wait`` without blocking the event loop: each look at the ledger is a
        short call on a worker thread, each pause an ``asyncio.sleep``."""
        row = await self._wait_row_async(work_id, timeout)
        return await asyncio.to_thread(self.ledger.units.record, row)

    async def _wait_row_async(self, work_id: str, timeout: float | None) -> UnitRow:
        wait_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff(self._closed, self._poll)
        while True:
            row = await asyncio.to_thread(self.row, work_id)
            if is_terminal(row.status):
                return row
            if deadline is not None and time.monotonic() >= deadline:
                raise NotFinished(row.to_record(), timeout)
            await backoff.pause_async(deadline)

    async def result_async(self, work_id: str, timeout: float | None = None) -> Any:
        """Like ``result`` without blocking the event loop."""
        row = await self._wait_row_async(work_id, timeout)
        return await asyncio.to_thread(self._result_of_row, row)

    def stream_async(self, work_id: str, *, follow: bool = True) -> LedgerOutputStream:
        """Like ``stream``, for ``async for chunk in client.stream_async(id)``.

        Each look at the ledger and the output file is a short call on a worker
        thread; waits are ``asyncio.sleep``. A bad ID raises at the first step.
        """
        ids.validate(work_id)
        return LedgerOutputStream(
            self.ledger,
            work_id,
            stop=self._closed,
            poll=self._poll,
            follow=follow,
            other_host=self._other_host_output,
            outage=self._outage,
        )

    async def cancel_async(self, work_id: str, grace: float = 5.0) -> bool:
        """Like ``cancel`` without blocking the event loop."""
        return await asyncio.to_thread(self.cancel, work_id, grace)

    async def kill_async(self, work_id: str) -> bool:
        """Like ``kill`` without blocking the event loop."""
        return await asyncio.to_thread(self.kill, work_id)

    async def signal_async(self, work_id: str, name: str, value: Any = None) -> bool:
        """Like ``signal`` without blocking the event loop."""
        return await asyncio.to_thread(self.signal, work_id, name, value)

    async def retry_async(self, work_id: str) -> ClientHandle:
        """Like ``retry`` without blocking the event loop."""
        return await asyncio.to_thread(self.retry, work_id)

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


class ClientHandle:
    """What ``Client.shell``/``agent`` return: one unit's ID and the client that submitted it.

    ``created`` is False when an idempotency key named a unit that already existed.
    """

    __slots__ = ("client", "created", "id")

    def __init__(self, client: Client, work_id: str, *, created: bool = True) -> None:
        self.client = client
        self.id = work_id
        self.created = created

    def __repr__(self) -> str:
        return f"<ClientHandle {self.id}{'' if self.created else ' (existing)'}>"

    def __str__(self) -> str:
        return self.id

    def get(self) -> WorkRecord:
        """The unit's record from the ledger (``Client.get``)."""
        return self.client.get(self.id)

    def row(self) -> UnitRow:
        """The unit's full ledger row (``Client.row``)."""
        return self.client.row(self.id)

    def wait(self, timeout: float | None = None) -> WorkRecord:
        """Block until the unit is terminal (``Client.wait``)."""
        return self.client.wait(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The unit's result, or its failure raised (``Client.result``)."""
        return self.client.result(self.id, timeout)

    def cancel(self, grace: float = 5.0) -> bool:
        """Request a cancel, SIGKILL after ``grace`` (``Client.cancel``)."""
        return self.client.cancel(self.id, grace)

    def kill(self) -> bool:
        """Request a kill (``Client.kill``)."""
        return self.client.kill(self.id)

    def stream(self) -> LedgerOutputStream:
        """The unit's output as it is written (``Client.stream``)."""
        return self.client.stream(self.id)

    async def get_async(self) -> WorkRecord:
        """Like ``get`` without blocking the event loop."""
        return await self.client.get_async(self.id)

    async def wait_async(self, timeout: float | None = None) -> WorkRecord:
        """Like ``wait`` without blocking the event loop."""
        return await self.client.wait_async(self.id, timeout)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Like ``result`` without blocking the event loop."""
        return await self.client.result_async(self.id, timeout)

    async def cancel_async(self, grace: float = 5.0) -> bool:
        """Like ``cancel`` without blocking the event loop."""
        return await self.client.cancel_async(self.id, grace)

    async def kill_async(self) -> bool:
        """Like ``kill`` without blocking the event loop."""
        return await self.client.kill_async(self.id)

    def stream_async(self) -> LedgerOutputStream:
        """Like ``stream``, for ``async for`` (``Client.stream_async``)."""
        return self.client.stream_async(self.id)
