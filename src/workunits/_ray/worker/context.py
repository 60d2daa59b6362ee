"""``wu.current()`` inside a remote unit: the same surface as a local unit's context.

Runs inside a Ray worker. Progress, checkpoints and events become frames in the
unit's ``Outbox`` (the supervisor writes them into the local transcript). A
cancel request is learnt from the supervisor's ``CancelBoard`` actor, and only
when the unit's code asks (``cancelled``, ``progress``, ``checkpoint``): a unit
that never looks costs the board nothing. The task is given the board's name,
not its handle: a handle among a task's arguments costs every task 0.2-0.6 ms
(Ray registers it in the worker), so the handle is looked up by name at a
worker's first look, and kept for the tasks that worker runs next.

``RemoteContext`` subclasses ``UnitContext`` so that ``wu.current()`` keeps one
return type for user code; it shares none of its channel state (there is no
channel to the supervisor here) and overrides what would use it. Starting
child units from a remote unit is not supported yet: those methods raise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import orjson

from workunits._core.errors import SpecError
from workunits._ray.worker.frames import Emitted
from workunits._ray.worker.outbox import Outbox
from workunits._unit.context import UnitContext
from workunits._util import strictjson
from workunits._wire import frames as m

BOARD_POLL_EVERY = 0.005
"""Seconds between two looks at the cancel board (each look is a local ``ray.wait``)."""

BOARD_WAIT = 30.0
"""How long one long-poll on the board lasts before it is renewed (bounds its state)."""

# This worker process's handles to cancel boards, by name (one per supervisor it
# has run units for), the oldest dropped past _MAX_BOARDS: a long-lived worker of a
# shared cluster outlives many supervisors. Guarded by _boards_lock, held for dict work.
_boards: dict[str, Any] = {}
_boards_lock = threading.Lock()
_MAX_BOARDS = 16


def board_named(name: str) -> Any | None:
    """The cancel board called ``name``, looked up once per worker; None if it is gone."""
    with _boards_lock:
        board = _boards.get(name)
    if board is not None:
        return board
    import ray  # noqa: PLC0415 - only ever runs inside a Ray worker

    try:
        board = ray.get_actor(name)
    except ValueError:  # no such actor: its supervisor has closed
        return None
    with _boards_lock:
        if name not in _boards and len(_boards) >= _MAX_BOARDS:
            del _boards[next(iter(_boards))]  # the oldest: dicts keep insertion order
        return _boards.setdefault(name, board)


class RemoteContext(UnitContext):
    def __init__(
        self,
        *,
        work_id: str,
        kind: str,
        attempt: int,
        last_checkpoint: Any,
        outbox: Outbox,
        board: str | None = None,  # the CancelBoard's name; None when cancels arrive by call
        board_key: str = "",
    ) -> None:
        # Deliberately not UnitContext.__init__: it sets up a socket channel that
        # does not exist in a Ray worker.
        self.id = work_id
        self.kind = kind
        self.attempt = attempt
        self.last_checkpoint = last_checkpoint
        self._outbox = outbox
        self._board_name = board
        self._board: Any = None  # its handle, once a look needed it
        self._board_key = board_key
        self._cancel = threading.Event()
        # Guards _board, _board_watch and _board_next: one poll of the cancel board at
        # a time. Held for a non-blocking check (ray.wait with timeout 0, a get of a
        # ready result) and the submit of the next wait, never for a blocking call.
        self._board_lock = threading.Lock()
        self._board_watch: Any = None  # the pending long-poll's ObjectRef
        self._board_next = 0.0

    def raise_if_cancelled(self) -> None:
        """Raise ``wu.Cancelled`` if a cancel was requested (a remote teammate's loop)."""
        self._raise_if_cancelled()

    def request_cancel(self) -> None:
        """A cancel that arrived by a direct call (a remote teammate's host)."""
        self._cancel.set()

    # -- progress, checkpoints, cancel -------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once a cancel was requested; the next progress()/checkpoint() raises."""
        if not self._cancel.is_set():
            self._poll_board()
        return self._cancel.is_set()

    def _poll_board(self) -> None:
        """Look at the long-poll on the board without blocking; renew it when it ran out."""
        board = self._board if self._board is not None else self._find_board()
        if board is None:
            return
        import ray  # noqa: PLC0415 - only ever runs inside a Ray worker

        with self._board_lock:
            if self._board is None:  # another thread's look found the board gone
                return
            now = time.monotonic()
            if now < self._board_next:
                return
            self._board_next = now + BOARD_POLL_EVERY
            if self._board_watch is not None:
                ready, _ = ray.wait([self._board_watch], timeout=0)
                if not ready:
                    return
                try:
                    hit = bool(ray.get(ready[0]))
                except ray.exceptions.RayError:
                    # The board is gone: cooperative cancel is off, the forced one still works.
                    self._board = self._board_name = None
                    return
                if hit:
                    self._cancel.set()
                    return
            self._board_watch = board.wait.remote(self._board_key, BOARD_WAIT)

    def _find_board(self) -> Any:
        """The board's handle at this unit's first look, or None when it has none.

        Outside ``_board_lock``: a worker's first look is an RPC.
        """
        name = self._board_name
        if name is None:
            return None
        board = board_named(name)
        if board is None:  # gone: cooperative cancel is off, the forced one still works
            self._board_name = None
        self._board = board
        return board

    def progress(self, fraction: float | None = None, message: str = "", **evidence: Any) -> None:
        """Report progress (0.0-1.0 or None), a message and evidence; raises Cancelled."""
        if fraction is not None and not (isinstance(fraction, int | float) and 0 <= fraction <= 1):
            raise SpecError(f"progress fraction must be between 0 and 1, got {fraction!r}")
        frac = None if fraction is None else float(fraction)
        if evidence:
            strictjson.dumps(evidence, "progress evidence")
        self._outbox.put(m.Progress(frac, str(message), evidence or None))
        self._raise_if_cancelled()

    def checkpoint(self, state: Any) -> None:
        """Save ``state`` (strict JSON) so a later attempt resumes from it; raises Cancelled."""
        data = strictjson.dumps(state, "checkpoint")
        self._outbox.put(m.Checkpoint(data))
        self.last_checkpoint = state
        self._raise_if_cancelled()

    def emit(self, event: Mapping[str, Any]) -> None:
        """Append an event of yours to the transcript (values JSON can't hold become repr)."""
        if not isinstance(event, Mapping):
            raise SpecError(f"an event is a mapping, got {type(event).__name__}")
        self._outbox.put(Emitted(orjson.dumps(dict(event), default=repr)))

    # -- what needs the supervisor's channel: not in a remote unit (yet) ----------
    #
    # Child units, messages to teammates by ID, children's mailboxes and workflow
    # steps all go through the agent channel's plumbing below; overriding the
    # plumbing (rather than each method) refuses any method built on it, also
    # those added to UnitContext later, with one clear error.

    def _no_channel(self) -> NoReturn:
        raise SpecError(
            f"{self.id} is a remote unit: child units, messages by ID, mailboxes and "
            "workflow steps are not available inside it (they need the supervisor's "
            "channel, which only local units have)"
        )

    def _request(self, make: Any, timeout: float | None = None) -> Any:
        self._no_channel()

    def _start_reader(self) -> None:
        self._no_channel()

    def send(self, message: Any) -> None:
        self._no_channel()

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._no_channel()

    def ended(self, work_id: str) -> bool:
        self._no_channel()
