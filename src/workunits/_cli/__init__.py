"""The ``workunits`` command: serve, submit, ls, show, tail, wait, result, cancel, kill, watch,
gc, doctor, ui.

One module per group of commands, each registering on the group in ``_app``:

- ``_app``     the group, shared options, exit codes, errors as one line
- ``_render``  how units look (rich) and their JSON form
- ``serve``    the supervisor daemon
- ``submit``   new units
- ``inspect``  ls, show
- ``tail``     output, followed with -f
- ``waiting``  wait, result
- ``control``  cancel, kill, gc
- ``signals``  signal: outside input for a waiting unit
- ``schedules`` schedules: the cron entries, next due and latest firing
- ``backup``   a consistent copy of a live state dir
- ``watch``    the live table
- ``doctor``   what the machine offers (containment, pidfd, subreaper, filesystem, fsync)
- ``ui``       the web view's address, with its one-time token

Every command but ``serve`` is a ledger client (``wu.connect``): it reads the
state dir's ledger and writes only submits and requests, so it works from any
shell whether or not a supervisor runs.
"""

from __future__ import annotations

from workunits._cli import (  # noqa: F401 - each module registers its commands on import
    backup,
    control,
    doctor,
    inspect,
    mcp,
    schedules,
    serve,
    signals,
    submit,
    tail,
    ui,
    waiting,
    watch,
)
from workunits._cli._app import Exit, cli

__all__ = ["Exit", "cli", "main"]


def main() -> None:
    """The console script's entry point."""
    cli.main(prog_name="workunits")
