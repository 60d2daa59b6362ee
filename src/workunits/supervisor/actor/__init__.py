"""The supervisor's actor side: what runs on the ``SupervisorActor``'s thread.

``supervisor_actor`` composes the parts, each a module here and each owned by
the actor and called only from its thread: the registry and one slot per unit
(``registry``, ``slots``, ``units``), the kinds table, starting (``starts``,
``submits``, ``delays``), ending (``endings``, ``control``), ``eviction`` and
the ``deadlines`` the ticks drain, notices and messages (``notices``,
``messaging``, ``asks``, ``signals``, ``children``), retries and reruns,
schedules, ``recovery``, ``activity`` (progress and stalls), output reads, and
the ledger side (``ledger_mirror``, ``failed_writes``). ``requests`` are the
typed messages the caller's side asks it. Two threads of its own feed it:
``ticker`` (its ticks) and the Reaper, whose pids wait in ``pids``.

Nothing here imports the caller's side (``workunits.supervisor``'s other
modules): an import-linter contract says so.
"""
