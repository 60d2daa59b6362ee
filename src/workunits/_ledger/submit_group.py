"""Group commit of ``Units.submit`` across the threads of one process.

A supervisor groups its facade's submits in its actor (``supervisor.actor.submits``).
A client (``wu.connect``, the HTTP server's request threads, a script with a
thread pool) writes its submits to the ledger itself. Without this, each of
its threads would pay a fully synced commit of its own.

The classic leader and followers. A submit joins the queue. If no commit is
under way, it leads:
1. it takes everything queued (itself included) and commits it with one
   ``submit_many``, one fully synced transaction;
2. it hands each follower its own answer (its row, or its error);
3. if more submits queued meanwhile, it makes the first of them the next
   leader, and returns.

So the first of 8 threads commits alone, and the other 7 share the next
commit. Every submit still returns only once its row is durable, and each
keeps its own answer: an idempotency conflict or a bad spec fails that submit
alone. A failed transaction (a full disk) fails every submit of its group,
and none of them is written.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from workunits._core.errors import LedgerError, WorkunitsError, copy_to_raise
from workunits._ledger.rows import NewUnit, UnitRow

Answer = tuple[UnitRow, bool] | BaseException
SubmitMany = Callable[[Sequence[NewUnit]], Sequence[tuple[UnitRow, bool] | WorkunitsError]]

MAX_GROUP = 256  # a longer queue is committed in several groups


@dataclass(eq=False, slots=True)
class _Waiting:
    new: NewUnit
    ready: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to lead the next commit, not with an answer
    answer: Answer | None = None


class SubmitGroup:
    """Submits from several threads share fully synced commits; safe from any thread."""

    def __init__(self, submit_many: SubmitMany) -> None:
        self._submit_many = submit_many
        self._lock = threading.Lock()  # guards _queue and _leading
        self._queue: list[_Waiting] = []
        self._leading = False  # a thread is committing a group now
        self._pid = os.getpid()

    def submit(self, new: NewUnit) -> tuple[UnitRow, bool]:
        """Write ``new`` (in a group, when others submit at once); its row and whether it
        was created, as ``Units.submit`` returns them. Returns once the row is durable."""
        if os.getpid() != self._pid:
            # A forked child: a leader of the parent's may have been mid-commit, and
            # no thread of ours would ever answer. The ledger itself says what to do.
            (alone,) = self._submit_many([new])
            if isinstance(alone, BaseException):
                raise alone
            return alone
        me = _Waiting(new)
        with self._lock:
            self._queue.append(me)
            me.lead = not self._leading
            self._leading = True
        while True:
            if me.lead:
                me.lead = False
                self._commit_group()
            if me.answer is not None:
                break
            try:
                me.ready.wait()
            except BaseException:  # a signal's exception in this thread (Ctrl-C)
                self._leave(me)
                raise
            me.ready.clear()
        answer = me.answer
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _leave(self, me: _Waiting) -> None:
        """A waiting submit was interrupted: take it out of the queue (a group already
        being written keeps it), and pass the lead on if it had just been given it."""
        with self._lock:
            if me not in self._queue:
                return  # in the group being written: its leader answers nobody
            self._queue.remove(me)
            if not me.lead:
                return
            me.lead = False
            nxt = self._next_leader()
        if nxt is not None:
            nxt.ready.set()

    def _next_leader(self) -> _Waiting | None:
        """(Lock held.) Make the first queued submit the next leader; None, and nobody
        leads, when none waits. The caller wakes it once the lock is released."""
        nxt = self._queue[0] if self._queue else None
        self._leading = nxt is not None
        if nxt is not None:
            nxt.lead = True
        return nxt

    def _commit_group(self) -> None:
        """As the leader: commit what is queued, answer each submit, pass the lead on."""
        with self._lock:
            group, self._queue = self._queue[:MAX_GROUP], self._queue[MAX_GROUP:]
        interrupt: BaseException | None = None
        answers: Sequence[Answer]
        try:
            answers = self._submit_many([w.new for w in group])
        except Exception as exc:  # noqa: BLE001 - the transaction failed: every submit hears why
            answers = [copy_to_raise(exc) for _ in group]
        except BaseException as exc:  # noqa: BLE001 - an interrupt: re-raised below, once answered
            interrupt = exc
            answers = [_interrupted(exc) for _ in group]
        with self._lock:
            nxt = self._next_leader()
        for waiting, answer in zip(group, answers, strict=True):
            waiting.answer = answer
            waiting.ready.set()
        if nxt is not None:
            nxt.ready.set()
        if interrupt is not None:
            raise interrupt


def _interrupted(exc: BaseException) -> LedgerError:
    return LedgerError(
        f"the group commit of this submit was interrupted ({type(exc).__name__}) in the "
        f"thread that was writing it; it may or may not be in the ledger: submit it again "
        f"with the same key to find out"
    )
