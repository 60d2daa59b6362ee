"""A teammate for the restart tests, importable by reference (so a new supervisor loads it)."""

from __future__ import annotations

import os
from typing import Any

import workunits as wu

from .kinds_support import read_line, write_line


class Phoenix:
    """Notes each ``on_start`` in a file; crashes when told to.

    ``hold_attempt``: at that attempt, ``on_start`` says so on ``entered`` and
    waits for a line on ``gate`` before any message is handled.
    """

    def __init__(
        self,
        starts: str,
        entered: str | None = None,
        gate: str | None = None,
        hold_attempt: int = 0,
    ) -> None:
        self.starts = starts
        self.entered, self.gate, self.hold_attempt = entered, gate, hold_attempt

    def on_start(self) -> None:
        attempt = wu.current().attempt
        with open(self.starts, "a") as f:
            f.write(f"{attempt}\n")
        if attempt == self.hold_attempt and self.entered and self.gate:
            write_line(self.entered, "on_start")
            read_line(self.gate)

    def on_receive(self, message: Any) -> Any:
        match message:
            case "attempt":
                return wu.current().attempt
            case "crash":  # told: nobody to hand the exception to, so the attempt fails
                raise RuntimeError("crashed on purpose")
            case "exit":
                os._exit(3)
            case _:
                return message
