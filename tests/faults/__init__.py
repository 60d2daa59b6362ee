"""Fault-injection, load and security tests (issue 7)."""
