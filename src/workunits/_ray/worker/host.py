"""``TeammateHost``: the Ray actor that holds a remote teammate, in its own Ray worker.

The teammate behaves as a local one (``runtime.teammate.serve``): its messages
are handled one at a time, in the order they were sent, by ``on_receive`` (or
the method a proxy names); an exception from an ask goes back to the asker,
one from a tell fails the teammate; ``stop`` ends it ``completed`` with what
``on_stop()`` returns; after a cancel no queued message is handled.

The host's methods run in three single-thread concurrency groups so that none
waits behind another:

- ``life``: ``run``, the unit's stream (a generator as long-lived as the unit);
- ``mail``: ``post`` and ``stop`` only queue; a group of one keeps the order in
  which the supervisor sent them;
- ``control``: ``cancel``, which must not wait behind the mail.

The handlers run in a fourth thread, ``workunits-teammate``, which takes the
queue in order. Answers go up the same stream as the teammate's output, so an
asker's answer never overtakes what the handler printed before it.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import cloudpickle
import orjson

from workunits._ray.worker.capture import FdCapture
from workunits._ray.worker.context import RemoteContext
from workunits._ray.worker.frames import RemoteCall, Returned
from workunits._ray.worker.outbox import Outbox
from workunits._ray.worker.task import encode_error, encode_result, installed, started
from workunits._unit.context import pickle_error

# The same dispatch (on_receive / proxy calls) and answer encoding as a local teammate.
from workunits._unit.teammate import _dispatch, _encode_answer
from workunits._wire import frames as m

HOST_CONCURRENCY = {"life": 1, "mail": 1, "control": 1}


class TeammateHost:
    def __init__(self, call: RemoteCall) -> None:
        self._call = call
        self._outbox = Outbox()
        self._ctx = RemoteContext(
            work_id=call.unit_id,
            kind=call.kind,
            attempt=call.attempt,
            last_checkpoint=None if call.checkpoint is None else orjson.loads(call.checkpoint),
            outbox=self._outbox,
        )
        # Messages, then None once stopping: the handler thread ends at the None.
        self._inbox: queue.SimpleQueue[m.Deliver | None] = queue.SimpleQueue()
        # Guards _accepting, so nothing lands in the inbox after the None that ends
        # the handler; held for O(1) work (a flag and a SimpleQueue put).
        self._lock = threading.Lock()
        self._accepting = True  # Invariant: False exactly when a None is in the inbox.

    # -- mail group -------------------------------------------------------------------

    def post(self, token: int, message: bytes, ask: bool) -> bool:
        """Queue a message; False when the teammate is stopping or has ended."""
        with self._lock:
            if not self._accepting:
                return False
            self._inbox.put(m.Deliver(token, message, ask))
            return True

    def stop(self) -> bool:
        """Stop after the messages queued before this; False if already stopping."""
        return self._close_inbox()

    # -- control group ------------------------------------------------------------------

    def cancel(self) -> None:
        """Cooperative cancel: ``ctx.cancelled`` turns true, no further message is handled."""
        self._ctx.request_cancel()
        self._close_inbox()

    def _close_inbox(self) -> bool:
        with self._lock:
            if not self._accepting:
                return False
            self._accepting = False
            self._inbox.put(None)
            return True

    # -- life group ---------------------------------------------------------------------

    def run(self) -> Iterator[list[Any]]:
        """The unit's stream: the teammate's output, events and answers, until it ends."""
        with installed(self._ctx):
            capture = FdCapture(self._outbox)
            capture.start()
            self._outbox.put(started())
            handler = threading.Thread(
                target=self._serve, args=(capture,), name="workunits-teammate", daemon=True
            )
            handler.start()
            yield from self._outbox.batches()
            handler.join()

    def _serve(self, capture: FdCapture) -> None:
        """The handler thread: build the instance, handle messages in order, then end."""
        final: Returned | m.Error
        try:
            cls, args, kwargs = cloudpickle.loads(self._call.payload)
            instance = cls(*args, **kwargs)
            while True:
                delivery = self._inbox.get()
                # Checked before every message, as for a local teammate: after a
                # cancel no queued message is handled.
                self._ctx.raise_if_cancelled()
                if delivery is None:
                    on_stop = getattr(instance, "on_stop", None)
                    final = encode_result(on_stop() if callable(on_stop) else None)
                    break
                self._handle(instance, delivery)
        except BaseException as exc:  # noqa: BLE001 - every failure of user code is reported
            final = encode_error(exc)
        finally:
            self._close_inbox()
            capture.stop()
        self._outbox.put(final)
        self._outbox.close()

    def _handle(self, instance: Any, delivery: m.Deliver) -> None:
        try:
            value = _dispatch(instance, cloudpickle.loads(delivery.message))
        except Exception as exc:
            if not delivery.ask:
                raise  # nobody to tell: the teammate fails with it
            raised = m.Error(
                type(exc).__qualname__, str(exc), traceback.format_exc(), pickle_error(exc)
            )
            self._outbox.put(m.Answer(delivery.token, None, raised))
            return
        if delivery.ask:
            result, error = _encode_answer(value)
            self._outbox.put(m.Answer(delivery.token, result, error))
