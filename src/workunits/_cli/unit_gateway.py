"""A ``workunits`` command inside a unit: the unit's gateway, not the state dir's files.

The state dir is hidden from units (DESIGN invariant 15). A command run in
one finds the supervisor's gateway in its environment
(``_wire.gateway_protocol``) and speaks for the unit: what it submits is a
child of the unit (its sandbox narrowed, ended with it), and it sees and
controls the unit's descendants only. Runs in the command's main thread.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from workunits._core.errors import WorkunitsError
from workunits._core.query import query
from workunits._core.record import WorkRecord
from workunits._core.status import is_terminal
from workunits._surface._generated import UnitOptions
from workunits._unit.context import plain_data
from workunits._util import framing
from workunits._wire import frames as m
from workunits._wire.gateway_protocol import ENV_GATEWAY, ENV_TOKEN, ENV_UNIT, Hello
from workunits._wire.specs import AgentSpec, ShellSpec

POLL = 0.05  # seconds between two looks at a unit being waited for


def inside_a_unit() -> bool:
    """Whether this command runs in a unit that has a gateway (its environment says so)."""
    return all(os.environ.get(name) for name in (ENV_GATEWAY, ENV_UNIT, ENV_TOKEN))


class UnitGateway:
    """A connection to the supervisor, speaking for the unit this command runs in."""

    def __init__(self) -> None:
        self.unit = os.environ[ENV_UNIT]
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(os.environ[ENV_GATEWAY])
        except OSError as exc:
            self._sock.close()
            raise WorkunitsError(
                f"this command runs in unit {self.unit}, whose supervisor is not reachable "
                f"({exc.strerror}): it has ended, or the unit outlived it"
            ) from None
        self._reader = framing.FrameReader()  # the supervisor's answers: trusted
        self._req = 0
        framing.send(self._sock, Hello(self.unit, os.environ[ENV_TOKEN]))
        self._answer(0)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> UnitGateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ask(self, make: Any) -> Any:
        self._req += 1
        framing.send(self._sock, make(self._req))
        return self._answer(self._req)

    def _answer(self, req: int) -> Any:
        while True:
            for frame in framing.recv_blocking(self._sock, self._reader):
                if isinstance(frame, m.Reply) and frame.req == req:
                    if not frame.ok:
                        if isinstance(frame.value, WorkunitsError):
                            raise frame.value
                        raise WorkunitsError(str(frame.value))
                    return frame.value

    # -- what a command asks ------------------------------------------------------------

    def submit(self, letter: str, spec: Any, description: str, **options: Any) -> str:
        """Start a child of this unit; its ID."""
        spec = plain_data(spec)
        unit = UnitOptions(
            description=description,
            timeout=options.get("timeout"),
            key=options.get("key"),
            not_before=options.get("not_before"),
        )
        child_id, _ = self._ask(lambda req: m.Spawn(req, letter, spec, unit))
        return str(child_id)

    def shell(self, spec: ShellSpec, description: str | None, **options: Any) -> str:
        shown = spec.describe() if description is None else description
        return self.submit("b", spec, shown, **options)

    def agent(self, letter: str, spec: AgentSpec, description: str | None, **options: Any) -> str:
        shown = spec.name if description is None else description
        return self.submit(letter, spec, shown, **options)

    def get(self, work_id: str) -> WorkRecord:
        record: WorkRecord = self._ask(lambda req: m.Control(req, "get", work_id))
        return record

    def list(self) -> list[WorkRecord]:
        """This unit's descendants that its supervisor holds."""
        records: list[WorkRecord] = self._ask(lambda req: m.Control(req, "list", "", query()))
        return records

    def kill(self, work_id: str) -> bool:
        return bool(self._ask(lambda req: m.Control(req, "kill", work_id)))

    def cancel(self, work_id: str, grace: float) -> bool:
        return bool(self._ask(lambda req: m.Control(req, "cancel", work_id, grace)))

    def wait(self, work_id: str, timeout: float | None) -> WorkRecord:
        """The record once terminal, or as it is when ``timeout`` runs out."""
        pause = threading.Event()
        waited = 0.0
        while True:
            record = self.get(work_id)
            if is_terminal(record.status) or (timeout is not None and waited >= timeout):
                return record
            pause.wait(POLL)
            waited += POLL
