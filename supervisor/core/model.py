"""Enums mirroring the database's enum types (a test keeps them equal), and the rule for
job and handler type names. No I/O.

Rows leave the store as domain.Job and records.py values; these enums name the
values that code branches on.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum

# Job names and handler types are names, never paths: letters, digits and -_.: without a
# leading dot (so never ".", ".." or a hidden-file name). The API, the OpenAPI document and
# the handler registry all use these; match with fullmatch.
NAME_PATTERN = r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,199}"
TYPE_PATTERN = r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,99}"
NAME = re.compile(NAME_PATTERN)
TYPE = re.compile(TYPE_PATTERN)
NAME_RULE = "must be 1-200 letters, digits or -_.: and must not start with a dot"
TYPE_RULE = "must be 1-100 letters, digits or -_.: and must not start with a dot"


# The longest URL taken (a job's ping_url, a channel's url, heartbeat_ping_url).
MAX_URL = 2000
# Ids are bigint: the largest a run, job or attempt id can be (a bound for input checks).
MAX_ID = 2**63 - 1
# The ends of time as asyncpg sends them ('infinity', '-infinity'): open bounds of a range.
INFINITY = datetime.max.replace(tzinfo=UTC)
MINUS_INFINITY = datetime.min.replace(tzinfo=UTC)


def utc_iso(ts: datetime) -> str:
    """An instant as the API, the logs and handlers write it: ISO 8601 in UTC with a Z
    (isoformat, not strftime: a year before 1000 keeps its four digits)."""
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


class RunStatus(StrEnum):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # an attempt failed; another is scheduled after backoff
    DEAD = "dead"  # out of attempts, or a non-retryable failure
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # not run: catch-up or overlap policy (skip_reason says which)


# The run states, declared once for the API, the dashboard and the CLI (the SQL has its own).
# Final: nothing moves the run on (only a requeue of a dead one starts it again).
FINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.DEAD, RunStatus.CANCELLED, RunStatus.SKIPPED})
# Waiting for a slot or a retry: due now or later, no attempt running.
WAITING = frozenset({RunStatus.SCHEDULED, RunStatus.FAILED})
# What a cancel may end: a waiting run, or a running one (its lease is revoked).
CANCELLABLE = WAITING | {RunStatus.RUNNING}
# What a requeue may start again (a failed run also waits for its own retry).
REQUEUEABLE = frozenset({RunStatus.DEAD, RunStatus.FAILED})


class Outcome(StrEnum):
    """How one attempt ended."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    OOM_KILLED = "oom_killed"  # killed by the kernel for its cgroup's memory limit
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
    BACKFILL = "backfill"  # by a backfill of instants that had no run (migration 0007)


class SkipReason(StrEnum):
    """Why a planned instant was recorded skipped instead of run (runs.skip_reason)."""

    MISSED = "missed"  # past the catch-up window or policy when it came due
    OVERLAP = "overlap"  # overlap=skip and the job's previous run was still running
