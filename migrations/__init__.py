"""Numbered, forward-only SQL migrations (applied by supervisor.store.migrate)."""
