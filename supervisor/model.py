"""Plain types mirroring the database: statuses, policies, jobs, runs, attempts, workers. No I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class RunStatus(StrEnum):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # an attempt failed; another is scheduled after backoff
    DEAD = "dead"  # out of attempts, or a non-retryable failure
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # not run: catch-up or overlap policy (skip_reason says which)


CLAIMABLE = (RunStatus.SCHEDULED, RunStatus.FAILED)
FINISHED = (
    RunStatus.SUCCEEDED,
    RunStatus.DEAD,
    RunStatus.CANCELLED,
    RunStatus.SKIPPED,
)


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


@dataclass(frozen=True)
class Job:
    id: int
    name: str
    type: str
    payload: dict[str, Any]
    cron: str | None
    run_at: datetime | None
    timezone: str
    max_attempts: int
    timeout_seconds: float
    retry_base_seconds: float
    retry_cap_seconds: float
    catchup: Catchup
    catchup_window_seconds: float
    overlap: Overlap
    paused: bool
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None


@dataclass(frozen=True)
class Run:
    id: int
    job_id: int
    scheduled_at: datetime
    status: RunStatus
    trigger: Trigger
    attempts: int
    max_attempts: int
    run_after: datetime
    lease_owner: str | None
    lease_token: int
    lease_expires_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    last_error: str | None
    skip_reason: str | None
    payload: dict[str, Any] | None = None
    job_name: str | None = None


@dataclass(frozen=True)
class Attempt:
    run_id: int
    attempt: int
    worker_id: str
    lease_token: int
    started_at: datetime
    finished_at: datetime | None
    outcome: Outcome
    exit_code: int | None
    signal: int | None
    error: str | None
    stdout_tail: str | None
    stderr_tail: str | None
    cpu_seconds: float | None
    peak_rss_bytes: int | None


@dataclass(frozen=True)
class Worker:
    id: str
    host: str
    pid: int
    types: list[str]
    concurrency: int
    version: str
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None = None
    running: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
