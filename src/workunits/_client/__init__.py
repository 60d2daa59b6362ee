"""The client side: work units from another process, through the ledger or over HTTP.

``ledger_client`` is ``wu.connect(state_dir)`` (the ledger alone: no pykka, no
supervisor), ``follow`` reads output and notices from the ledger, and
``other_host_output`` reads a running unit's live output from the supervisor
that runs it on another host. ``http_client`` is ``wu.connect("http://...")``,
with ``http_notices`` and ``http_stream`` for its notices and output streams
(they are given the client, typed by what they call on it, and never import
its module). Runs in the caller's threads. Empty on purpose: ``import workunits`` loads none of it.
"""
