"""Numbered, forward-only SQL migrations (applied by supervisor.core.migrator.migrate)."""
