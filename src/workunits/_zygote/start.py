"""The zygote process's start: its guard, its cgroups and namespace, then ``Zygote.serve``.

``python -m workunits._zygote`` runs ``main``, in the process a Supervisor
started: it stays as the guard (see ``guard``) and forks the zygote, which
preloads what every unit needs, makes the units' namespace and ruleset
(``UnitIsolation.start``) and serves (see ``server``).
"""

from __future__ import annotations

import os
import signal
import socket

from workunits._sandbox import _libc as sandbox_libc
from workunits._sandbox.limits import UnitCgroups, v1_hierarchies
from workunits._sandbox.unit import Settings, UnitIsolation
from workunits._zygote import _linux, guard, nofile
from workunits._zygote.containment import Cgroups, remove_stale
from workunits._zygote.server import Zygote
from workunits._zygote.warm import WarmSettings


def main(argv: list[str]) -> None:
    control_fd = int(argv[1])
    os.set_inheritable(control_fd, False)
    # This process stays as the zygote's guard; the child is the zygote.
    _linux.set_child_subreaper()
    warm = WarmSettings.from_environment()
    nofile.take_from_environment()  # before any fork: no child may see the variable
    settings = Settings.from_environment()  # likewise
    name = f"workunits-{os.getpid()}"
    cgroups = Cgroups.create(name)
    limit_cgroups = _limit_cgroups(name) if settings.mode != "off" else None
    if settings.mode != "off":
        # No unit may read this process's memory or /proc files, nor the zygote's (the
        # fork inherits it): their descriptors and environment are the runtime's.
        sandbox_libc.set_dumpable(False)
    guard_pid = os.getpid()
    zygote_pid = os.fork()
    if zygote_pid != 0:
        os.close(control_fd)
        guard.run(zygote_pid, cgroups, limit_cgroups)
    # Before the preload imports, which may take long (or hang): a guard killed
    # meanwhile (the supervisor closing during a start) must take us with it.
    # SIGTERM's default action ends us here; Zygote() installs its handler later.
    _linux.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != guard_pid:  # the guard died before the prctl took effect
        os._exit(1)
    for module in argv[2:]:
        __import__(module)
    control = socket.socket(fileno=control_fd)
    isolation = UnitIsolation.start(
        settings, limit_cgroups, None if cgroups is None else cgroups.root
    )
    zygote = Zygote(control, cgroups, warm, isolation)
    try:
        zygote.serve()
    finally:  # whatever broke the loop, no unit outlives the zygote
        zygote.shutdown()


def _limit_cgroups(name: str) -> UnitCgroups | None:
    """Our directories for units' memory and process limits in the writable v1
    hierarchies (after removing what guards gone unclean left there)."""
    places = v1_hierarchies()
    for place in places.values():
        remove_stale(place.own, keep=name)
    made = UnitCgroups(name, places)
    return made if made.paths else None
