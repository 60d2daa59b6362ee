"""The tools' handlers: what each does with the fleet, and what it answers.

Runs in the server's event loop; every fleet call (a ledger read, a supervisor
ask, an HTTP request) goes to a worker thread. A handler answers a dict (the
structured result) and a text for the model; it raises :class:`ToolFailure`
with one actionable sentence for anything the model can fix or should know.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson

from workunits._core.errors import (
    IdempotencyConflict,
    InvalidWorkId,
    NotRetryable,
    UnknownWork,
    WorkunitsError,
)
from workunits._core.ids import is_valid
from workunits._core.record import MonitorEvent, Notification, WorkRecord
from workunits._core.status import Status, is_terminal
from workunits._mcp import output, sandbox
from workunits._mcp.fleet import Fleet
from workunits._mcp.limits import MAX_NOTICES, MAX_PAGE, Limits
from workunits._mcp.notices import NoticeDesk

ERROR_CHARS = 2000  # of a unit's error (its traceback) in an answer
TAIL_CHARS = 2000  # of an ended unit's output in a notice
KILL_SETTLE = 5.0  # seconds kill waits for the end it caused, to answer with it


class ToolFailure(Exception):
    """What the model gets as the tool's error: one sentence it can act on."""

    def __init__(self, sentence: str, units: list[str] | None = None) -> None:
        super().__init__(sentence)
        self.units = units or []


@dataclass(frozen=True, slots=True)
class Answer:
    data: dict[str, Any]
    text: str
    units: list[str]


@dataclass
class _Started:
    """How this server started a unit, so ``restart`` can start it again."""

    tool: str
    args: dict[str, Any]


@dataclass
class Tools:
    fleet: Fleet
    desk: NoticeDesk
    limits: Limits
    policy: sandbox.Policy
    targets: frozenset[str]
    workspace: Path
    _mine: dict[str, _Started] = field(default_factory=dict)  # how it started them
    _live: set[str] = field(default_factory=set)  # those not yet seen ended

    async def call(self, name: str, args: dict[str, Any], session: str) -> Answer:
        handler: Callable[[dict[str, Any], str], Awaitable[Answer]] | None = getattr(
            self, f"_{name}", None
        )
        if handler is None:
            raise ToolFailure(f"no tool {name!r}: the tool list names the ones there are")
        try:
            return await handler(args, session)
        except ToolFailure:
            raise
        except sandbox.SandboxRefused as exc:
            raise ToolFailure(str(exc)) from None
        except InvalidWorkId as exc:
            raise ToolFailure(f"{exc}: use an ID that start_shell or list_units gave") from None
        except UnknownWork as exc:
            raise ToolFailure(f"{exc}: list_units shows the units there are") from None
        except IdempotencyConflict as exc:
            raise ToolFailure(f"{exc}: use another key, or the same arguments") from None
        except (WorkunitsError, ValueError) as exc:
            raise ToolFailure(str(exc)) from None

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    # -- starting ------------------------------------------------------------------

    async def _start_shell(self, args: dict[str, Any], session: str) -> Answer:
        command = _text(args, "command")
        policy, cwd = self._confine(args)
        extra = sandbox.submit_options(policy, carried=self.fleet.carries_sandbox)
        await self._room()
        work_id = await self._run(
            lambda: self.fleet.shell(
                command,
                cwd=str(cwd),
                timeout=args.get("timeout"),
                description=args.get("description"),
                key=args.get("key"),
                extra=extra,
            )
        )
        self._mine[work_id] = _Started("start_shell", dict(args))
        self._live.add(work_id)
        return await self._started(work_id, policy)

    async def _start_agent(self, args: dict[str, Any], session: str) -> Answer:
        target = _text(args, "target")
        if target not in self.targets:
            allowed = (
                ", ".join(sorted(self.targets)) or "none (the operator gave no --allow-target)"
            )
            raise ToolFailure(f"target {target!r} is not allowed here; allowed: {allowed}")
        policy, _cwd = self._confine(args)
        extra = sandbox.submit_options(policy, carried=self.fleet.carries_sandbox)
        await self._room()
        call_args = args.get("args") or []
        call_kwargs = args.get("kwargs") or {}
        work_id = await self._run(
            lambda: self.fleet.agent(
                target,
                call_args,
                call_kwargs,
                timeout=args.get("timeout"),
                description=args.get("description"),
                key=args.get("key"),
                extra=extra,
            )
        )
        self._mine[work_id] = _Started("start_agent", dict(args))
        self._live.add(work_id)
        return await self._started(work_id, policy)

    def _confine(self, args: dict[str, Any]) -> tuple[sandbox.Policy, Path]:
        policy = sandbox.requested(self.policy, args.get("sandbox"), args.get("workspace_dir"))
        cwd = (self.workspace / str(args.get("cwd") or ".")).resolve()
        sandbox.check_cwd(policy, cwd)
        return policy, cwd

    async def _room(self) -> None:
        """Refuse a start beyond ``max_running`` units of this server that have not ended."""
        for work_id in list(self._live):
            record = await self._run(self.fleet.get, work_id)
            if is_terminal(record.status):
                self._live.discard(work_id)
        running = len(self._live)
        if running >= self.limits.max_running:
            raise ToolFailure(
                f"{running} units this server started are still running, its limit: wait for "
                "one (wait_for) or kill one before starting another"
            )

    async def _started(self, work_id: str, policy: sandbox.Policy) -> Answer:
        record = await self._run(self.fleet.get, work_id)
        data = {**summary(record), "sandbox": policy.describe()}
        text = (
            f"started {work_id} ({record.status.value}). Read its output with "
            f"read_output(id='{work_id}'); wait for its end with wait_for(ids=['{work_id}'])."
        )
        return Answer(data, text, [work_id])

    # -- reading -------------------------------------------------------------------

    async def _list_units(self, args: dict[str, Any], session: str) -> Answer:
        limit = min(int(args.get("limit") or 50), MAX_PAGE)
        after = args.get("after")
        records = await self._run(self.fleet.list, args.get("status"), args.get("kind"))
        records.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        if after is not None:
            ids = [r.id for r in records]
            if after not in ids:
                raise ToolFailure(f"'after' {after!r} is not in this listing: start from the top")
            records = records[ids.index(after) + 1 :]
        page, rest = records[:limit], records[limit:]
        data = {"units": [summary(r) for r in page], "next": page[-1].id if rest else None}
        lines = [_line(r) for r in page] or ["no units"]
        if rest:
            lines.append(f"... more: list_units(after='{page[-1].id}')")
        return Answer(data, "\n".join(lines), [r.id for r in page])

    async def _get_unit(self, args: dict[str, Any], session: str) -> Answer:
        record = await self._run(self.fleet.get, _id(args))
        return Answer(summary(record), _line(record), [record.id])

    async def _read_output(self, args: dict[str, Any], session: str) -> Answer:
        work_id = _id(args)
        offset = int(args.get("offset") or 0)
        got = await self._run(
            output.read, self.fleet, work_id, offset, self.limits.output(args.get("max_bytes"))
        )
        data = {
            "id": work_id,
            "offset": got.offset,
            "next_offset": got.next_offset,
            "more": not got.ended,
            "cut": got.cut,
            "missed": got.missed,
            "text": got.text,
        }
        notes = []
        if got.missed:
            notes.append(f"{got.missed} bytes before offset {got.offset} are no longer kept")
        if got.cut:
            notes.append(
                f"cut at {self.limits.max_output} bytes: read on with "
                f"read_output(id='{work_id}', offset={got.next_offset})"
            )
        elif got.ended:
            notes.append("the unit has ended: this is the end of its output")
        else:
            notes.append(f"still running: read on from offset {got.next_offset}")
        return Answer(data, got.text + "\n[" + "; ".join(notes) + "]", [work_id])

    async def _wait_for(self, args: dict[str, Any], session: str) -> Answer:
        ids = [_checked(i) for i in args.get("ids") or []]
        if not ids:
            raise ToolFailure("ids must name at least one unit")
        deadline = time.monotonic() + self.limits.wait(args.get("timeout"))
        delay = 0.005
        while True:
            records = [await self._run(self.fleet.get, i) for i in ids]
            ended = [r for r in records if is_terminal(r.status)]
            if ended or time.monotonic() >= deadline:
                break
            await anyio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.2)
        running = [r.id for r in records if not is_terminal(r.status)]
        data = {"ended": [summary(r) for r in ended], "running": running, "timed_out": not ended}
        text = "\n".join(_line(r) for r in ended) if ended else "none ended yet"
        if running:
            text += f"\nstill running: {', '.join(running)}"
        return Answer(data, text, ids)

    # -- acting --------------------------------------------------------------------

    async def _kill(self, args: dict[str, Any], session: str) -> Answer:
        work_id = _id(args)
        changed = await self._run(self.fleet.kill, work_id)
        if changed:  # its end follows in milliseconds: answer with it
            with anyio.move_on_after(min(self.limits.max_wait, KILL_SETTLE)):
                await self._ended(work_id)
        return await self._acted(work_id, changed, "killed")

    async def _cancel(self, args: dict[str, Any], session: str) -> Answer:
        work_id = _id(args)
        changed = await self._run(self.fleet.cancel, work_id, float(args.get("grace", 5.0)))
        return await self._acted(work_id, changed, "cancelled")

    async def _acted(self, work_id: str, changed: bool, verb: str) -> Answer:
        record = await self._run(self.fleet.get, work_id)
        text = f"{work_id} {verb}" if changed else f"{work_id} had already ended"
        return Answer(
            {"changed": changed, **summary(record)}, f"{text}: {_line(record)}", [work_id]
        )

    async def _signal(self, args: dict[str, Any], session: str) -> Answer:
        work_id = _id(args)
        name = _text(args, "name")
        kept = await self._run(self.fleet.signal, work_id, name, args.get("value"))
        if not kept:
            raise ToolFailure(f"{work_id} has ended: no signal is kept for it", [work_id])
        return Answer(
            {"delivered": True, "id": work_id}, f"signal {name!r} kept for {work_id}", [work_id]
        )

    async def _retry(self, args: dict[str, Any], session: str) -> Answer:
        work_id = _id(args)
        again = await self._run(self.fleet.retry, work_id)
        self._live.add(again)
        if work_id in self._mine:
            self._mine[again] = self._mine[work_id]
        record = await self._run(self.fleet.get, again)
        return Answer(
            summary(record), f"{again} retries {work_id}: {_line(record)}", [work_id, again]
        )

    async def _restart(self, args: dict[str, Any], session: str) -> Answer:
        work_id = _id(args)
        record = await self._run(self.fleet.get, work_id)
        if not is_terminal(record.status):
            await self._run(self.fleet.kill, work_id)
            record = await self._ended(work_id)
        started = self._mine.get(work_id)
        if record.status is not Status.COMPLETED:
            try:
                again = await self._run(self.fleet.retry, work_id)
            except NotRetryable:
                if started is None:
                    raise
            else:
                self._live.add(again)
                if started is not None:
                    self._mine[again] = started
                return await self._restarted(work_id, again)
        if started is None:
            raise ToolFailure(
                f"{work_id} completed and was not started by this server, which does not know "
                "its command: start it anew with start_shell",
                [work_id],
            )
        description = f"restart of {work_id}: " + (
            started.args.get("description") or record.description
        )
        args_again = {**started.args, "description": description[:500]}
        args_again.pop("key", None)  # the old unit's key names the old unit
        answer = await self.call(started.tool, args_again, "")
        return await self._restarted(work_id, answer.units[0])

    async def _ended(self, work_id: str) -> WorkRecord:
        deadline = time.monotonic() + self.limits.max_wait
        while True:
            record: WorkRecord = await self._run(self.fleet.get, work_id)
            if is_terminal(record.status):
                return record
            if time.monotonic() >= deadline:
                raise ToolFailure(
                    f"{work_id} was killed but has not ended yet: try again", [work_id]
                )
            await anyio.sleep(0.01)

    async def _restarted(self, old: str, new: str) -> Answer:
        record = await self._run(self.fleet.get, new)
        data = {**summary(record), "restart_of": old}
        return Answer(data, f"{new} restarts {old}: {_line(record)}", [old, new])

    # -- notices -------------------------------------------------------------------

    async def _take_notices(self, args: dict[str, Any], session: str) -> Answer:
        most = min(int(args.get("max") or 20), MAX_NOTICES)
        notices, acked = await self.desk.take(session, most, self.limits.wait(args.get("wait", 0)))
        shown = [notice_data(n) for n in notices]
        lines = [_notice_line(n) for n in notices] or ["no new ends"]
        if acked:
            lines.append(f"(acknowledged the previous batch: {', '.join(acked)})")
        data = {"notices": shown, "acknowledged": acked}
        return Answer(data, "\n".join(lines), [n.id for n in notices] + acked)

    async def _ack_notices(self, args: dict[str, Any], session: str) -> Answer:
        ids = args.get("ids")
        held = self.desk.held(session)
        acked = await self.desk.ack(session, None if ids is None else [_checked(i) for i in ids])
        missing = [] if ids is None else [i for i in ids if i not in held]
        data = {"acknowledged": acked, "not_held": missing}
        text = f"acknowledged {len(acked)}" + (
            f"; not held by this session: {missing}" if missing else ""
        )
        return Answer(data, text, acked)

    # -- output search -------------------------------------------------------------

    async def _wait_for_output(self, args: dict[str, Any], session: str) -> Answer:
        work_id = _id(args)
        pattern = output.compile_pattern(_text(args, "pattern"))
        offset = int(args.get("offset") or 0)
        deadline = time.monotonic() + self.limits.wait(args.get("timeout"))
        delay = 0.005
        while True:
            matches, offset, ended, _missed = await self._run(
                output.scan, self.fleet, work_id, pattern, offset, 1, 64 << 20
            )
            if matches:
                found = matches[0]
                data = {
                    "matched": True,
                    "offset": found.offset,
                    "line": found.line,
                    "next_offset": offset,
                    "ended": False,
                }
                return Answer(data, f"matched at offset {found.offset}: {found.line}", [work_id])
            if ended or time.monotonic() >= deadline:
                break
            await anyio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.2)
        record = await self._run(self.fleet.get, work_id)
        why = "the unit ended" if ended else "the time ran out"
        data = {"matched": False, "next_offset": offset, "ended": ended, **summary(record)}
        return Answer(data, f"no line matched; {why}: {_line(record)}", [work_id])

    async def _search_output(self, args: dict[str, Any], session: str) -> Answer:
        work_id = _id(args)
        pattern = output.compile_pattern(_text(args, "pattern"))
        most = min(int(args.get("max_matches") or 20), output.MAX_MATCHES)
        matches, scanned, ended, missed = await self._run(
            output.scan, self.fleet, work_id, pattern, int(args.get("offset") or 0), most, 256 << 20
        )
        data = {
            "matches": [{"offset": m.offset, "line": m.line} for m in matches],
            "scanned_to": scanned,
            "complete": ended,
            "missed": missed,
        }
        lines = [f"{m.offset}: {m.line}" for m in matches] or ["no line matched"]
        if len(matches) >= most:
            lines.append(f"... more may follow: search again with offset={scanned}")
        if missed:
            lines.append(f"({missed} bytes at the start are no longer kept and were not searched)")
        return Answer(data, "\n".join(lines), [work_id])


# -- rendering -----------------------------------------------------------------------


def summary(record: WorkRecord) -> dict[str, Any]:
    """A unit as a model reads it: what it is, how it is or how it ended."""
    data: dict[str, Any] = {
        "id": record.id,
        "kind": record.kind,
        "status": "expired" if record.expired_at is not None else record.status.value,
        "description": record.description,
        "created_at": record.created_at,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "attempt": record.attempt,
        "output_bytes": record.output_bytes,
    }
    optional = {
        "exit_code": record.exit_code,
        "signal": record.signal,
        "reason": None if record.reason is None else str(record.reason.value),
        "error": None if record.error is None else record.error[-ERROR_CHARS:],
        "progress": record.progress,
        "progress_message": record.progress_message or None,
        "retry_of": record.retry_of,
        "parent": record.parent,
    }
    data.update({k: v for k, v in optional.items() if v is not None})
    return data


def _line(record: WorkRecord) -> str:
    parts = [record.id, record.status.value]
    if record.exit_code is not None:
        parts.append(f"exit {record.exit_code}")
    if record.signal is not None:
        parts.append(f"signal {record.signal}")
    if record.reason is not None:
        parts.append(f"reason {record.reason.value}")
    parts.append(repr(record.description[:120]))
    return " ".join(parts)


def notice_data(notice: Notification | MonitorEvent) -> dict[str, Any]:
    if isinstance(notice, MonitorEvent):
        return {"id": notice.id, "event": "monitor", "line": notice.line, "at": notice.at}
    data: dict[str, Any] = {
        "id": notice.id,
        "kind": notice.kind,
        "status": notice.status.value,
        "description": notice.description,
        "ended_at": notice.ended_at,
        "redelivered": notice.redelivered,
        "output_tail": notice.output_tail.decode("utf-8", "replace")[-TAIL_CHARS:],
    }
    for name in ("exit_code", "signal", "error"):
        value = getattr(notice, name)
        if value is not None:
            data[name] = value[-ERROR_CHARS:] if isinstance(value, str) else value
    if notice.reason is not None:
        data["reason"] = str(notice.reason.value)
    return data


def _notice_line(notice: Notification | MonitorEvent) -> str:
    data = notice_data(notice)
    return orjson.dumps(data).decode()


def _text(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value:
        raise ToolFailure(f"{name} must be a non-empty string")
    return value


def _id(args: dict[str, Any]) -> str:
    return _checked(args.get("id"))


def _checked(value: object) -> str:
    if not isinstance(value, str) or not is_valid(value):
        raise ToolFailure(
            f"{value!r} is not a unit ID like b4k2x9q0m: use an ID that start_shell, "
            "start_agent or list_units gave"
        )
    return value
