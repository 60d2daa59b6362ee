"""The ledger's SQL, as the modules write it for SQLite, rewritten once for PostgreSQL.

The modules write one dialect (see ``backend``); the few SQLite spellings
they use have PostgreSQL counterparts that mean the same thing:

| SQLite                     | PostgreSQL                          |
|----------------------------|-------------------------------------|
| ``?``                      | ``%s`` (and a literal ``%`` doubled) |
| ``x IS ?``                 | ``x IS NOT DISTINCT FROM %s``       |
| ``x IS NOT ?``             | ``x IS DISTINCT FROM %s``           |
| ``LIMIT ?`` with -1 for all | ``LIMIT NULLIF(%s, -1)``            |
| ``INDEXED BY name``        | nothing (the planner has statistics) |

Anything else SQLite-only (a PRAGMA, ``INSERT OR ...``) is refused here, so a
new statement that needs a counterpart fails its first Postgres test instead
of running with another meaning. Statements are few and fixed, so each is
rewritten once and cached.
"""

from __future__ import annotations

import functools
import re

from workunits._core.errors import LedgerError

_TOKENS = re.compile(
    r"""
      (?P<quoted>'(?:[^']|'')*')          # a string literal: left as it is
    | (?P<is_not>\bIS\s+NOT\s+\?)
    | (?P<is_>\bIS\s+\?)
    | (?P<limit>\bLIMIT\s+\?)
    | (?P<indexed>\bINDEXED\s+BY\s+\w+\s*)
    | (?P<param>\?)
    | (?P<percent>%)
    """,
    re.VERBOSE | re.IGNORECASE,
)
_REFUSED = re.compile(r"\bPRAGMA\b|\bINSERT\s+OR\b|\bsqlite_", re.IGNORECASE)

_REPLACEMENTS = {
    "is_not": "IS DISTINCT FROM %s",
    "is_": "IS NOT DISTINCT FROM %s",
    "limit": "LIMIT NULLIF(%s, -1)",
    "indexed": "",
    "param": "%s",
    "percent": "%%",
}


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """``sql`` (SQLite, ``?`` placeholders) as PostgreSQL with ``%s`` placeholders."""
    if _REFUSED.search(sql):
        raise LedgerError(f"this statement has no PostgreSQL counterpart yet: {sql!r}")

    def replace(match: re.Match[str]) -> str:
        kind = match.lastgroup
        assert kind is not None
        return match.group() if kind == "quoted" else _REPLACEMENTS[kind]

    return _TOKENS.sub(replace, sql)
