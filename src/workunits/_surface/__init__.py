"""One definition of the API every surface offers: its submit options and its verbs.

The four surfaces -- ``Supervisor`` (in-process), ``Client`` (through the
ledger), ``HttpClient`` (through ``serve --http``) and ``UnitContext`` (a unit,
through its channel) -- offer the same verbs with the same options. Each is
written once here:

- ``options``: every submit option -- name, type, default, documentation,
  validation, its ``workunits submit`` flag and its HTTP field;
- ``submits``: the submit verbs (``shell``, ``agent``...) and the options each takes;
- ``submission``: what a submit verb hands to its surface, and the specs built from it;
- ``ops``: the operations the other verbs hand to their surface (plain data);
- ``verbs``: every other verb, written once (synchronously) over ``transport``;
- ``surfaces``: which surface offers which verb and option, and why one does not;
- ``handle``: the base every surface's handle shares.

``tools/gen_surfaces.py`` writes ``_generated.py`` from them: each surface's
verbs with their real signatures, and their ``_async`` twins. Each surface then
implements only its transport: how an operation reaches the supervisor.

Imported by the unit process too: nothing here loads pykka, SQLite, asyncio
or the supervisor.
"""
