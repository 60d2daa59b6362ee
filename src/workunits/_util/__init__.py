"""Small utilities, one concept per module: JSON that comes back equal, frames on a
socket, safe output files, who holds a lease, names loaded on first use.

They may import ``workunits._core`` (they raise its errors) and nothing else of
workunits. Empty on purpose: each module is imported by name.
"""
