"""Tests that kill mutants `make mutate` found surviving in the lifecycle core."""

from __future__ import annotations
