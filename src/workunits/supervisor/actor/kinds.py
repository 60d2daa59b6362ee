"""The kinds table: ``{prefix letter -> WorkActor class}``, owned by one supervisor."""

from __future__ import annotations

from collections.abc import Mapping

from workunits._core.errors import KindTaken, SpecError, UnknownKind
from workunits._core.ids import BUILTIN_KINDS, SESSION_PREFIX, validate_letter
from workunits.actors.base import WorkActor

# Taken even before their kind is implemented, so a user's kind never collides
# with a future one.
BUILTIN_LETTERS = BUILTIN_KINDS


class Kinds:
    def __init__(self) -> None:
        self._by_letter: dict[str, type[WorkActor]] = {}

    def __contains__(self, letter: object) -> bool:
        return letter in self._by_letter

    def add(self, letter: str, actor_class: type[WorkActor], *, builtin: bool = False) -> None:
        validate_letter(letter)
        if not (isinstance(actor_class, type) and issubclass(actor_class, WorkActor)):
            raise SpecError(f"a kind is a WorkActor subclass, got {actor_class!r}")
        if letter == SESSION_PREFIX:
            raise KindTaken("'s' is reserved for session IDs")
        if letter in self._by_letter:
            raise KindTaken(f"{letter!r} is already the {self._by_letter[letter].kind} kind")
        if letter in BUILTIN_LETTERS and not builtin:
            raise KindTaken(
                f"{letter!r} is reserved for the built-in {BUILTIN_LETTERS[letter]} kind"
            )
        if not builtin:
            self._check_name(letter, actor_class)
        self._by_letter[letter] = actor_class

    def _check_name(self, letter: str, actor_class: type[WorkActor]) -> None:
        """A kind's name (its class's ``kind``) is what records, ``list(kind=...)``
        and concurrency caps know it by: a str, one kind's only.

        A name already held (``"shell"``) made ``list(kind="shell")`` answer the
        other kind's units, and a name that is not a str failed every submit.
        """
        name = actor_class.kind
        how = f'set `kind: ClassVar[str] = "..."` on {actor_class.__qualname__}'
        if not isinstance(name, str) or len(name) < 2:
            raise SpecError(
                f"a kind's name is a str of two characters or more (one letter would read "
                f"as a prefix), got {name!r} from {actor_class.__qualname__}: {how}"
            )
        for held, cls in self._by_letter.items():
            if cls.kind == name:
                owner = "built-in" if held in BUILTIN_LETTERS else "registered"
                raise KindTaken(
                    f"{letter!r}: the kind name {name!r} is the {owner} kind of prefix "
                    f"{held!r}; {how} with a name of its own"
                )
        for held, builtin_name in BUILTIN_LETTERS.items():  # taken even before it exists
            if builtin_name == name:
                raise KindTaken(
                    f"{letter!r}: the kind name {name!r} is reserved for the built-in kind "
                    f"of prefix {held!r}; {how} with a name of its own"
                )

    def actor_class(self, letter: str) -> type[WorkActor]:
        try:
            return self._by_letter[letter]
        except KeyError:
            raise UnknownKind(f"no kind is registered for prefix {letter!r}") from None

    def letter_of(self, kind: str) -> str:
        """The letter for a kind given by letter or by name."""
        if kind in self._by_letter:
            return kind
        for letter, cls in self._by_letter.items():
            if cls.kind == kind:
                return letter
        raise UnknownKind(f"no kind is registered as {kind!r}")


def concurrency_by_name(
    concurrency: Mapping[str, int] | None, extra_kinds: Mapping[str, type[WorkActor]]
) -> dict[str, int]:
    """``concurrency=`` keyed by kind name; a letter is taken for its kind's name.

    A name no kind of this supervisor has would cap nothing, silently (a typo
    like ``"shells"`` lets every shell run at once), so it is refused. A kind of
    the user's own is known here only when given in ``kinds=``; one added later
    with ``register_kind`` cannot be capped, and the message says so.
    """
    names = dict(BUILTIN_LETTERS)
    # A class that is no kind is refused by Kinds.add, with its own message.
    names.update(
        (letter, cls.kind)
        for letter, cls in extra_kinds.items()
        if isinstance(getattr(cls, "kind", None), str)
    )
    known = set(names.values())
    limits: dict[str, int] = {}
    for key, limit in (concurrency or {}).items():
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise SpecError(f"concurrency[{key!r}] must be an int >= 1, got {limit!r}")
        name = names.get(key, key) if isinstance(key, str) else key
        if name not in known:
            raise SpecError(
                f"concurrency names no kind of this supervisor: {key!r}; "
                f"kinds: {sorted(known)}. Give a kind of your own in kinds= "
                f"(not register_kind) to cap its running units"
            )
        if name in limits:
            raise SpecError(f"concurrency caps the {name} kind twice (by its name and its letter)")
        limits[name] = limit
    return limits
