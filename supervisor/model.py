"""Enums mirroring the database's enum types (a test keeps them equal). No I/O.

Rows travel as asyncpg Records; these name the values that code branches on.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # an attempt failed; another is scheduled after backoff
    DEAD = "dead"  # out of attempts, or a non-retryable failure
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # not run: catch-up or overlap policy (skip_reason says which)


class Outcome(StrEnum):
    """How one attempt ended."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    LEASE_LOST = "lease_lost"  # reaped after the lease expired, or revoked while running
    INTERRUPTED = "interrupted"  # released at shutdown; does not consume an attempt
    CANCELLED = "cancelled"


class Catchup(StrEnum):
    LATEST = "latest"
    ALL = "all"
    NONE = "none"


class Overlap(StrEnum):
    ALLOW = "allow"
    SKIP = "skip"
    WAIT = "wait"


class Trigger(StrEnum):
    SCHEDULE = "schedule"
    MANUAL = "manual"
