"""What runs inside a unit process: ``wu.current()``, its channel, capture and transcript.

The zygote forks a unit process and calls ``child``; a pooled worker runs units
one at a time (``worker``). Nothing here imports pykka, SQLite, the ledger, the
actors or the supervisor (an import-linter contract): a unit loads only this,
``_wire``, ``_util`` and ``_core``. Named ``_unit``, not ``runtime``: the
supervisor's own ``Machinery`` is what a supervisor runs on.
"""
