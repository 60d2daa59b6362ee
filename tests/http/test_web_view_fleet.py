"""Operating a fleet in the web view, in Debian's Chromium: what the page shows, read back.

Search, filters, paging and totals over the whole ledger; a unit's page with its
timeline, times, arguments, result, checkpoint, error, children and parent; the
buttons that apply and no others; bulk cancel; the overview's charts; the
schedules and the waiting notices. Screenshots go to ``WORKUNITS_SHOTS`` (a
directory) when it is set, and to the docs with ``WORKUNITS_SCREENSHOTS=1``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http.server import Served
from tests.http.test_web_view import CHROMIUM, DOCS, FLAGS, _pumping_until

pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is missing (make test installs it as root)", allow_module_level=True)
from playwright.sync_api import Locator, Page, sync_playwright

REFRESH = os.environ.get("WORKUNITS_SCREENSHOTS") == "1"


@pytest.fixture
def page(served: Served, tmp_path: Path) -> Iterator[Page]:
    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            args=FLAGS,
            headless=True,
            viewport={"width": 1200, "height": 800},
        )
        try:
            tab = browser.pages[0] if browser.pages else browser.new_page()
            errors: list[str] = []
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.goto(f"{served.url}/?token={served.token}")
            yield tab
            assert errors == []  # no script error on any page
        finally:
            browser.close()


def _shot(page: Page, name: str, tmp_path: Path) -> None:
    where = os.environ.get("WORKUNITS_SHOTS")
    page.screenshot(path=str(Path(where) / f"{name}.png" if where else tmp_path / f"{name}.png"))
    if REFRESH and name in ("units", "unit"):
        page.screenshot(path=str(DOCS / f"web-view-{'table' if name == 'units' else 'unit'}.png"))


def _post(served: Served, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=60) as api:
        r = api.post(path, json=body)
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out


def _wait(served: Served, work_id: str) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=90) as api:
        api.get(f"/v1/units/{work_id}/result", params={"wait": 60})


@pytest.mark.timeout(180)
def test_search_filters_paging_and_totals(served: Served, page: Page, tmp_path: Path) -> None:
    ids = [
        _post(
            served,
            "/v1/units",
            {"kind": "shell", "command": "true", "description": f"build shard {n} of repo-17"},
        )["id"]
        for n in range(55)
    ]
    odd = _post(
        served, "/v1/units", {"kind": "shell", "command": "true", "description": "an unrelated job"}
    )["id"]
    _wait(served, ids[-1])
    page.goto(f"{served.url}/#/units")
    page.fill("#f-q", "repo-17 shard")
    page.press("#f-q", "Enter")  # the keyboard submits the search
    total = page.locator("#l-total")
    _pumping_until(page, lambda: total.inner_text() == "55 units match", 30)
    assert page.locator(f'tr[data-id="{odd}"]').count() == 0
    assert page.locator("#units tbody tr").count() == 50  # a page
    first_page = set(
        page.locator("#units tbody tr").evaluate_all("rs => rs.map(r => r.dataset.id)")
    )
    page.click("#p-next")
    _pumping_until(page, lambda: page.locator("#units tbody tr").count() == 5, 30)
    rest = set(page.locator("#units tbody tr").evaluate_all("rs => rs.map(r => r.dataset.id)"))
    assert first_page | rest == set(ids)
    assert not first_page & rest
    page.click("#p-first")
    page.select_option("#f-kind", "agent")
    _pumping_until(page, lambda: total.inner_text() == "0 units match", 30)
    page.click("#f-clear")
    page.fill("#f-key", "no-such-key")
    page.press("#f-key", "Enter")
    _pumping_until(page, lambda: total.inner_text() == "0 units match", 30)
    page.click("#f-clear")
    page.fill("#f-q", ids[3][:6])  # an ID's start finds it
    page.press("#f-q", "Enter")
    _pumping_until(page, lambda: page.locator("#units tbody tr").count() == 1, 30)
    page.fill("#f-q", "repo-17")
    page.press("#f-q", "Enter")
    _pumping_until(page, lambda: total.inner_text() == "55 units match", 30)
    _shot(page, "units", tmp_path)


@pytest.mark.timeout(180)
def test_a_units_page_shows_its_life_and_only_the_buttons_that_apply(
    served: Served, page: Page, tmp_path: Path
) -> None:
    parent = _post(
        served,
        "/v1/units",
        {
            "kind": "agent",
            "target": "tests.http.units:waiter",
            "args": ["go"],
            "description": "waits for go",
        },
    )["id"]
    child = _post(served, "/v1/units", {"kind": "shell", "command": "sleep 30", "parent": parent})
    page.goto(f"{served.url}/#/unit/{parent}")

    def field(name: str) -> Locator:
        return page.locator(f'dd[data-field="{name}"]')

    _pumping_until(
        page, lambda: field("status").count() == 1 and field("status").inner_text() == "running"
    )
    assert page.locator("#b-cancel").is_enabled()
    assert page.locator("#b-kill").is_enabled()
    assert page.locator("#b-signal").is_enabled()
    assert page.locator("#b-retry").is_disabled()  # it has not failed
    assert field("sandbox").inner_text().startswith("default protection")
    _pumping_until(
        page, lambda: page.locator(f'#u-children tr[data-id="{child["id"]}"]').count() == 1
    )
    assert '"waiter"' in page.locator("#u-args").inner_text()
    assert '"go"' in page.locator("#u-args").inner_text()
    # A signal from the page ends it with the value as its result.
    page.fill("#s-name", "go")
    page.fill("#s-value", '{"answer": 42}')
    page.press("#s-value", "Enter")
    _pumping_until(page, lambda: field("status").inner_text() == "completed", 60)
    _pumping_until(page, lambda: '"answer": 42' in page.locator("#u-result").inner_text(), 30)
    timeline = page.locator("#u-timeline").inner_text()
    for what in ("submitted", "started", "signal", "end"):
        assert what in timeline, timeline
    assert field("duration").inner_text()
    assert field("ended").inner_text()
    for button in ("#b-cancel", "#b-kill", "#b-signal", "#b-retry"):
        assert page.locator(button).is_disabled(), button  # ended, and not failed
    # The child's page links back to its parent; it was killed with it.
    page.goto(f"{served.url}/#/unit/{child['id']}")
    _pumping_until(
        page, lambda: field("status").count() == 1 and field("status").inner_text() == "killed", 60
    )
    assert page.locator(f'dd[data-field="parent"] a[href="#/unit/{parent}"]').count() == 1
    assert page.locator("#b-retry").is_enabled()  # killed: it may run again
    page.click("#b-retry")
    _pumping_until(page, lambda: not page.url.endswith(child["id"]), 30)
    _pumping_until(page, lambda: field("status").count() == 1, 30)
    # A unit that started at once and cannot resume keeps no spec: the page says so.
    args = page.locator("#u-args")
    _pumping_until(page, lambda: "not kept" in args.inner_text() or "sleep 30" in args.inner_text())


@pytest.mark.timeout(180)
def test_a_failed_agent_shows_its_error_checkpoint_timeline_and_retry(
    served: Served, page: Page, tmp_path: Path
) -> None:
    saver = _post(
        served,
        "/v1/units",
        {"kind": "agent", "target": "tests.http.units:saver", "args": [3, 0.05]},
    )["id"]
    failing = _post(
        served,
        "/v1/units",
        {"kind": "agent", "target": "tests.http.units:boom", "args": ["it broke"]},
    )["id"]
    _wait(served, saver)
    _wait(served, failing)
    page.goto(f"{served.url}/#/unit/{saver}")
    _pumping_until(page, lambda: '"blob"' in page.locator("#u-checkpoint").inner_text(), 30)
    _pumping_until(
        page, lambda: page.locator('#u-timeline li[data-what="checkpoint"]').count() >= 1
    )
    output = page.locator("#u-output")  # the value, not a bare "[result]"
    _pumping_until(page, lambda: "[result] 3" in output.inner_text(), 30)
    _shot(page, "unit", tmp_path)
    page.goto(f"{served.url}/#/unit/{failing}")
    error = page.locator('dd[data-field="error"]')
    _pumping_until(page, lambda: error.count() == 1 and "it broke" in error.inner_text(), 30)
    assert page.locator("#b-retry").is_enabled()
    assert page.locator("#b-kill").is_disabled()
    _shot(page, "unit-failed", tmp_path)


@pytest.mark.timeout(180)
def test_bulk_cancel_of_a_selection(served: Served, page: Page, tmp_path: Path) -> None:
    sleepers = [
        _post(
            served,
            "/v1/units",
            {"kind": "shell", "command": "sleep 60", "description": "bulk sleeper"},
        )["id"]
        for _ in range(3)
    ]
    page.goto(f"{served.url}/#/units")
    page.fill("#f-q", "bulk sleeper")
    page.press("#f-q", "Enter")
    _pumping_until(page, lambda: page.locator("#units tbody tr").count() == 3, 30)
    button = page.locator("#b-bulk-cancel")
    assert button.is_disabled()
    for work_id in sleepers[:2]:
        page.check(f'tr[data-id="{work_id}"] .sel')
    assert button.inner_text() == "Cancel selected (2)"
    button.click()

    def status(work_id: str) -> str:
        text: str = page.locator(
            f'tr[data-id="{work_id}"] td.status-killed, tr[data-id="{work_id}"] td.status-running'
        ).inner_text()
        return text

    _pumping_until(page, lambda: [status(i) for i in sleepers[:2]] == ["killed", "killed"], 60)
    assert status(sleepers[2]) == "running"  # not selected: untouched
    _post(served, f"/v1/units/{sleepers[2]}/kill")


@pytest.mark.timeout(180)
def test_overview_schedules_and_notices(served: Served, page: Page, tmp_path: Path) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=60) as api:
        api.put(
            "/v1/schedules/nightly",
            json={"cron": "0 3 * * *", "unit": {"kind": "shell", "command": "echo nightly"}},
        ).raise_for_status()
    done = [
        _post(served, "/v1/units", {"kind": "shell", "command": f"exit {n % 2}"})["id"]
        for n in range(6)
    ]
    for work_id in done:
        _wait(served, work_id)
    page.goto(f"{served.url}/#/")
    cards = page.locator("#o-cards")
    failed = cards.locator('[data-status="failed"]')
    # The cards are the server's latest sample (taken within 2 s of a change; the
    # page reads the samples every 10 s while it is shown).
    _pumping_until(page, lambda: failed.count() == 1 and int(failed.inner_text()) >= 3, 40)
    # The charts fill in as the server samples (after changes, every 2 s at most).
    _pumping_until(page, lambda: page.locator("#c-throughput svg").count() == 1, 60)
    assert page.locator("#c-queue svg polyline").count() == 2
    assert page.locator("#c-failures svg polyline").count() == 1
    _shot(page, "overview", tmp_path)
    page.click('nav a[data-nav="schedules"]')  # the nav is links: keyboard and mouse alike
    row = page.locator("#schedules tbody tr", has_text="nightly")
    _pumping_until(page, lambda: row.count() == 1, 30)
    assert "0 3 * * *" in row.inner_text()
    _shot(page, "schedules", tmp_path)
    page.click('nav a[data-nav="notices"]')
    _pumping_until(
        page, lambda: page.locator(f'#notices a[href="#/unit/{done[0]}"]').count() == 1, 30
    )
    assert "the application" in page.locator("#notices tbody").inner_text()
    _shot(page, "notices", tmp_path)
