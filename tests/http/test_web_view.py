"""The web view in a real headless Chromium (Debian's, through Playwright's Python API).

`make test` installs chromium as root when it is missing; elsewhere this test
says why it skips. Never `playwright install`: it downloads a browser build.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

import workunits as wu
from tests.http.server import Served

CHROMIUM = "/usr/bin/chromium"
# The README's screenshots are refreshed with WORKUNITS_SCREENSHOTS=1; otherwise they
# go to the test's tmp dir, so a test run leaves the checkout as it was.
DOCS = Path(__file__).resolve().parents[2] / "docs"
REFRESH = os.environ.get("WORKUNITS_SCREENSHOTS") == "1"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is missing: `make test` installs Debian's chromium as root "
        "(apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
from playwright.sync_api import Page, sync_playwright  # noqa: E402 - after the skips


def _until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)  # polling with a deadline


@pytest.fixture
def page(served: Served) -> Iterator[Page]:
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        browser = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=FLAGS,
            headless=True,
            viewport={"width": 1100, "height": 600},
        )
        try:
            yield browser.pages[0] if browser.pages else browser.new_page()
        finally:
            browser.close()


@pytest.mark.timeout(120)
def test_table_progress_output_cancel_and_retain(
    served: Served, page: Page, tmp_path: Path
) -> None:
    shots = DOCS if REFRESH else tmp_path
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        unit = api.post(
            "/v1/units",
            json={
                "kind": "agent",
                "target": "tests.http.units:ticker",
                "args": [400, 0.1],
                "description": "ticks for the browser",
            },
        ).json()
    work_id = unit["id"]
    page.goto(f"{served.url}/?token={served.token}")  # sets the cookie, redirects to /
    assert page.url.rstrip("/") == served.url
    page.goto(f"{served.url}/#/units")
    row = page.locator(f'tr[data-id="{work_id}"]')
    row.wait_for(timeout=20_000)
    bar = row.locator(".bar > span")
    bar.wait_for(timeout=20_000)
    first = bar.evaluate("e => e.style.width")
    _until(lambda: bar.evaluate("e => e.style.width") != first)  # the row's bar moves
    assert "step" in row.locator(".msg").inner_text()
    page.screenshot(path=str(shots / "web-view-table.png"))

    row.click()
    output = page.locator("#u-output")
    _until(lambda: "line 3" in output.inner_text())  # its page streams output
    with wu.connect(served.state_dir) as ledger_client:
        _until(lambda: work_id in ledger_client.ledger.retains.held([work_id]))  # held while open
        page.screenshot(path=str(shots / "web-view-unit.png"))
        page.click("#b-cancel")
        status = page.locator('dd[data-field="status"]')
        _until(lambda: status.inner_text() == "killed")
        assert "cancelled" in page.locator('dd[data-field="cause"]').inner_text()
        page.evaluate("location.hash = '#/'")  # leave the page
        _until(lambda: work_id not in ledger_client.ledger.retains.held([work_id]))


def _pumping_until(page: Page, check: Callable[[], bool], timeout: float = 20.0) -> None:
    """``_until`` for checks of page events, which Playwright delivers while it waits."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        page.wait_for_timeout(50)


def _login(page: Page, served: Served) -> None:
    page.goto(f"{served.url}/?token={served.token}")  # sets the cookie, redirects to /
    page.goto(f"{served.url}/#/units")


def _kill(served: Served, work_id: str) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        api.post(f"/v1/units/{work_id}/kill").raise_for_status()


def _text(page: Page) -> str:
    """The unit page's output as the page holds it."""
    text: str = page.locator("#u-output").evaluate("e => e.textContent")
    return text


def _shell(served: Served, command: str) -> str:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        unit: str = api.post("/v1/units", json={"kind": "shell", "command": command}).json()["id"]
        return unit


@pytest.mark.timeout(120)
def test_non_ascii_output_split_across_chunks_shows_as_written(served: Served, page: Page) -> None:
    """A 64 KiB chunk ends inside a 3-byte character (sent as base64): no mojibake."""
    line = "✓" * 99 + "\n"
    # It stays a while: a shell's output file goes at its end, and only its tail is kept.
    work_id = _shell(served, f"""python3 -c 'print("{"✓" * 99}\\n" * 3000, end="")'; sleep 60""")
    _login(page, served)
    page.goto(f"{served.url}/#/unit/{work_id}")
    _until(lambda: _text(page).count("\n") >= 3000, 60)
    assert _text(page) == line * 3000
    _kill(served, work_id)


@pytest.mark.timeout(180)
def test_large_output_keeps_the_page_responsive_and_its_last_part(
    served: Served, page: Page
) -> None:
    """20 MB of output: the tab answers throughout, keeps the last 1 MiB and says so."""
    work_id = _shell(
        served,
        "yes 'forty characters of output, line after' | head -c 20000000; echo END; sleep 60",
    )
    _login(page, served)
    page.goto(f"{served.url}/#/unit/{work_id}")
    slowest = 0.0

    def ended() -> bool:
        nonlocal slowest
        started = time.monotonic()
        done: bool = page.evaluate(
            "document.getElementById('u-output').textContent.endsWith('END\\n')"
        )
        slowest = max(slowest, time.monotonic() - started)
        return done

    _until(ended, 120)
    assert slowest < 5, f"the page did not answer for {slowest:.1f} s"
    assert len(_text(page)) <= 1 << 20
    note = page.locator("#u-trimmed")
    assert note.is_visible()
    assert f"workunits tail {work_id}" in note.inner_text()
    _kill(served, work_id)


@pytest.mark.timeout(60)
def test_an_unknown_unit_says_so(served: Served, page: Page) -> None:
    _login(page, served)
    page.goto(f"{served.url}/#/unit/bzzzzzzzz")
    missing = page.locator("#u-missing")
    missing.wait_for(state="visible", timeout=20_000)
    assert "bzzzzzzzz" in missing.inner_text()
    assert not page.locator("#b-kill").is_visible()


@pytest.mark.timeout(90)
def test_the_header_says_when_the_server_is_down(page: Page, tmp_path: Path) -> None:
    server = Served(tmp_path / "state")
    try:
        _login(page, server)
        conn = page.locator("#conn")
        _until(lambda: conn.inner_text().startswith("live"))
    finally:
        server.stop()
    _until(lambda: "unreachable" in conn.inner_text())
    assert conn.get_attribute("class") == "down"


@pytest.mark.timeout(60)
def test_one_long_description_wraps_inside_the_window(served: Served, page: Page) -> None:
    long = "x" * 3000  # one word: nothing to break it at but anywhere
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        body = {"kind": "shell", "command": "true", "description": long}
        work_id = api.post("/v1/units", json=body).json()["id"]
    _login(page, served)
    page.locator(f'tr[data-id="{work_id}"]').wait_for(timeout=20_000)
    width: int = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1100  # the viewport's
    page.goto(f"{served.url}/#/unit/{work_id}")
    page.locator('dd[data-field="description"]').wait_for(timeout=20_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1100


@pytest.mark.timeout(60)
def test_a_failed_units_traceback_keeps_its_lines(served: Served, page: Page) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        body = {"kind": "agent", "target": "tests.http.units:boom", "args": ["it broke"]}
        work_id = api.post("/v1/units", json=body).json()["id"]
        api.get(f"/v1/units/{work_id}/result", params={"wait": 30})
    _login(page, served)
    page.goto(f"{served.url}/#/unit/{work_id}")
    error = page.locator('dd[data-field="error"]')
    _until(lambda: "it broke" in error.inner_text())
    lines = error.inner_text().splitlines()
    assert lines[0] == "ValueError: it broke", lines[:2]
    assert "Traceback (most recent call last):" in lines
    assert len(lines) > 3


@pytest.mark.timeout(90)
def test_rows_are_links_reached_by_tab_and_a_selected_id_survives_refreshes(
    served: Served, page: Page
) -> None:
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=30) as api:
        body = {"kind": "agent", "target": "tests.http.units:ticker", "args": [400, 0.1]}
        work_id = api.post("/v1/units", json=body).json()["id"]
    _login(page, served)
    link = page.locator(f'tr[data-id="{work_id}"] a[href="#/unit/{work_id}"]')
    link.wait_for(timeout=20_000)
    bar = page.locator(f'tr[data-id="{work_id}"] [role="progressbar"]')
    bar.wait_for(timeout=20_000)
    assert page.locator("#conn").get_attribute("aria-live") == "polite"
    # Select the ID, as someone copying it does, and mark the row's element.
    page.evaluate(
        """id => { const a = document.querySelector(`tr[data-id="${id}"] a`);
        a.closest("tr").marked = true;
        const range = document.createRange(); range.selectNodeContents(a);
        getSelection().removeAllRanges(); getSelection().addRange(range); }""",
        work_id,
    )
    first = bar.get_attribute("aria-valuenow")
    _until(lambda: bar.get_attribute("aria-valuenow") != first)  # refreshed since
    assert page.evaluate("getSelection().toString()") == work_id
    assert page.evaluate(f"document.querySelector('tr[data-id=\"{work_id}\"]').marked")
    for _ in range(50):  # the keyboard reaches the row's link
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.getAttribute('href')") == f"#/unit/{work_id}":
            break
    else:
        pytest.fail("Tab never reached the unit's link")
    page.keyboard.press("Enter")
    _until(lambda: page.url.endswith(f"#/unit/{work_id}"))
    _kill(served, work_id)


@pytest.mark.timeout(90)
def test_the_list_is_read_again_when_units_change_and_never_on_a_timer(
    served: Served, page: Page
) -> None:
    """Changes are pushed (GET /v1/changes): an idle list reads nothing, a change one page."""
    lists: list[str] = []
    page.on("request", lambda r: lists.append(r.url) if "/v1/units?" in r.url else None)
    _login(page, served)
    page.locator("#l-total").wait_for(timeout=20_000)
    _pumping_until(page, lambda: len(lists) >= 1)
    _pumping_until(page, lambda: page.locator("#conn").inner_text().startswith("live"))
    count = len(lists)
    page.wait_for_timeout(4000)  # idle: a window of time in which nothing may be read
    assert len(lists) == count
    work_id = _shell(served, "true")
    _pumping_until(page, lambda: page.locator(f'tr[data-id="{work_id}"]').count() == 1)
    assert all("limit=50" in url for url in lists)
