"""``workunits ui --open``: the browser gets a one-time login code, never the token."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.http.server import ROOT, Served


def _open_in_fake_browser(served: Served, tmp_path: Path) -> str:
    """Run ``workunits ui --open`` with $BROWSER a script that writes down its argument."""
    seen = tmp_path / "browser-argv"
    browser = tmp_path / "browser.py"
    browser.write_text(f"import sys\nopen({str(seen)!r}, 'w').write(sys.argv[1])\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["BROWSER"] = f"{shlex.quote(sys.executable)} {shlex.quote(str(browser))} %s"
    done = subprocess.run(
        [sys.executable, "-m", "workunits._cli", "ui", "--state", str(served.state_dir), "--open"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert served.token not in done.stdout + done.stderr
    return seen.read_text()


@pytest.mark.timeout(60)
def test_ui_open_hands_the_browser_a_one_time_code_not_the_token(
    served: Served, tmp_path: Path
) -> None:
    address = _open_in_fake_browser(served, tmp_path)
    assert served.token not in address  # /proc/PID/cmdline is readable by other users
    assert address.startswith(f"{served.url}/?login=")
    with httpx.Client(timeout=10) as browser:
        r = browser.get(address)
        assert r.status_code == 303
        assert r.headers["location"] == "/"
        assert browser.get(f"{served.url}/v1/units").status_code == 200  # logged in
    with httpx.Client(timeout=10) as again:
        assert again.get(address).status_code == 401  # once only
        forged = address[:-4] + "0000"
        assert again.get(forged).status_code == 401
        stale = f"{served.url}/?login=1000.nonce.{'0' * 64}"
        assert again.get(stale).status_code == 401
