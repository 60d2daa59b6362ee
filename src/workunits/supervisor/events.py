"""``Supervisor.events(id, after=...)``: one unit's changes and output, read from a cursor.

Followers other than the unit's own reader (the HTTP API's event streams, a web
view) must not move the record's ``output_offset``, and must be able to go away
and come back without losing or repeating anything. So an event stream here is
two independent sequences, and a :class:`Cursor` holds a position in each:

- ``seq``: the unit's *journal* of record changes (status and progress) and of
  its saved checkpoints, numbered from 1 per unit, fed by the supervisor actor's
  change and checkpoint subscriptions. The
  journal keeps the last ``PER_UNIT`` changes of the last ``UNITS`` units;
  a cursor older than that is answered with a fresh ``status`` snapshot (the
  record as it is now), which is also what a follower with no cursor gets first.
- ``offset``: bytes of output delivered (of ``attempt``'s output: a resumed shell
  starts a new file, read from 0). Output is read from the unit's files by
  offset (an agent's transcript or a shell's log, else its output file), never
  through the record's own offset. Once the file is gone (a shell's ends with it),
  what is left is the stored tail (the last 64 KiB): a ``gap`` event names the
  bytes no longer held, then the tail follows.

A follower that reads a live unit in batches (an HTTP event stream) holds the
unit's output file open between them (:class:`OutputHold`): a shell's file is
removed at its end, and without the hold a unit that wrote faster than the
batches and then ended would leave the follower a ``gap``, though it was there
all along.

When the unit is terminal and every byte up to ``output_bytes`` was delivered,
the batch ends with one ``end`` event. Threads: ``on_change`` runs in the
supervisor actor's thread and does O(1) work under the lock; everything else
runs in the caller's thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workunits._core.errors import InvalidArgument
from workunits._core.record import WorkRecord
from workunits._core.status import is_terminal
from workunits._util import outputfile

PER_UNIT = 1024
"""Changes kept per unit: a follower that falls further behind gets a snapshot."""
UNITS = 4096
"""Units whose journal is kept (least recently changed leave first)."""
CHUNK = 64 << 10
"""Most output bytes one ``events`` call reads."""
CHECKPOINT_INLINE = 4 << 10
"""A ``checkpoint`` event carries the state itself up to this many bytes of JSON."""

_CURSOR_RE = re.compile(r"(\d{1,18})-(\d{1,18})(?:-(\d{1,9})(?:-([1-4]))?)?")

# The parts of a snapshot, in the order they are sent; a cursor's ``part`` is the
# last one delivered, so each has an ID of its own and a resume continues after it.
STATUS, PROGRESS, CHECKPOINT, END = 1, 2, 3, 4
_PARTS = {"status": STATUS, "progress": PROGRESS, "checkpoint": CHECKPOINT}


@dataclass(frozen=True, slots=True, order=True)
class Cursor:
    """A position in a unit's event stream; ``str(cursor)`` is ``"<seq>-<offset>"``,
    or ``"<seq>-<offset>-<attempt>"`` once it knows whose output the offset counts,
    and ``"<seq>-<offset>-<attempt>-<part>"`` inside a snapshot (``part``: its last
    event delivered, status 1, progress 2, checkpoint 3) or after the ``end`` (4).

    ``attempt`` 0 is a cursor that does not say (one written before it was kept).
    Every event of a stream has a cursor of its own, so a client resuming from
    any event's ID gets every later event once.
    """

    seq: int = 0
    offset: int = 0
    attempt: int = 0
    part: int = 0

    def __str__(self) -> str:
        if self.part:
            return f"{self.seq}-{self.offset}-{self.attempt}-{self.part}"
        if self.attempt:
            return f"{self.seq}-{self.offset}-{self.attempt}"
        return f"{self.seq}-{self.offset}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor an event's ``id`` names; InvalidArgument for anything else."""
        match = _CURSOR_RE.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise InvalidArgument(f"{text!r} is not an event cursor like '12-4096-1'")
        return cls(int(match[1]), int(match[2]), int(match[3] or 0), int(match[4] or 0))


class OutputHold:
    """A follower's open descriptor of one unit's output, kept from read to read.

    Opened at the first read that finds the file, so a stream that starts
    before the unit writes holds it all the same; closed by ``close`` (or, for
    a follower that never got to close it, when the hold is collected).
    """

    def __init__(self, work_id: str) -> None:
        self.work_id = work_id
        self._fd: int | None = None
        self._closed = False
        self._lock = threading.Lock()  # guards _fd and _closed: an open or a close
        self._finalizer = weakref.finalize(self, _close_quietly, [None])

    def fd(self, opener: Callable[[str, WorkRecord], int | None], record: WorkRecord) -> int | None:
        with self._lock:
            if self._fd is None and not self._closed:
                self._fd = opener(self.work_id, record)
                if self._fd is not None:
                    self._finalizer.detach()
                    self._finalizer = weakref.finalize(self, _close_quietly, [self._fd])
            return self._fd

    def close(self) -> None:
        with self._lock:
            fd, self._fd, self._closed = self._fd, None, True
            self._finalizer.detach()
        if fd is not None:
            _close_quietly([fd])


def _close_quietly(fds: list[int | None]) -> None:
    for fd in fds:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass(frozen=True, slots=True)
class UnitEvent:
    """One event: ``type`` is status, progress, checkpoint, output, gap or end; ``cursor``
    is the position after it."""

    type: str
    cursor: Cursor
    data: dict[str, Any] = field(default_factory=dict)
    output: bytes = b""


@dataclass(frozen=True, slots=True)
class EventBatch:
    """What one ``events`` call read: the events, the cursor after them, and the record."""

    events: list[UnitEvent]
    cursor: Cursor
    record: WorkRecord
    ended: bool


def record_fields(record: WorkRecord) -> dict[str, Any]:
    """The parts of a record a status or end event carries."""
    return {
        "status": record.status.value,
        "progress": record.progress,
        "message": record.progress_message,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "exit_code": record.exit_code,
        "reason": None if record.reason is None else record.reason.value,
        "error": record.error,
        "output_bytes": record.output_bytes,
        "attempt": record.attempt,
    }


class _UnitJournal:
    __slots__ = ("changes", "last", "listeners", "seq")

    def __init__(self) -> None:
        self.seq = 0
        self.changes: deque[tuple[int, str, dict[str, Any]]] = deque(maxlen=PER_UNIT)
        self.last: WorkRecord | None = None
        self.listeners: list[Callable[[], None]] = []


class EventFeed:
    """The journal of every unit's changes, and reads of events from a cursor."""

    def __init__(self, state_dir: Path, get: Callable[[str], WorkRecord]) -> None:
        self._state_dir = state_dir
        self._get = get
        self._lock = threading.Lock()  # guards _units and every _UnitJournal in it
        self._units: OrderedDict[str, _UnitJournal] = OrderedDict()
        self.ended: Counter[str] = Counter()  # terminal transitions seen, by status
        # Called with each changed unit's ID (the actor's thread; O(1) only): a view
        # of the whole fleet hears of changes instead of reading lists again.
        self._everyone: list[Callable[[str], None]] = []

    # -- the supervisor actor's thread ----------------------------------------------

    def on_change(self, old: WorkRecord | None, new: WorkRecord) -> None:
        """Change subscriber: journal status and progress changes; O(1), never blocks."""
        changes: list[tuple[str, dict[str, Any]]] = []
        if old is None or old.status != new.status:
            changes.append(("status", record_fields(new)))
            if is_terminal(new.status) and (old is None or not is_terminal(old.status)):
                self.ended[new.status.value] += 1
        moved = old is None or (old.progress, old.progress_message) != (
            new.progress,
            new.progress_message,
        )
        if moved and (new.progress is not None or new.progress_message):
            data = {"value": new.progress, "message": new.progress_message, "at": new.progress_at}
            changes.append(("progress", data))
        self._journal(new.id, changes, new)

    def on_checkpoint(self, work_id: str, attempt: int, state: bytes) -> None:
        """Checkpoint subscriber: journal a ``checkpoint`` event; O(size of a small state).

        The event names the attempt and the state's size, and carries the state
        itself when it is at most ``CHECKPOINT_INLINE`` bytes of JSON.
        """
        data: dict[str, Any] = {"attempt": attempt, "bytes": len(state), "at": time.time()}
        if len(state) <= CHECKPOINT_INLINE:
            data["state"] = json.loads(state)
        self._journal(work_id, [("checkpoint", data)], None)

    def _journal(
        self, work_id: str, changes: list[tuple[str, dict[str, Any]]], last: WorkRecord | None
    ) -> None:
        with self._lock:
            journal = self._units.get(work_id)
            if journal is None:
                journal = self._units[work_id] = _UnitJournal()
                while len(self._units) > UNITS:
                    self._units.popitem(last=False)
            else:
                self._units.move_to_end(work_id)
            if last is not None:
                journal.last = last
            for kind, data in changes:
                journal.seq += 1
                journal.changes.append((journal.seq, kind, data))
            listeners = list(journal.listeners)
            everyone = list(self._everyone)
        for listener in listeners:  # they only wake someone (loop.call_soon_threadsafe)
            listener()
        for hears in everyone:
            hears(work_id)

    # -- callers' threads -------------------------------------------------------------

    def listen(self, work_id: str, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` (from the actor's thread: O(1) only) at each change of the
        unit; returns the function that stops it. Output does not call it: poll for that."""
        with self._lock:
            journal = self._units.get(work_id)
            if journal is None:
                journal = self._units[work_id] = _UnitJournal()
            journal.listeners.append(listener)

        def stop() -> None:
            with self._lock:
                found = self._units.get(work_id)
                if found is not None and listener in found.listeners:
                    found.listeners.remove(listener)

        return stop

    def history(self, work_id: str) -> list[tuple[str, dict[str, Any]]]:
        """The unit's journal as it is kept (its last ``PER_UNIT`` changes), oldest first."""
        with self._lock:
            journal = self._units.get(work_id)
            return [] if journal is None else [(kind, data) for _, kind, data in journal.changes]

    def listen_all(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(work_id)`` (from the actor's thread: O(1) only) at every unit's
        change; returns the function that stops it."""
        with self._lock:
            self._everyone.append(listener)

        def stop() -> None:
            with self._lock:
                if listener in self._everyone:
                    self._everyone.remove(listener)

        return stop

    def read(
        self,
        work_id: str,
        after: Cursor | None,
        max_bytes: int = CHUNK,
        hold: OutputHold | None = None,
    ) -> EventBatch:
        """The events after ``after`` (None: from the start, with a status snapshot).

        ``hold``: the follower's open output file, read instead of opening it again.
        """
        with self._lock:
            journal = self._units.get(work_id)
            record = None if journal is None else journal.last
            last_seq = 0 if journal is None else journal.seq
            first_kept = (
                last_seq + 1 if journal is None or not journal.changes else journal.changes[0][0]
            )
            changes = [] if journal is None else list(journal.changes)
        if record is None:
            record = self._get(work_id)  # from memory or the ledger; raises for unknown IDs
        events: list[UnitEvent] = []
        attempt = record.attempt
        offset = 0 if after is None else after.offset
        if after is not None and after.attempt not in (0, attempt) and not self._kept(work_id):
            # Another attempt's output (it resumed), in a file that is gone: that offset
            # counts none of this attempt's bytes, whose output is read from its start.
            # (A transcript or a kept log goes on across attempts: its offsets hold.)
            offset, after = 0, None
        if after is not None and after.part == END:
            # Everything, its end included, was delivered: nothing follows an end.
            at = Cursor(after.seq, after.offset, attempt, END)
            return EventBatch([], at, record, is_terminal(record.status))
        if after is None or after.seq > last_seq or after.seq + 1 < first_kept:
            # No cursor, or one this journal cannot continue: start from how it is now.
            seq = last_seq
            events += self._snapshot(record, changes, seq, offset, 0)
        else:
            # The parts of a snapshot not delivered yet (as they are now: a kind that
            # changed since comes below, from the journal), then the journal's changes.
            seq = after.seq
            newer = {kind for number, kind, _ in changes if number > seq}
            rest = self._snapshot(record, changes, seq, offset, after.part) if after.part else []
            events += [ev for ev in rest if ev.type not in newer]
            for number, kind, data in changes:
                if number > seq:
                    seq = number
                    events.append(UnitEvent(kind, Cursor(seq, offset, attempt), data))
        ended = is_terminal(record.status)
        offset = self._read_output(work_id, record, ended, seq, offset, max_bytes, events, hold)
        done = ended and offset >= record.output_bytes
        if done:
            end = Cursor(seq, offset, attempt, END)
            events.append(UnitEvent("end", end, record_fields(record)))
            return EventBatch(events, end, record, done)
        last = events[-1].cursor if events else None
        at = last if last is not None and last.part else Cursor(seq, offset, attempt)
        return EventBatch(events, at, record, done)

    @staticmethod
    def _snapshot(
        record: WorkRecord,
        changes: list[tuple[int, str, dict[str, Any]]],
        seq: int,
        offset: int,
        after_part: int,
    ) -> list[UnitEvent]:
        """How the unit is now, as status, progress and checkpoint events after part
        ``after_part``, each with a cursor of its own (see ``Cursor``)."""
        attempt = record.attempt
        parts: list[tuple[str, dict[str, Any]]] = [("status", record_fields(record))]
        if record.progress is not None or record.progress_message:
            parts.append(
                ("progress", {"value": record.progress, "message": record.progress_message})
            )
        # What it saved last, as a follower there all along saw it: a snapshot
        # is how the unit is now, its checkpoint included.
        last = next((c for c in reversed(changes) if c[1] == "checkpoint"), None)
        if last is not None:
            parts.append(("checkpoint", last[2]))
        return [
            UnitEvent(kind, Cursor(seq, offset, attempt, _PARTS[kind]), data)
            for kind, data in parts
            if _PARTS[kind] > after_part
        ]

    def _read_output(  # noqa: PLR0917 - private, called once
        self,
        work_id: str,
        record: WorkRecord,
        ended: bool,
        seq: int,
        offset: int,
        max_bytes: int,
        events: list[UnitEvent],
        hold: OutputHold | None,
    ) -> int:
        fd = self._open(work_id, record) if hold is None else hold.fd(self._open, record)
        if fd is None and ended:
            # The file went with the unit's end: only the stored tail is left.
            start = record.output_bytes - len(record.output_tail)
            if offset < start:
                gap = {"from": offset, "to": start}
                events.append(UnitEvent("gap", Cursor(seq, start, record.attempt), gap))
                offset = start
            data = record.output_tail[offset - start : offset - start + max_bytes]
        elif fd is None:
            return offset
        else:
            try:
                limit = max_bytes
                if ended:  # the file may be a kept log: nothing past the final count
                    limit = max(0, min(limit, record.output_bytes - offset))
                data = outputfile.read_delta(fd, offset, limit) if limit else b""
            finally:
                if hold is None:
                    os.close(fd)
        if data:
            offset += len(data)
            events.append(UnitEvent("output", Cursor(seq, offset, record.attempt), {}, data))
        return offset

    def _kept(self, work_id: str) -> bool:
        """Whether the unit's output is a file that every attempt appends to."""
        return any(os.path.lexists(p) for p in outputfile.kept_paths(self._state_dir, work_id))

    def _open(self, work_id: str, record: WorkRecord) -> int | None:
        # An agent's transcript and a shell's log outlive it; other files go at its end.
        for path in (*outputfile.kept_paths(self._state_dir, work_id), record.output_path):
            if path is not None:
                fd = outputfile.open_for_reading(path)
                if fd is not None:
                    return fd
        return None
