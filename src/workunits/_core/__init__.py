"""The domain's vocabulary: IDs, statuses, records, errors, policies, notices, time.

Plain values and the small objects a consumer holds (``Claim``, ``Mailbox``,
``Retain``), which do no I/O of their own: what they must write they are given
as callables by whoever makes them. Imports nothing of workunits outside this
package, so every layer may import it, a unit process included. Empty on
purpose: each module is imported by name, so a unit process loads only what it uses.
"""
