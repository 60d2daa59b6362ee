"""What crosses a boundary, as plain data: specs, actor messages, unit frames, the zygote protocol.

The layer between the core (ids, status, record, errors) and the ledger, the
zygote and the unit runtime: nothing here imports pykka or sqlite3, so a unit
process and a ``wu.connect`` client can load it.
"""
