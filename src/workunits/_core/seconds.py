"""Durations given by users: one check, one wording.

Every timeout, grace, lease, poll and interval of the API passes through
``seconds`` (or ``seconds_or_none`` where None means something), so each
refuses the same things with the same words: a bool, a non-number, NaN, an
infinity (``threading`` and ``time`` overflow on it; None is the way to say "no
limit" where there is one), and a value outside its bounds.
"""

from __future__ import annotations

import math

from workunits._core.errors import SpecError

# A claim on a notice is renewed while it is worked on; one longer than a day is
# a mistake, not a plan (the HTTP API has the same bound).
MAX_CLAIM_LEASE = 86400.0
DEFAULT_CLAIM_LEASE = 30.0  # seconds a claim holds between two renewals


def finite(value: object) -> float | None:
    """``value`` as a float when it is a finite real number (a bool is not one), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def seconds(
    name: str,
    value: object,
    *,
    zero: bool = False,
    least: float | None = None,
    most: float | None = None,
    none: str | None = None,
) -> float:
    """``value`` as a float, or SpecError naming ``name`` and what it must be.

    Greater than 0 by default; ``zero``: 0 allowed; ``least``: at least that;
    ``most``: at most that. ``none`` only words the error (what None would mean,
    for the callers that take it: see ``seconds_or_none``).
    """
    number = finite(value)
    if number is not None:
        low_ok = number >= least if least is not None else (number >= 0 if zero else number > 0)
        if low_ok and (most is None or number <= most):
            return number
    bound = f">= {least:g}" if least is not None else (">= 0" if zero else "> 0")
    if most is not None:
        bound += f" and <= {most:g}"
    alternative = "" if none is None else f", or None ({none})"
    raise SpecError(
        f"{name} must be a finite number of seconds {bound}{alternative}, got {value!r}"
    )


def seconds_or_none(
    name: str,
    value: object,
    *,
    none: str,
    zero: bool = False,
    least: float | None = None,
    most: float | None = None,
) -> float | None:
    """None as it is (``none`` says what it means, in the error); else ``seconds``."""
    if value is None:
        return None
    return seconds(name, value, zero=zero, least=least, most=most, none=none)


def wait_timeout(timeout: object) -> float | None:
    """A wait's timeout: a finite number of seconds >= 0, or None to wait without a limit."""
    return seconds_or_none("timeout", timeout, zero=True, none="wait without a limit")


def ask_timeout(timeout: object) -> float | None:
    """An ask's timeout: a finite number of seconds >= 0, or None until it answers or ends."""
    return seconds_or_none("timeout", timeout, zero=True, none="until it answers or ends")
