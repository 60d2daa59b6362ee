"""Pages, totals, text search and counts (``_ledger/listing.py``), on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import operator
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ledger.support import ManualClock
from workunits._core import ids as _ids
from workunits._core.errors import SpecError, UnknownWork
from workunits._core.query import Filter, matches, words
from workunits._ledger import Call, Ledger, NewUnit, Write, listing
from workunits._ledger.listing import Mark, Total
from workunits._ledger.rows import LISTED_COLUMNS
from workunits._ledger.sqlite import schema as schema_mod

DESCRIPTIONS = ("migrate repo-17 now", "index the docs", "Résumé builder", "migrate repo-2")


def _fill(ledger: Ledger, n: int, *, parent: str | None = None) -> list[NewUnit]:
    spec = ledger.units.encode_spec(Call(operator.add, (1, 2)), _ids.mint("a"))
    news = [
        NewUnit(
            _ids.mint("b" if i % 2 else "a"),
            "shell" if i % 2 else "agent",
            spec,
            100.0 + i // 2,  # pairs share a created_at: the id breaks the tie
            parent=parent,
            description=DESCRIPTIONS[i % len(DESCRIPTIONS)],
            key=f"job-{i}{'' if parent is None else '-child'}" if i % 3 == 0 else None,
        )
        for i in range(n)
    ]
    for answer in ledger.units.submit_many(news):
        assert not isinstance(answer, Exception)
    return news


def _order(news: list[NewUnit]) -> list[str]:
    return [u.id for u in sorted(news, key=lambda u: (u.created_at, u.id))]


def test_keyset_pages_walk_every_unit_once_in_both_orders(ledger: Ledger) -> None:
    news = _fill(ledger, 23)
    for newest in (False, True):
        seen: list[str] = []
        mark: Mark | None = None
        while True:
            rows = ledger.listing.page(Filter(), limit=5, after=mark, newest=newest)
            seen += [r.id for r in rows]
            if len(rows) < 5:
                break
            mark = ledger.listing.mark_of(rows[-1].id)
        expected = _order(news)
        assert seen == (expected[::-1] if newest else expected)


def test_each_filter_pages_only_its_units(ledger: Ledger) -> None:
    root = _fill(ledger, 1)[0]
    children = _fill(ledger, 6, parent=root.id)
    shells = [u.id for u in children if u.kind == "shell"]
    assert [r.id for r in ledger.listing.page(Filter(kind="shell"), limit=None)] == _order(
        [u for u in children if u.kind == "shell"]
    )
    assert {r.id for r in ledger.listing.page(Filter(parent=root.id), limit=None)} == {
        u.id for u in children
    }
    keyed = next(u for u in children if u.key)
    assert [r.id for r in ledger.listing.page(Filter(key=keyed.key), limit=None)] == [keyed.id]
    window = Filter(created_after=101.0, created_before=102.0)
    assert {r.created_at for r in ledger.listing.page(window, limit=None)} == {101.0}
    ledger.attempts.write_many([Write(shells[0], 1, {"status": "running"})])
    assert [r.id for r in ledger.listing.page(Filter(status="running"), limit=None)] == [shells[0]]
    assert ledger.listing.total(Filter(status="running")) == Total(1, True)
    assert ledger.listing.total(Filter(kind="shell", status="pending")) == Total(
        len(shells) - 1, True
    )
    assert ledger.listing.total(Filter(parent=root.id)) == Total(6, True)


def test_text_search_matches_word_starts_of_id_description_and_key(ledger: Ledger) -> None:
    news = _fill(ledger, 8)
    found = {r.id for r in ledger.listing.page(Filter(text="migrate REPO-1"), limit=None)}
    assert found == {u.id for u in news if u.description == "migrate repo-17 now"}
    assert {r.id for r in ledger.listing.page(Filter(text="job-3"), limit=None)} == {news[3].id}
    assert [r.id for r in ledger.listing.page(Filter(text=news[5].id[:6]), limit=None)] == [
        news[5].id
    ]
    assert ledger.listing.total(Filter(text="docs")) == Total(2, True)
    assert ledger.listing.page(Filter(text="zebra"), limit=None) == []
    # Punctuation is no syntax: the words are searched, nothing is parsed.
    assert len(ledger.listing.page(Filter(text='migrate" * ( : ^'), limit=None)) == 4
    assert len(ledger.listing.page(Filter(text="  -- "), limit=None)) == 8  # no words: no filter


def test_the_python_rule_agrees_with_the_index(ledger: Ledger) -> None:
    news = _fill(ledger, 8)
    for text in ("migrate repo-1", "docs", "job-6", "mig", news[1].id[:4]):
        expected = {u.id for u in news if matches(text, (u.id, u.description, u.key))}
        assert {r.id for r in ledger.listing.page(Filter(text=text), limit=None)} == expected, text
    assert words("Repo-17_x") == ["repo", "17", "x"]
    # Accents are as written, in both indexes: "resume" is not "résumé".
    assert {r.description for r in ledger.listing.page(Filter(text="résumé"), limit=None)} == {
        "Résumé builder"
    }
    assert ledger.listing.page(Filter(text="resume"), limit=None) == []


def test_counts_follow_inserts_transitions_expiry_and_deletes(
    ledger: Ledger, clock: ManualClock
) -> None:
    news = _fill(ledger, 4)
    assert ledger.listing.counts() == {("agent", "pending"): 2, ("shell", "pending"): 2}
    first, second = news[0].id, news[2].id
    ledger.attempts.write_many([Write(first, 1, {"status": "running"})])
    ledger.attempts.write_many([Write(first, 1, {"status": "completed"})])
    ledger.attempts.write_many([Write(second, 1, {"status": "killed"})])
    assert ledger.listing.counts() == {
        ("agent", "completed"): 1,
        ("agent", "killed"): 1,
        ("shell", "pending"): 2,
    }
    clock.advance(1000)
    assert ledger.retention.expire() == 2
    assert ledger.listing.counts() == {("agent", "expired"): 2, ("shell", "pending"): 2}
    assert ledger.listing.total(Filter(status="expired")) == Total(2, True)
    assert ledger.listing.total(Filter(status="killed")) == Total(0, True)
    clock.advance(1000)
    ledger.retention.gc(older_than=10)
    assert ledger.listing.counts() == {("shell", "pending"): 2}
    # The forgotten units are gone from the search index too.
    assert [r.id for r in ledger.listing.page(Filter(text="migrate"), limit=None)] == [news[3].id]


def test_totals_past_the_cap_say_they_are_estimates(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "COUNT_CAP", 20)  # the rule, without 10,000 rows to count
    spec = ledger.units.encode_spec(Call(operator.add, (1, 2)), _ids.mint("a"))
    ledger.units.submit_many(
        [NewUnit(_ids.mint("b"), "shell", spec, float(i), description="bulk") for i in range(22)]
    )
    assert ledger.listing.total(Filter(text="bulk")) == Total(20, False)
    assert ledger.listing.total(Filter(text="bulk", created_before=5.0)) == Total(5, True)
    assert ledger.listing.total(Filter(kind="shell")) == Total(22, True)  # counted: always exact


def test_bad_filters_say_what_is_wrong(ledger: Ledger) -> None:
    with pytest.raises(SpecError, match="'done' is not a status"):
        ledger.listing.page(Filter(status="done"), limit=1)
    with pytest.raises(SpecError, match="created_after must be seconds"):
        ledger.listing.page(Filter(created_after=float("nan")), limit=1)
    with pytest.raises(SpecError, match="at most 16 words"):
        ledger.listing.page(Filter(text=" ".join("w" * 17)), limit=1)
    with pytest.raises(UnknownWork):
        ledger.listing.mark_of("b00000000")


@pytest.mark.sqlite_only
def test_a_version_8_ledger_gains_indexes_counts_and_search(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with Ledger(state) as ledger:
        news = _fill(ledger, 6)
    # Back to version 8 as an older workunits left it: its units, none of version 9.
    with sqlite3.connect(state / "ledger.db") as conn:
        for name in ("units_counted", "units_recounted", "units_uncounted", "units_text_added"):
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TRIGGER units_text_dropped")
        conn.execute("DROP TRIGGER units_text_changed")
        conn.execute("DROP TABLE units_text")
        conn.execute("DROP TABLE unit_counts")
        for name in ("units_created", "units_kind_created", "units_live_status"):
            conn.execute(f"DROP INDEX {name}")
        conn.execute("DROP INDEX units_expired_created")
        conn.execute("DROP INDEX units_parent")
        conn.execute("CREATE INDEX units_parent ON units (parent) WHERE parent IS NOT NULL")
        conn.execute("ALTER TABLE units DROP COLUMN trace_context")
        conn.execute("ALTER TABLE units DROP COLUMN sandbox")  # version 10's
        conn.execute("PRAGMA user_version = 8")
    with Ledger(state) as ledger:
        assert ledger.listing.counts() == {("agent", "pending"): 3, ("shell", "pending"): 3}
        assert {r.id for r in ledger.listing.page(Filter(text="docs"), limit=None)} == {
            u.id for u in news if u.description == "index the docs"
        }
    assert schema_mod.SCHEMA_VERSION == 11


# The columns a listed page leaves out: none of them is in a record.
VALUE_COLUMNS = {
    *("spec", "spec_format", "spec_mac", "spec_versions", "spec_file"),
    *("checkpoint", "checkpoint_file", "checkpoint_mac", "trace_context"),
}


def test_a_listed_row_is_the_full_row_without_spec_or_checkpoint(ledger: Ledger) -> None:
    """A page reads what a record holds, not the spec or checkpoint: its record is get's."""
    (unit,) = _fill(ledger, 1)
    ledger.attempts.write_many([Write(unit.id, 1, {"status": "running", "started_at": 101.0})])
    assert ledger.attempts.save_checkpoint(unit.id, 1, {"done": [1, 2]})
    ended = {
        "status": "failed",
        "ended_at": 105.0,
        "output_tail": b"x" * 65536,
        "output_bytes": 1 << 20,
        "error": "RuntimeError: no",
        "exit_code": 1,
        "progress": 0.5,
        "progress_message": "half",
        "trace_context": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
    }
    ledger.attempts.write_many([Write(unit.id, 1, ended, result={"partial": True})])
    full = ledger.units.require(unit.id)
    assert all((full.output_tail, full.result, full.checkpoint, full.trace_context))
    (listed,) = ledger.listing.page(Filter(), limit=None)
    assert (listed.listed, full.listed) == (True, False)
    assert listed == dataclasses.replace(
        full,
        spec=None,
        checkpoint=None,
        checkpoint_file=None,
        checkpoint_mac=None,
        trace_context=None,
        listed=True,
    )
    assert ledger.units.list()[0] == full  # the ledger's own readers keep every column
    assert ledger.units.records([listed]) == [ledger.units.record(full)]


@pytest.mark.sqlite_only
def test_every_column_is_listed_or_a_value(ledger: Ledger) -> None:
    """A new column of ``units`` must be placed: in a list's columns, or left out of them."""
    conn = ledger._db.conn  # type: ignore[attr-defined]
    columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(units)")}
    assert set(LISTED_COLUMNS) == columns - VALUE_COLUMNS
    assert columns >= VALUE_COLUMNS


@pytest.mark.sqlite_only
def test_each_filter_reads_its_page_through_an_index(ledger: Ledger) -> None:
    """The query plan of each filter's page uses an index in page order: no sort of all rows."""
    _fill(ledger, 4)
    conn = ledger._db.conn  # type: ignore[attr-defined]
    for where, params in (
        ("kind = ?", ["shell"]),
        ("status = ? AND expired_at IS NULL", ["pending"]),
        ("parent = ?", ["a00000000"]),
        ("created_at >= ? AND created_at < ?", [1.0, 2.0]),
    ):
        plan = " ".join(
            str(row[3])
            for row in conn.execute(
                f"EXPLAIN QUERY PLAN SELECT * FROM units WHERE {where} "  # noqa: S608
                "ORDER BY created_at, id LIMIT 100",
                params,
            )
        )
        assert "USING INDEX" in plan, (where, plan)
        assert "TEMP B-TREE" not in plan, (where, plan)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    size=st.integers(0, 12),
    limit=st.integers(1, 5),
    newest=st.booleans(),
    kind=st.sampled_from([None, "shell", "agent"]),
)
def test_pages_concatenated_are_the_whole_list(
    tmp_path_factory: pytest.TempPathFactory, size: int, limit: int, newest: bool, kind: str | None
) -> None:
    state = tmp_path_factory.mktemp("pages") / "state"
    with Ledger(state) as ledger:
        news = _fill(ledger, size)
        whole = [r.id for r in ledger.listing.page(Filter(kind=kind), limit=None, newest=newest)]
        seen: list[str] = []
        mark = None
        for _ in range(size + 1):
            rows = ledger.listing.page(Filter(kind=kind), limit=limit, after=mark, newest=newest)
            seen += [r.id for r in rows]
            if not rows:
                break
            mark = ledger.listing.mark_of(rows[-1].id)
        assert seen == whole
        assert len(whole) == len([u for u in news if kind is None or u.kind == kind])
