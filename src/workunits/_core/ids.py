"""Work unit IDs: a one-letter kind prefix and 8 random characters of ``0-9a-z``.

One regex validates every ID before it touches a path, a query or a route
(DESIGN invariant 1). The prefix alone routes a unit to its kind.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Container

from workunits._core.errors import InvalidWorkId, UnknownKind

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
SUFFIX_LEN = 8
SESSION_PREFIX = "s"
# The letters DESIGN §3 gives to the built-in kinds, with their kinds' names.
BUILTIN_KINDS = {
    "a": "agent",
    "b": "shell",
    "t": "teammate",
    "w": "workflow",
    "m": "monitor",
    "r": "remote",
    "d": "dream",
}
_SUFFIXES = len(ALPHABET) ** SUFFIX_LEN

ID_REGEX = r"[a-z][0-9a-z]{8}"
"""What an ID is, as a regular expression (the HTTP API's OpenAPI document says it too)."""
# re.ASCII: \Z and the classes must not admit Unicode look-alikes.
_ID_RE = re.compile(ID_REGEX, re.ASCII)
_LETTER_RE = re.compile(r"[a-z]", re.ASCII)


def mint(prefix: str) -> str:
    """Return a new random ID with ``prefix``; ~2.8e12 suffixes per prefix."""
    if not isinstance(prefix, str) or not _LETTER_RE.fullmatch(prefix):
        raise InvalidWorkId(f"an ID prefix is one letter a-z, got {prefix!r}")
    # One draw of a uniform number below 36**8, written in base 36: the same
    # distribution as 8 independent choices at a fifth of the cost.
    n = secrets.randbelow(_SUFFIXES)
    digits = []
    for _ in range(SUFFIX_LEN):
        n, d = divmod(n, 36)
        digits.append(ALPHABET[d])
    return prefix + "".join(reversed(digits))


def is_valid(value: object) -> bool:
    """True when ``value`` has the shape of an ID (any prefix letter)."""
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def validate(value: object) -> str:
    """Return ``value`` if it has the shape of an ID, else raise InvalidWorkId."""
    if not isinstance(value, str):
        if isinstance(getattr(value, "id", None), str):  # a handle (or a record) given for its ID
            name = type(value).__name__
            raise InvalidWorkId(
                f"a work unit ID is a str, got a {name}: pass its .id (for example "
                f"sup.wait(handle.id)), or call the handle's own method (handle.wait())"
            )
        raise InvalidWorkId(f"a work unit ID is a str, got {type(value).__name__}")
    if _ID_RE.fullmatch(value) is None:
        raise InvalidWorkId(
            f"{value!r} is not a work unit ID: expected one letter a-z followed by "
            f"{SUFFIX_LEN} characters of 0-9a-z, like 'b4k2x9q0m'"
        )
    return value


def prefix_of(value: object, known: Container[str]) -> str:
    """Validate ``value`` and return its prefix, which must be a registered kind."""
    work_id = validate(value)
    prefix = work_id[0]
    if prefix == SESSION_PREFIX:
        raise InvalidWorkId(f"{work_id!r} is a session ID, not a work unit ID")
    if prefix not in known:
        raise UnknownKind(f"{work_id!r} has prefix {prefix!r}, which no kind is registered for")
    return prefix


def validate_letter(letter: object) -> str:
    """Validate a kind letter as given to ``register_kind``."""
    if not isinstance(letter, str) or not _LETTER_RE.fullmatch(letter):
        raise InvalidWorkId(f"a kind letter is one letter a-z, got {letter!r}")
    return letter
