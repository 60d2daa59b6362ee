"""The remote kind (``r``), all of it: work units that run on a Ray cluster.

"remote" in workunits means this kind and nothing else. What runs where:

- **supervisor process** (``actor``, ``teammate_actor``, ``placement``,
  ``runtime``, ``follower``): ``RemoteActor`` and ``RemoteTeammateActor`` are
  the kind's ``WorkActor``s (the teammate kind ``t`` with ``remote=True``);
  ``RayRuntime`` connects to Ray (or starts a local one) from one long-lived
  thread; a follower thread per running unit reads the unit's stream and tells
  the unit's ``RemoteActor``. The ledger, the output files and transcripts,
  and every record stay here.
- **Ray worker processes** (``worker/``: ``task``, ``host``, ``context``,
  ``outbox``, ``capture``, and the ``frames`` both sides read): the user's
  callable (a task) or class (a teammate actor), with ``wu.current()``
  answering from a ``RemoteContext``. They import no pykka, SQLite, ledger,
  actors or supervisor (an import-linter contract).
- **one small Ray actor per supervisor** (``worker/board``): cancel requests, the only
  thing that flows from the supervisor to a running task.

Nothing in this package imports ``ray`` at module level except the modules that
only ever run inside Ray (``task``, ``host``): ``import workunits`` stays free of
Ray, and a missing Ray is reported when a remote unit is asked for.

Streaming design: a unit's stdout/stderr, progress, checkpoints, events and its
result go up ONE Ray streaming generator (``num_returns="streaming"``) per unit,
rather than through a channel actor:

- the items travel straight from the worker to the driver that owns the task,
  with no extra hop and no shared actor that every unit's output funnels
  through (a bottleneck, and a single point of failure for all units);
- order is the generator's order, and every item yielded before the end is
  delivered before the end: "nothing lost, nothing twice" holds by construction,
  with no sequence numbers or acknowledgements of our own;
- the stream's lifetime is the task's: a force-cancelled task, a worker killed
  from outside or a lost node surfaces as an error on the same stream, so end
  and loss need no second watcher;
- Ray applies backpressure to it (``_generator_backpressure_num_objects``).

Its cost is about one extra RPC per unit (~1 ms on a local Ray), which matters
only for short bodies; a worker batches what it has (the first batch lingers
up to 50 ms), so a short unit sends exactly one item. The one thing a generator
cannot carry is the other direction (a cancel request), which is why the tiny
``CancelBoard`` actor exists; a task only talks to it when its code asks
``ctx.cancelled`` (or calls ``progress``/``checkpoint``).
"""
