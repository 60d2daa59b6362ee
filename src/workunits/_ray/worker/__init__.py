"""What runs inside a Ray worker for the remote kind: the task's body, a remote
teammate's host actor, ``wu.current()`` there, the capture of fds 1 and 2, and the
frames that stream back to the supervisor.

Nothing here imports pykka, SQLite, the ledger, the actors or the supervisor (an
import-linter contract says so): a Ray worker loads only this and the unit
runtime. Empty on purpose.
"""
