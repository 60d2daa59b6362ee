"""``OutputReads``: reading a unit's output, live from its file or, once ended, from its tail.

Owned by the SupervisorActor; every method runs in its thread. ``read``
reads the delta since the record's offset and patches only the offset
(invariant 6); ``chunk`` reads from an offset the caller keeps. A unit that
has left memory is read from the ledger: its tail, and the offset its
record had when it left.
"""

from __future__ import annotations

import os

from workunits._core.record import OutputChunk, WorkRecord, replace
from workunits._core.status import is_terminal
from workunits._ledger import Ledger
from workunits._util import outputfile
from workunits.supervisor.actor.units import Units

DEFAULT_READ = 1 << 20  # bytes one read returns at most, unless the caller says otherwise


class OutputReads:
    def __init__(self, units: Units, ledger: Ledger) -> None:
        self._units = units
        self._ledger = ledger

    def read(self, work_id: str, max_bytes: int | None) -> tuple[bytes, WorkRecord]:
        """The delta since the offset (at most ``max_bytes``), then the offset patched."""
        limit = DEFAULT_READ if max_bytes is None else max_bytes
        if self._units.evicted(work_id):
            return self._read_evicted(work_id, limit)
        record = self._units.registry.get(work_id)
        slot = self._units.slot(work_id)
        assert slot is not None  # the record is in memory
        offset = record.output_offset
        fd = slot.read_fd
        if is_terminal(record.status) and fd is None:
            # The file is gone: what is left to read is in the tail, if it fits.
            data, new_offset = _from_tail(record, offset, limit)
        else:
            if fd is None and record.output_path is not None:
                fd = slot.read_fd = outputfile.open_for_reading(record.output_path)
            data = b"" if fd is None else outputfile.read_delta(fd, offset, limit)
            new_offset = offset + len(data)
            if is_terminal(record.status) and fd is not None and new_offset >= record.output_bytes:
                os.close(fd)
                slot.read_fd = None
        if new_offset != offset:
            _, record = self._units.write(work_id, lambda r: replace(r, output_offset=new_offset))
        return data, record

    def _read_evicted(self, work_id: str, limit: int) -> tuple[bytes, WorkRecord]:
        record = self._units.get(work_id)
        data, new_offset = _from_tail(record, record.output_offset, limit)
        if new_offset != record.output_offset:
            self._ledger.units.save_output_offset(work_id, new_offset)
            record = replace(record, output_offset=new_offset)
        return data, record

    def chunk(self, work_id: str, offset: int, max_bytes: int | None) -> OutputChunk:
        """Output from ``offset``, whatever the record's own offset; nothing is patched."""
        limit = DEFAULT_READ if max_bytes is None else max_bytes
        record = self._units.get(work_id)
        slot = self._units.slot(work_id)
        fd = None if slot is None else slot.read_fd
        if not is_terminal(record.status) or fd is not None:
            opened = None
            if fd is None and record.output_path is not None:
                try:
                    fd = opened = outputfile.open_for_reading(record.output_path)
                except FileNotFoundError:
                    fd = None  # ended meanwhile, or not started: read the record again
            if fd is not None:
                try:
                    data = outputfile.read_delta(fd, offset, limit)
                finally:
                    if opened is not None:
                        os.close(opened)
                return OutputChunk(data, offset, offset + len(data), ended=False)
            if not is_terminal(record.status):
                return OutputChunk(b"", offset, offset, ended=False)
        data, end = _from_tail(record, offset, limit)
        start = end - len(data)
        return OutputChunk(data, start, end, ended=end >= record.output_bytes)


def _from_tail(record: WorkRecord, offset: int, max_bytes: int) -> tuple[bytes, int]:
    """Output of an ended unit from ``offset``: what its tail still holds, and where it ends.

    A reader that lagged more than the tail's 64 KiB resumes at the tail's start.
    """
    tail_start = record.output_bytes - len(record.output_tail)
    start = max(offset, tail_start)
    end = min(record.output_bytes, start + max_bytes)
    if end <= start:
        return b"", max(offset, start)
    return record.output_tail[start - tail_start : end - tail_start], end
