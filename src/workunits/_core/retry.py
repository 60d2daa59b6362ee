"""``Retry``: when a failed attempt is run again, and after how long; ``Attempt``: one that ended.

A policy is plain data, kept in the ledger as JSON (``to_json``/``from_json``),
so a supervisor that restarts continues the schedule of a unit that was
waiting between attempts. Exception types are kept by import reference
(``module:qualname``) and matched against the *names* in the failed
exception's MRO, which its unit process reports: the supervisor never
unpickles a unit's exception to decide.

The backoff is tenacity's (``wait_exponential``, or ``wait_random_exponential``
with jitter): ``initial * backoff ** (n - 1)`` seconds after the n-th failed
attempt, at most ``max_delay``; with jitter, uniformly random below that.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from workunits._core.errors import NotRetryable, SpecError
from workunits._core.moved import current_ref
from workunits._core.record import Outcome, WorkRecord
from workunits._core.seconds import finite, seconds
from workunits._core.status import Reason, Status, is_terminal

# The most attempts a unit may be given: what every ledger's attempt columns hold
# (a larger int would fail the whole group commit it was written in).
MAX_ATTEMPTS = 2**31 - 1


def check_max_attempts(name: str, value: object) -> None:
    """SpecError unless ``value`` is an int from 1 to MAX_ATTEMPTS."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise SpecError(f"{name} must be an int from 1 to {MAX_ATTEMPTS}, got {value!r}")


def type_ref(cls: type) -> str:
    """``module:qualname`` of a class: how a policy names an exception type."""
    return f"{cls.__module__}:{cls.__qualname__}"


def error_types(exc: BaseException) -> tuple[str, ...]:
    """The names of ``exc``'s classes, most derived first (what a unit process reports)."""
    return tuple(type_ref(c) for c in type(exc).__mro__)


@dataclass(frozen=True, slots=True)
class Retry:
    """Run a failed unit again, up to ``max_attempts`` attempts in all, same ID.

    ``on``: exception types (or ``module:qualname`` names) whose failures are
    retried (default: any ``Exception``). ``exit_codes``: the exit codes of a
    process that ends without an exception (a shell's command, an agent's
    ``sys.exit``) that are retried; None (default) means any non-zero code,
    ``()`` none. A unit that is ``killed`` (kill, cancel, timeout, output cap,
    its parent's end) or dies by a signal is never retried; one whose zygote
    died (reason ``lost``) always is.

    Between attempts the unit stays ``running``; ``max_attempts`` is also the
    budget for resuming a unit lost with its supervisor (one attempt counter).
    """

    max_attempts: int = 3
    backoff: float = 2.0
    initial: float = 1.0
    max_delay: float = 300.0
    jitter: bool = True
    on: tuple[type[BaseException] | str, ...] = (Exception,)
    exit_codes: tuple[int, ...] | None = None
    # The names ``on`` stands for, worked out once (not part of equality).
    _names: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_max_attempts("Retry(max_attempts=)", self.max_attempts)
        for name in ("initial", "max_delay"):
            seconds(f"Retry({name}=)", getattr(self, name), zero=True)
        factor = finite(self.backoff)
        if factor is None or factor < 1:
            raise SpecError(
                f"Retry(backoff=) must be a finite number >= 1 (a factor), got {self.backoff!r}"
            )
        if not isinstance(self.jitter, bool):
            raise SpecError(f"Retry(jitter=) must be a bool, got {self.jitter!r}")
        on = self.on if isinstance(self.on, tuple | list) else (self.on,)
        names: set[str] = set()
        for item in on:
            if isinstance(item, type) and issubclass(item, BaseException):
                names.add(type_ref(item))
            elif isinstance(item, str) and ":" in item:
                names.add(current_ref(item))  # a policy stored before a module moved
            else:
                raise SpecError(
                    f"Retry(on=) takes exception types or 'module:qualname' names, got {item!r}"
                )
        object.__setattr__(self, "on", tuple(on))
        codes = self.exit_codes
        if codes is not None:
            codes = tuple(codes) if isinstance(codes, Sequence) else (codes,)
            if not all(
                isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in codes
            ):
                raise SpecError(
                    f"Retry(exit_codes=) must be exit statuses, ints from 0 to 255, "
                    f"got {self.exit_codes!r}"
                )
            object.__setattr__(self, "exit_codes", codes)
        object.__setattr__(self, "_names", frozenset(names))

    # -- the decision -------------------------------------------------------------------

    def retries(self, outcome: Outcome) -> bool:
        """Whether an attempt that ended with ``outcome`` is one this policy retries."""
        if outcome.status != Status.FAILED:
            return False  # completed is done; killed was asked for
        if outcome.reason is Reason.LOST:
            return True  # the work never got to fail: its zygote died
        if outcome.error_types:
            return not self._names.isdisjoint(outcome.error_types)
        if outcome.signal is not None or outcome.exit_code is None:
            return False
        if self.exit_codes is None:
            return outcome.exit_code != 0
        return outcome.exit_code in self.exit_codes

    def delay(self, failed: int) -> float:
        """Seconds to wait after the ``failed``-th attempt failed (1 for the first)."""
        import tenacity  # noqa: PLC0415 - loaded by a supervisor only, never by a unit process

        wait: tenacity.wait.wait_base
        if self.jitter:
            wait = tenacity.wait_random_exponential(
                multiplier=self.initial, max=self.max_delay, exp_base=self.backoff
            )
        else:
            wait = tenacity.wait_exponential(
                multiplier=self.initial, max=self.max_delay, exp_base=self.backoff
            )
        state = tenacity.RetryCallState(None, None, (), {})  # type: ignore[arg-type]
        state.attempt_number = failed
        return float(wait(state))

    # -- as the ledger keeps it -----------------------------------------------------------

    def to_json(self) -> bytes:
        """The policy as the ledger keeps it (exception types by ``module:qualname``)."""
        return orjson.dumps(
            {
                "max_attempts": self.max_attempts,
                "backoff": self.backoff,
                "initial": self.initial,
                "max_delay": self.max_delay,
                "jitter": self.jitter,
                "on": sorted(self._names),
                "exit_codes": None if self.exit_codes is None else list(self.exit_codes),
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Retry:
        """The policy back from ``to_json`` (``on`` holds the names)."""
        doc: dict[str, Any] = orjson.loads(data)
        codes = doc.get("exit_codes")
        return cls(
            max_attempts=doc["max_attempts"],
            backoff=doc["backoff"],
            initial=doc["initial"],
            max_delay=doc["max_delay"],
            jitter=doc["jitter"],
            on=tuple(doc["on"]),
            exit_codes=None if codes is None else tuple(codes),
        )


def check_retry(retry: object) -> Retry | None:
    """A submit's ``retry=``: None or a ``Retry`` (SpecError otherwise)."""
    if retry is None or isinstance(retry, Retry):
        return retry
    raise SpecError(f"retry must be a workunits.Retry, got {type(retry).__name__}")


def check_retryable(record: WorkRecord) -> None:
    """``retry(id)``: NotRetryable unless ``record`` ended ``failed`` or ``killed``."""
    if not is_terminal(record.status) or record.status == Status.COMPLETED:
        raise NotRetryable(
            f"{record.id} is {record.status.value}: only a unit that ended failed or killed "
            f"is started again"
        )
    if record.expired_at is not None:
        raise NotRetryable(f"{record.id} has expired; its spec is no longer kept")


SPEC_NOT_KEPT = (
    "Its spec is kept only while it is in its supervisor's memory, or when it can resume "
    "(an importable callable, a shell with on_lost='restart') or has a retry policy; "
    "submit it again instead"
)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One earlier attempt of a unit that was retried: how it ended, and when.

    ``WorkRecord.attempts`` lists them oldest first; the last attempt's end is
    the record's own (``status``, ``error``, ``exit_code``...).
    """

    attempt: int
    ended_at: float
    error: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: Reason | None = None
    retry_at: float | None = None  # when the next attempt was due

    def describe(self) -> str:
        """One line: how this attempt failed."""
        parts: list[str] = []
        if self.reason is not None:
            parts.append(f"reason {self.reason.value}")
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        if self.signal is not None:
            parts.append(f"signal {self.signal}")
        if self.error and self.error.strip():
            parts.append(self.error.strip().splitlines()[0])
        return ", ".join(parts) or "failed"

    def to_doc(self) -> dict[str, Any]:
        """A JSON object (the ledger's ``attempts_log`` items, ``show --json``)."""
        return {
            "attempt": self.attempt,
            "ended_at": self.ended_at,
            "error": self.error,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": None if self.reason is None else self.reason.value,
            "retry_at": self.retry_at,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Attempt:
        """An attempt back from ``to_doc``."""
        reason = doc.get("reason")
        return cls(
            attempt=int(doc["attempt"]),
            ended_at=float(doc["ended_at"]),
            error=doc.get("error"),
            exit_code=doc.get("exit_code"),
            signal=doc.get("signal"),
            reason=None if reason is None else Reason(reason),
            retry_at=doc.get("retry_at"),
        )


def handed_over(attempts: Sequence[Attempt]) -> int:
    """How many of ``attempts`` were handed over at a deploy (``Reason.HANDED_OVER``)."""
    return sum(1 for a in attempts if a.reason is Reason.HANDED_OVER)


def counted(attempt: int, attempts: Sequence[Attempt]) -> int:
    """How many attempts, up to the current ``attempt``, count against ``max_attempts``.

    Every attempt but those handed over at a deploy (invariant 13): a deploy
    raises the attempt number (fencing needs it) but is not a failure, so a
    unit waiting days for an approval survives any number of deploys.
    """
    return attempt - handed_over(attempts)


def attempts_to_json(attempts: Sequence[Attempt]) -> bytes:
    return orjson.dumps([a.to_doc() for a in attempts])


def attempts_from_json(data: bytes | str) -> tuple[Attempt, ...]:
    docs: builtins.list[dict[str, Any]] = orjson.loads(data)
    return tuple(Attempt.from_doc(d) for d in docs)
