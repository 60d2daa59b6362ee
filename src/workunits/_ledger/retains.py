"""Retains as leases: a viewer keeps an ended unit visible while it renews its lease.

A lease names its holder's process (``_util.procid``). It lapses when its
deadline passes or, at once, when that process has exited, so a viewer
killed by SIGKILL or SIGHUP holds nothing. ``Retains.held`` is the one reader: it
drops lapsed leases and says which units are still retained, for eviction
from memory and for expiry in the ledger.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable

from workunits._core import ids
from workunits._core.retain import check_lease
from workunits._ledger.backend import Connection
from workunits._ledger.context import LedgerContext
from workunits._util import procid

_LEASE_ID = re.compile(r"[0-9a-f]{24}", re.ASCII)  # what add() makes


class Retains:
    """The retain leases of one Ledger. Every method runs in the calling thread."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def add(self, unit: str, lease: float, *, owner: str | None = None) -> str:
        """Retain ``unit`` for ``lease`` seconds for ``owner`` (default: this process);
        return the lease's ID."""
        owner = owner or procid.this_process()
        now = self._ctx.now()
        ids.validate(unit)
        lease_id = secrets.token_hex(12)
        with self._ctx.db.write(durable=False, wake=f"unit:{unit}") as conn:
            conn.execute(
                "INSERT INTO retains (lease_id, unit, owner, expires_at) VALUES (?, ?, ?, ?)",
                (lease_id, unit, owner, now + check_lease(lease)),
            )
        return lease_id

    def renew(self, lease_id: str, lease: float, *, unit: str | None = None) -> bool:
        """Extend the lease to ``lease`` seconds from now; False if it has lapsed or was
        released (or, given ``unit``, is not a lease on that unit)."""
        now = self._ctx.now()
        sql = "UPDATE retains SET expires_at = ? WHERE lease_id = ? AND expires_at > ?"
        params: tuple[object, ...] = (now + check_lease(lease), lease_id, now)
        if unit is not None:
            sql, params = sql + " AND unit = ?", (*params, unit)
        with self._ctx.db.write(durable=False) as conn:
            return conn.execute(sql, params).rowcount == 1

    def release(self, lease_id: str, *, unit: str | None = None) -> bool:
        """End the lease now; False if it was already gone (or, given ``unit``, is not a
        lease on that unit)."""
        sql = "DELETE FROM retains WHERE lease_id = ?"
        params: tuple[str, ...] = (lease_id,)
        if unit is not None:
            sql, params = sql + " AND unit = ?", (lease_id, unit)
        # A release may let its unit leave memory and expire: its supervisor hears of it now.
        wake = f"lease:{lease_id}" if _LEASE_ID.fullmatch(lease_id) else None
        with self._ctx.db.write(durable=False, wake=wake) as conn:
            return conn.execute(sql, params).rowcount == 1

    def held(self, units: Iterable[str] | None = None) -> set[str]:
        """The units (of ``units``, or all) a live lease retains; lapsed leases are deleted
        first."""
        now = self._ctx.now()
        with self._ctx.db.write(durable=False) as conn:
            prune(conn, now)
            rows = conn.execute("SELECT DISTINCT unit FROM retains").fetchall()
        retained = {str(row[0]) for row in rows}
        return retained if units is None else retained.intersection(units)


def prune(conn: Connection, now: float) -> None:
    """Delete leases past their deadline or held by a process that has exited."""
    conn.execute("DELETE FROM retains WHERE expires_at <= ?", (now,))
    owners = [str(row[0]) for row in conn.execute("SELECT DISTINCT owner FROM retains")]
    dead = [(owner,) for owner in owners if procid.is_alive(owner) is False]
    if dead:
        conn.executemany("DELETE FROM retains WHERE owner = ?", dead)
