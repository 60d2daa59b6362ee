"""Isolation of units: the kernel's means, and what the machine offers.

A unit reaches the runtime only through what it was given (DESIGN invariant
15). The policy users write is domain vocabulary (``_core.sandbox.Sandbox``);
this package holds what this machine can enforce (``probe``), the
supervisor's side (``isolation``: each unit's policy checked, and its
confinement), the plain confinement a unit process applies to itself
(``plan``), and the kernel interfaces behind it: ``namespace`` (the state dir
hidden), ``landlock`` (filesystem, TCP ports, signal and ptrace scopes),
``seccomp`` (sockets), ``limits`` (cgroups and rlimits), all through ctypes
(``_libc``). ``unit`` is the zygote's side.

Imported by the zygote and the unit process: it loads neither pykka nor
sqlite3, and imports nothing of workunits but ``_core``.
"""
