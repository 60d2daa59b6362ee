"""``workunits ui``: the web view's address with its one-time token, printed or opened.

Reads ``http.url`` and ``http.token`` from the state dir (both written by
``workunits serve --http``). The page at ``/?token=...`` sets an HttpOnly
cookie and redirects to ``/``, so the token leaves the address bar. ``--open``
gives the browser a one-time login code (``/?login=...``, a minute long)
instead of the token: a browser's command line is readable by other local
users (``/proc/PID/cmdline``).
"""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click

from workunits._cli._app import cli, state_option
from workunits._core.errors import StateDirError
from workunits._http.security import LOGIN_LIFETIME, login_code

URL_FILE = "http.url"  # the names workunits._http.server and .security write
TOKEN_FILE = "http.token"  # noqa: S105 - a file name, not a secret


@cli.command("ui")
@state_option
@click.option("--open", "open_browser", is_flag=True, help="Open it in the default browser.")
def ui(state_dir: Path, open_browser: bool) -> None:
    """Print the web view's address, with the token that logs the browser in; or open it,
    with a one-time login code instead of the token."""
    url = _read(state_dir / URL_FILE, "is `workunits serve --http` running on this state dir?")
    token = _read(state_dir / TOKEN_FILE, "has `workunits serve --http` ever run here?")
    if open_browser and webbrowser.open(f"{url}/?login={login_code(token)}"):
        click.echo(f"opened {url} (its login code works once, within {LOGIN_LIFETIME} s)", err=True)
        return
    click.echo(f"{url}/?token={token}")


def _read(path: Path, hint: str) -> str:
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise StateDirError(f"cannot read {path}: {exc.strerror}; {hint}") from None
    if not text:
        raise StateDirError(f"{path} is empty; {hint}")
    return text
