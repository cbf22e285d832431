"""Querying: the exact search over a store, and the gate fitted on it."""
