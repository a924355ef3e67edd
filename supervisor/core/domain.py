"""A job as typed values: JobSpec (what a user asked for, schedule parsed) and Job (a stored
job: its id, spec and planner marks). Built by validation (jobspec.py) or from a row at the
store boundary (Job.from_row). No I/O.

A schedule is parsed where it enters (the API's validation, or a row read back) and carried
from there: the planner and the views use `spec.schedule`, never the cron text again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol

from supervisor.core import schedule
from supervisor.core.errors import InvalidSpec
from supervisor.core.events import NotifyRule
from supervisor.core.exitpolicy import DEFAULT_POLICY, ExitPolicy
from supervisor.core.model import Catchup, Overlap
from supervisor.core.schedule import CronSchedule, OneOffSchedule


class Row(Protocol):
    """A database row read by column name (an asyncpg Record)."""

    def __getitem__(self, key: str, /) -> Any: ...

    def get(self, key: str) -> Any: ...


@lru_cache(maxsize=4096)
def cron_schedule(expression: str, timezone: str) -> CronSchedule:
    """schedule.parse_cron, memoized: a planner reads the same few (cron, zone) pairs back for
    every job, and parsing costs more than planning an hour of runs."""
    return schedule.parse_cron(expression, timezone)


@dataclass(frozen=True, slots=True)
class UnloadableSchedule:
    """A stored schedule this host cannot load (its tzdata lacks the zone, its croniter
    rejects the cron): the row still loads, and using the schedule raises `error`, so the
    planner skips this one job (planning.PlanFailure) instead of stopping."""

    cron: str | None
    run_at: datetime | None
    timezone: str
    error: InvalidSpec = field(compare=False)

    def next_after(self, after: datetime) -> datetime | None:
        raise InvalidSpec(self.error.field, self.error.message)

    def between(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        raise InvalidSpec(self.error.field, self.error.message)


JobSchedule = CronSchedule | OneOffSchedule | UnloadableSchedule


def stored_schedule(cron: str | None, run_at: datetime | None, timezone: str) -> JobSchedule:
    """The schedule of stored columns; never raises (see UnloadableSchedule)."""
    try:
        if cron is not None:
            return cron_schedule(cron, timezone)
        assert run_at is not None  # the jobs_one_schedule constraint
        return OneOffSchedule(run_at, schedule.load_zone(timezone))
    except InvalidSpec as exc:
        return UnloadableSchedule(cron, run_at, timezone, exc)


def cron_of(s: JobSchedule) -> str | None:
    if isinstance(s, CronSchedule):
        return s.expression
    return None if isinstance(s, OneOffSchedule) else s.cron


def run_at_of(s: JobSchedule) -> datetime | None:
    if isinstance(s, OneOffSchedule):
        return s.at
    return None if isinstance(s, CronSchedule) else s.run_at


def timezone_of(s: JobSchedule) -> str:
    return s.timezone if isinstance(s, UnloadableSchedule) else s.zone.key


@dataclass(frozen=True, slots=True)
class JobLimits:
    """How many runs of a job may run at once across all hosts: at most `max_concurrent`
    of its own (None: no limit of its own), and within its concurrency `group`'s limit."""

    group: str | None = None
    max_concurrent: int | None = None

    @property
    def limited(self) -> bool:
        return self.group is not None or self.max_concurrent is not None


NO_LIMITS = JobLimits()


@dataclass(frozen=True, slots=True)
class JobSpec:
    """Everything a user sets on a job; the defaults are the API's."""

    name: str
    type: str
    schedule: JobSchedule
    payload: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = 3
    timeout_seconds: float | None = None  # None: the handler's default on the running host
    retry_base_seconds: float = 10.0
    retry_cap_seconds: float = 3600.0
    catchup: Catchup = Catchup.LATEST
    catchup_window_seconds: float = 3600.0
    overlap: Overlap = Overlap.ALLOW
    paused: bool = False
    exit_policy: ExitPolicy = DEFAULT_POLICY  # which endings succeed, end the run, are retried
    # Its notify list (channels.py stores it beside the job); None: not given, unchanged.
    notify: tuple[NotifyRule, ...] | None = None
    limits: JobLimits = NO_LIMITS  # concurrency across hosts
    # Pause the job after this many consecutive dead runs of the handler's doing (None: never).
    pause_after_failures: int | None = None
    job_failing_after: int = 1  # job_failing when this many consecutive runs ended dead
    expect_success_within_seconds: float | None = None  # job_silent after this without success
    late_after_seconds: float | None = None  # run_late after this wait (None: ready_max_lag)
    ping_url: str | None = None  # GET {ping_url}/start, {ping_url}, {ping_url}/fail

    # The schedule as its three stored columns (and the API's fields).
    @property
    def cron(self) -> str | None:
        return cron_of(self.schedule)

    @property
    def run_at(self) -> datetime | None:
        return run_at_of(self.schedule)

    @property
    def timezone(self) -> str:
        return timezone_of(self.schedule)

    @property
    def schedule_columns(self) -> tuple[str | None, datetime | None, str]:
        """(cron, run_at, timezone): what a schedule change compares."""
        return self.cron, self.run_at, self.timezone


@dataclass(frozen=True, slots=True)
class Job:
    """A stored, live job: its spec plus the planner's bookkeeping."""

    id: int
    spec: JobSpec
    planned_until: datetime | None  # every fire time <= this has a run row
    plan_after: datetime  # the planner looks at the job again once now() >= this
    created_at: datetime
    updated_at: datetime
    pause_reason: str | None = None  # why it is paused, if anyone said (cleared on resume)

    @classmethod
    def from_row(cls, row: Row, schedule: JobSchedule | None = None) -> Job:
        """A jobs row as a Job. `schedule`: the already parsed schedule of this row (the
        caller just wrote it), so it is not parsed again."""
        if schedule is None:
            schedule = stored_schedule(row["cron"], row["run_at"], row["timezone"])
        spec = JobSpec(
            name=row["name"],
            type=row["type"],
            schedule=schedule,
            payload=row["payload"],
            max_attempts=row["max_attempts"],
            timeout_seconds=row["timeout_seconds"],
            retry_base_seconds=row["retry_base_seconds"],
            retry_cap_seconds=row["retry_cap_seconds"],
            catchup=Catchup(row["catchup"]),
            catchup_window_seconds=row["catchup_window_seconds"],
            overlap=Overlap(row["overlap"]),
            paused=row["paused"],
            exit_policy=ExitPolicy.from_columns(
                row["success_exit_codes"], row["dead_on"], row["retry_on"]
            ),
            limits=JobLimits(row.get("concurrency_group"), row.get("max_concurrent")),
            pause_after_failures=row["pause_after_failures"],
            job_failing_after=row["job_failing_after"],
            expect_success_within_seconds=row["expect_success_within_seconds"],
            late_after_seconds=row["late_after_seconds"],
            ping_url=row["ping_url"],
        )
        return cls(
            id=row["id"],
            spec=spec,
            planned_until=row["planned_until"],
            plan_after=row["plan_after"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            pause_reason=row.get("pause_reason"),
        )
