"""The PostgreSQL backend (``ledger="postgresql://..."``, the ``[postgres]`` extra).

``db`` is the connection pool and transactions, ``schema`` the tables and their
migrations, ``sql`` the one rewriting of the table modules' SQLite dialect,
``listen`` the LISTEN connection that wakes a supervisor, ``valuestore`` large
values kept in the database itself. Its sibling ``sqlite`` is the default.
Empty on purpose: nothing imports psycopg until a PostgreSQL ledger is opened.
"""
