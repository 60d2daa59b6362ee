"""The one place the HTTP layer calls the supervisor: its awaitable ``_async`` twins.

Every call with an ``_async`` twin on ``Supervisor`` or ``WorkHandle`` (submits,
get, list, wait, kill, cancel, signal, retry) awaits it: the supervisor actor answers an
asyncio future, so no thread waits. What has no twin runs in the default thread
pool with ``asyncio.to_thread``: pickling a call for a child (``AgentSpec.build``,
which may import), decoding a result (may unpickle), an event read (files and
maybe the ledger), and the remote consumers' ledger transactions. An event
follower sleeps on an ``asyncio.Event`` that the supervisor's change journal
sets (``EventFeed.listen``), with a capped timeout so that output, which does
not go through the record, is polled with backoff.

Runs on the server's event loop thread; every supervisor call it makes is one
the Python API offers, so there is no second path to the registry or ledger.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from workunits._core import ids
from workunits._core.errors import InvalidArgument, NotFinished, WorkunitsError
from workunits._core.query import query
from workunits._core.record import WorkRecord
from workunits._core.schedule import ScheduleInfo
from workunits._core.status import is_terminal
from workunits._http.models import CallSubmit, ScheduleBody, ShellSubmit, options_of
from workunits._http.problems import ShuttingDown
from workunits._ledger import Ledger
from workunits._ledger.listing import Total
from workunits._surface import batch
from workunits._surface._generated import UnitOptions
from workunits._surface.options import UNIT_OPTIONS, taken_by
from workunits._surface.submission import Submission
from workunits._util import strictjson
from workunits._wire.results import result_of
from workunits._wire.specs import resolve_ref
from workunits.supervisor import batch_requests
from workunits.supervisor.events import Cursor, EventBatch, OutputHold
from workunits.supervisor.facade import Supervisor
from workunits.supervisor.http_consumers import NoticeClaim

T = TypeVar("T")
_UNIT = {o.name for o in UNIT_OPTIONS}


async def _run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


class Backend:
    """Awaitable supervisor calls for one app (one supervisor)."""

    def __init__(self, sup: Supervisor) -> None:
        """Runs in the thread that builds the server, before its loop starts."""
        self.sup = sup
        # The journal from now on: a follower from the first cursor then sees every
        # change and checkpoint of units submitted through this server.
        sup.event_feed  # noqa: B018 - subscribes the feed (blocking: not on the loop)
        # Each submit's latency, observed as it happens (metrics: fixed buckets, so
        # nothing piles up between scrapes).
        self.on_submit: Callable[[float], None] = lambda seconds: None
        self.closing = asyncio.Event()  # set on the server's loop when it shuts down
        self._loop: asyncio.AbstractEventLoop | None = None
        self.on_attach: list[Callable[[], None]] = []  # run on the loop at its first request

    def attach(self) -> None:
        """Note the server's loop (on it, at its first request): ``close`` wakes it."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            for start in self.on_attach:
                start()

    def close(self) -> None:
        """From any thread: the server is shutting down; long-polls answer 503 now."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.closing.set)

    async def until_closing(self, work: Awaitable[T]) -> T:
        """``work``'s result, or ShuttingDown (503) once the server starts shutting down."""
        task = asyncio.ensure_future(work)
        if self.closing.is_set():
            task.cancel()
            raise ShuttingDown
        closing = asyncio.ensure_future(self.closing.wait())
        try:
            await asyncio.wait({task, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
        if not task.done():
            task.cancel()
            raise ShuttingDown
        return task.result()

    @property
    def session(self) -> str:
        return self.sup.session

    # -- submitting ----------------------------------------------------------------

    async def submit(
        self, body: ShellSubmit | CallSubmit, key: str | None
    ) -> tuple[WorkRecord, bool]:
        """Submit; the record and whether this call created it (False: the key's unit)."""
        started = time.perf_counter()
        handle = await self.sup._submit_async(await self._submission(body, key))
        record = await handle.get_async()
        self.on_submit(time.perf_counter() - started)
        return record, handle.created

    async def submit_batch(
        self,
        bodies: builtins.list[ShellSubmit | CallSubmit],
        keys: builtins.list[str | None] | None,
        max_workers: int | None,
    ) -> builtins.list[tuple[WorkRecord, bool] | BaseException]:
        """Submit the bodies as one batch (one ``SubmitMany``): per body its record and
        whether this call created it, or its own error; a body that cannot make a unit
        fails all, named by its index, before anything is written."""
        if keys is not None and len(keys) != len(bodies):
            # Said here, not by the model: JSON Schema cannot tie two arrays' lengths.
            raise InvalidArgument(f"{len(keys)} keys for {len(bodies)} units: give one each")
        submissions = []
        for index, body in enumerate(bodies):
            try:
                key = None if keys is None else keys[index]
                submissions.append(await self._submission(body, key))
            except WorkunitsError as exc:
                raise batch.item_error(index, exc) from exc
        started = time.time()
        answers = await batch_requests.records_async(self.sup, submissions, max_workers)
        return [
            a if isinstance(a, BaseException) else (a, a.created_at >= started) for a in answers
        ]

    async def _submission(self, body: ShellSubmit | CallSubmit, key: str | None) -> Submission:
        """The body as the Python verbs would submit it (every option read from the one
        definition, ``_surface.options``): the supervisor builds and checks the spec."""
        given = options_of(body)
        unit = UnitOptions(key=key, **{k: v for k, v in given.items() if k in _UNIT})
        spec = {o.name: given.get(o.name, o.default) for o in taken_by(body.kind) if not o.unit}
        if isinstance(body, ShellSubmit):
            cmd: str | list[str] = (
                body.command if body.command is not None else list(body.argv or [])
            )
            return Submission("shell", cmd, (), {}, spec, unit)
        # They came as JSON, but a number JSON cannot bring back (1e400 parses as inf)
        # would otherwise be pickled with the function, unnoticed.
        _exact_arguments(body.target, body.args, body.kwargs)
        fn = await _run(resolve_ref, body.target)  # imports the target's module
        return Submission(body.kind, fn, tuple(body.args), dict(body.kwargs), spec, unit)

    # -- reading ---------------------------------------------------------------------

    async def get(self, work_id: str) -> WorkRecord:
        return await self.sup.get_async(work_id)

    async def list_units(self, asked: dict[str, Any]) -> tuple[builtins.list[WorkRecord], Total]:
        """A page of ``sup.list(**asked)`` (memory and ledger), and the filters' total
        (the ledger's: a unit whose new status is not written yet counts as before)."""
        found = query(**asked).found  # SpecError before anything is read
        if found.kind is not None:
            found = replace(found, kind=ids.BUILTIN_KINDS.get(found.kind, found.kind))
        records = await self.sup.list_async(**asked)
        total = await _run(self.ledger.listing.total, found)
        return records, total

    def unit_counts_now(self) -> dict[tuple[str, str], int]:
        """Units by (kind, shown status), as the ledger counts them (a few rows read;
        blocking: a metrics scrape's worker thread)."""
        return self.ledger.listing.counts()

    def notices_waiting_now(self) -> int:
        """Notices not yet acknowledged (blocking: a metrics scrape's worker thread)."""
        return self.sup.http_consumers.waiting()

    @property
    def ledger(self) -> Ledger:
        return self.sup._machinery.ledger

    async def events(
        self, work_id: str, after: Cursor | None, max_bytes: int, hold: OutputHold | None = None
    ) -> EventBatch:
        """``sup.events``; with ``hold``, reading the output a follower holds open."""
        if hold is None:
            return await _run(self.sup.events, work_id, after, max_bytes)
        ids.validate(work_id)
        return await _run(self.sup.event_feed.read, work_id, after, max_bytes, hold)

    def listen(self, work_id: str, wake: asyncio.Event) -> Callable[[], None]:
        """Set ``wake`` (on this loop) at each change of the unit; returns the stop function."""
        loop = asyncio.get_running_loop()

        def listener() -> None:
            loop.call_soon_threadsafe(wake.set)

        return self.sup.event_feed.listen(work_id, listener)

    def ended_counts(self) -> dict[str, int]:
        return dict(self.sup.event_feed.ended)

    # -- waiting ---------------------------------------------------------------------

    async def wait(self, work_id: str, timeout: float) -> WorkRecord:
        """The record once terminal, or as it is after ``timeout`` (no thread is held)."""
        try:
            return await self.until_closing(self.sup.wait_async(work_id, timeout))
        except NotFinished as exc:
            return exc.record

    async def result_of(self, record: WorkRecord) -> Any:
        """The value (may unpickle: a thread), or WorkFailed / WorkKilled / WorkExpired."""
        assert is_terminal(record.status)
        # result_async would wait for (ask for) the record again: decode the one in
        # hand on a worker thread, as result_async itself does.
        return await _run(result_of, record)

    # -- signals and retries -------------------------------------------------------------

    async def signal(self, work_id: str, name: str, value: Any) -> bool:
        """Keep the signal for the unit; False when it has ended (nothing kept)."""
        return await self.sup.signal_async(work_id, name, value)

    async def send_input(self, work_id: str, data: bytes, eof: bool) -> bool:
        """Queue ``data`` for the unit's stdin; False when it has ended."""
        return await self.sup.send_input_async(work_id, data, eof)

    async def retry(self, work_id: str) -> tuple[WorkRecord, bool]:
        """The unit that runs ``work_id`` again, and whether this call started it."""
        handle = await self.sup.retry_async(work_id)
        return await handle.get_async(), handle.created

    # -- schedules ---------------------------------------------------------------------

    async def schedules(self) -> builtins.list[ScheduleInfo]:
        return await _run(self.sup.schedules)

    async def put_schedule(self, name: str, body: ScheduleBody) -> tuple[ScheduleInfo, bool]:
        """Add or replace the schedule; it as it is now, and whether it is new."""
        u = body.unit
        if isinstance(u, ShellSubmit):
            kind, target, args, kwargs = "shell", u.command or list(u.argv or []), [], {}
        else:
            kind, target, args, kwargs = u.kind, u.target, u.args, u.kwargs
        given = options_of(u)
        known = {s.name for s in await self.schedules()}
        await _run(
            self.sup.schedule,
            name,
            body.cron,
            kind,
            target,
            *args,
            tz=body.tz,
            catch_up=body.catch_up,
            description=given.get("description"),
            timeout=given.get("timeout"),
            **kwargs,
        )
        (now,) = [s for s in await self.schedules() if s.name == name]
        return now, name not in known

    async def unschedule(self, name: str) -> bool:
        return await _run(self.sup.unschedule, name)

    # -- ending work --------------------------------------------------------------------

    async def cancel(self, work_id: str, grace: float) -> bool:
        return await self.sup.cancel_async(work_id, grace)

    async def kill(self, work_id: str) -> bool:
        return await self.sup.kill_async(work_id)

    # -- leases and claims ----------------------------------------------------------------

    async def retain(self, work_id: str, lease: float, owner: str) -> str:
        await self.get(work_id)  # InvalidWorkId / UnknownWork / its expiry first
        return await _run(self.sup.http_consumers.retain, work_id, lease, owner)

    async def renew_retain(self, lease_id: str, lease: float, unit: str) -> bool:
        return await _run(self.sup.http_consumers.renew_retain, lease_id, lease, unit)

    async def release_retain(self, lease_id: str, unit: str) -> bool:
        return await _run(self.sup.http_consumers.release_retain, lease_id, unit)

    async def claim(self, parent: str | None, owner: str, lease: float) -> NoticeClaim | None:
        return await _run(self.sup.http_consumers.claim, parent, owner, lease)

    async def ack(self, work_id: str, token: str | None) -> bool:
        return await _run(self.sup.http_consumers.ack, work_id, token)

    async def release_claim(self, work_id: str, token: str) -> bool:
        return await _run(self.sup.http_consumers.release, work_id, token)

    async def renew_claim(self, work_id: str, token: str, lease: float) -> bool:
        return await _run(self.sup.http_consumers.renew, work_id, token, lease)

    def ledger_commit_seconds(self) -> builtins.list[float]:
        """The supervisor's ledger commits since the last look (O(n) in memory, no I/O)."""
        return self.ledger.drain_commit_seconds()


def _exact_arguments(target: str, args: object, kwargs: object) -> None:
    """SpecError naming the first argument JSON would not bring back equal."""
    strictjson.dumps_argument({"args": args, "kwargs": kwargs}, f"the arguments for {target!r}")
