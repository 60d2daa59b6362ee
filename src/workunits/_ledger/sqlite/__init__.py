"""The SQLite backend, the embedded default: ``<state_dir>/ledger.db`` in WAL mode.

``db`` is the connection and its transaction discipline, ``schema`` the tables
and their migrations, ``backup`` a consistent copy of a live state dir. Its
sibling ``postgres`` is the same ledger in PostgreSQL; the table modules beside
them (``_ledger/*.py``) speak to either through ``_ledger.backend``.
"""
