"""Pooled units: long-lived worker processes that run short units one at a time."""

from workunits._pool.workers import WorkerPool as WorkerPool
