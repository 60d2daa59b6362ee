"""Output for a model: read by offset, cut to the per-call limit, searched by regex.

Output is bytes on disk; a model gets text. Bytes are decoded as UTF-8 with
replacement, and a cut never splits a character: the next offset always
points at the first byte not returned, so reading on loses nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workunits._mcp.fleet import Fleet

SCAN_CHUNK = 256 << 10  # bytes read per look while searching a whole output
MAX_MATCHES = 50
MAX_LINE = 500  # characters of a matching line shown


@dataclass(frozen=True, slots=True)
class Read:
    """What one ``read_output`` returns."""

    text: str
    offset: int  # where ``text`` starts (past the offset asked for if bytes are gone)
    next_offset: int
    ended: bool  # the unit has ended and nothing is left after next_offset
    cut: bool  # more is there now: read on from next_offset
    missed: int  # bytes between the offset asked for and ``offset`` that are gone


def whole_chars(data: bytes) -> bytes:
    """``data`` without an incomplete UTF-8 character at its end (at most 3 bytes go)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last character's first byte
            need = (
                1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            )
            return data if back >= need else data[:-back]
    return data


def read(fleet: Fleet, work_id: str, offset: int, limit: int) -> Read:
    """Up to ``limit`` bytes from ``offset``, as text (blocking: a worker thread's)."""
    chunk = fleet.read(work_id, offset, limit + 1)
    data = chunk.data
    cut = len(data) > limit
    if cut:
        data = whole_chars(data[:limit]) or data[:limit]
    next_offset = chunk.start + len(data)
    return Read(
        text=data.decode("utf-8", "replace"),
        offset=chunk.start,
        next_offset=next_offset,
        ended=chunk.ended and not cut,
        cut=cut,
        missed=max(0, chunk.start - offset),
    )


@dataclass(frozen=True, slots=True)
class Match:
    offset: int  # of the matching line's first byte
    line: str


def compile_pattern(pattern: str) -> re.Pattern[bytes]:
    """The regex, over bytes (a line's text as UTF-8); ValueError saying what is wrong."""
    try:
        return re.compile(pattern.encode(), re.MULTILINE)
    except re.error as exc:
        raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None


def scan(  # noqa: PLR0917 - the scan's whole state, called from two tools
    fleet: Fleet, work_id: str, pattern: re.Pattern[bytes], offset: int, most: int, budget: int
) -> tuple[list[Match], int, bool, int]:
    """Lines matching ``pattern`` from ``offset`` on, reading at most ``budget`` bytes.

    Returns the matches (at most ``most``), the offset scanned to (a line
    boundary), whether the unit has ended with nothing left past it, and how
    many bytes before the first scanned one were gone. Blocking.
    """
    matches: list[Match] = []
    carry = b""  # an unfinished last line, scanned again with what follows it
    carry_at = offset
    missed = 0
    read_bytes = 0
    ended = False
    while len(matches) < most and read_bytes < budget:
        chunk = fleet.read(work_id, carry_at + len(carry), SCAN_CHUNK)
        if chunk.start > carry_at + len(carry):  # bytes before a stored tail are gone
            if not matches and not carry:
                missed = chunk.start - offset
            carry, carry_at = b"", chunk.start
        read_bytes += len(chunk.data)
        data = carry + chunk.data
        ended = chunk.ended
        if not chunk.data and not ended:
            break  # nothing more yet
        last_newline = data.rfind(b"\n")
        whole = data if ended else data[: last_newline + 1]
        for found in pattern.finditer(whole):
            start = whole.rfind(b"\n", 0, found.start()) + 1
            end = whole.find(b"\n", found.start())
            line = whole[start : end if end >= 0 else len(whole)]
            if matches and matches[-1].offset == carry_at + start:
                continue  # one line, one match
            text = line.decode("utf-8", "replace")
            matches.append(Match(carry_at + start, text[:MAX_LINE]))
            if len(matches) >= most:
                return (
                    matches,
                    carry_at + end + 1 if end >= 0 else carry_at + len(whole),
                    False,
                    missed,
                )
        carry_at += len(whole)
        carry = data[len(whole) :]
        if ended:
            break
    return matches, carry_at, ended and not carry, missed
