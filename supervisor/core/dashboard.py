"""The dashboard's reads and writes (api/ui): the named blocks of ui.sql, one method each.
`store()` gives the Store over the same pool or connection, so one transaction can mix
these with the job and run operations. Rows leave as the frozen values below."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from supervisor.core.db import Record
from supervisor.core.model import FINAL, RunStatus
from supervisor.core.sql import Queries
from supervisor.core.store import Store


@dataclass(frozen=True, slots=True)
class JobLine:
    """One row of the jobs list: the job's schedule and what its runs say."""

    id: int
    name: str
    type: str
    cron: str | None
    run_at: datetime | None
    timezone: str
    paused: bool
    pause_reason: str | None
    next_at: datetime | None  # its next planned run
    last_status: RunStatus | None  # its latest run due by now that left `scheduled`
    last_at: datetime | None
    recent_total: int  # of its last 20 runs that ended (succeeded, failed or dead)
    recent_succeeded: int
    next_run_id: int | None = None  # with next_at, the keyset position by next run
    last_run_id: int | None = None
    last_skip_reason: str | None = None

    @property
    def success_rate(self) -> float | None:
        return self.recent_succeeded / self.recent_total if self.recent_total else None

    @property
    def ended(self) -> bool:
        """A one-off whose run is over: nothing planned, its last run final (a new run
        comes only from a trigger; pausing it would hold nothing)."""
        return self.cron is None and self.next_at is None and self.last_status in FINAL

    @classmethod
    def from_row(cls, r: Record) -> JobLine:
        status = r["last_status"]
        return cls(
            r["id"],
            r["name"],
            r["type"],
            r["cron"],
            r["run_at"],
            r["timezone"],
            r["paused"],
            r["pause_reason"],
            r["next_at"],
            None if status is None else RunStatus(status),
            r["last_at"],
            r["recent_total"],
            r["recent_succeeded"],
            r.get("next_run_id"),
            r["last_run_id"],
            r["last_skip_reason"],
        )


@dataclass(frozen=True, slots=True, order=True)
class JobBrief:
    """A job as the jobs list's filters see it (ordered by name)."""

    name: str
    id: int
    type: str
    paused: bool

    def matches(self, f: JobFilters) -> bool:
        """The filters' text, type and paused (ui_jobs_by_name's $1-$3), checked here."""
        return (
            (f.text is None or f.text.lower() in self.name.lower())
            and (f.type is None or self.type == f.type)
            and (f.paused is None or self.paused == f.paused)
        )


@dataclass(frozen=True, slots=True)
class JobFilters:
    """The jobs list's filters (None: any)."""

    text: str | None = None  # a substring of the name, any case
    type: str | None = None
    paused: bool | None = None
    last_status: RunStatus | None = None


@dataclass(frozen=True, slots=True)
class OpenCounts:
    due: int  # scheduled or failed, run_after passed: waiting for a slot
    planned: int  # scheduled or failed, not due yet
    running: int


@dataclass(frozen=True, slots=True)
class Lateness:
    p50: float | None
    p99: float | None
    measured: int


@dataclass(frozen=True, slots=True)
class Hour:
    """A closed hour of the week (run_hours): its runs by how they ended, and how late their
    first attempts started (seconds; None when none started)."""

    hour: datetime
    succeeded: int
    failed: int
    dead: int
    late_n: int
    late_p50: float | None
    late_p99: float | None


@dataclass(frozen=True, slots=True)
class Unserved:
    id: int
    name: str
    type: str


@dataclass(frozen=True, slots=True)
class Mark:
    """A run on a job's timeline."""

    id: int
    scheduled_at: datetime
    status: RunStatus
    skip_reason: str | None
    trigger: str
    error: str | None


@dataclass(frozen=True, slots=True)
class Duration:
    id: int
    scheduled_at: datetime
    status: RunStatus
    seconds: float


class Dashboard(Queries):
    """The `ui_*` queries."""

    @classmethod
    def over(cls, store: Store) -> Dashboard:
        """The dashboard's queries over the same pool (or connection) as `store`."""
        return cls(store._ex, store._pool)

    def store(self) -> Store:
        """The Store over the same pool or connection (inside `transaction()`, the same
        transaction)."""
        return Store(self._ex, self._pool)

    async def ui_jobs_by_name(
        self, f: JobFilters, after: str, limit: int, among: list[int] | None = None
    ) -> list[JobLine]:
        rows = await self._fetch("ui_jobs_by_name", *_args(f), after, limit, among)
        return [JobLine.from_row(r) for r in rows]

    async def ui_job_last_statuses(self) -> dict[RunStatus, list[JobBrief]]:
        """Every live job that has a last run, by that run's status, in name order."""
        out: dict[RunStatus, list[JobBrief]] = {s: [] for s in RunStatus}
        for r in await self._fetch("ui_job_last_statuses"):
            out[RunStatus(r["status"])].append(JobBrief(r["name"], r["id"], r["type"], r["paused"]))
        return out

    async def ui_jobs_by_next(
        self, f: JobFilters, after: tuple[datetime, int], limit: int
    ) -> list[JobLine]:
        rows = await self._fetch("ui_jobs_by_next", *_args(f), *after, limit)
        return [JobLine.from_row(r) for r in rows]

    async def ui_job_types(self) -> list[str]:
        return [r["type"] for r in await self._fetch("ui_job_types")]

    async def ui_job_timeline(
        self, job_id: int, start: datetime, end: datetime, limit: int
    ) -> list[Mark]:
        rows = await self._fetch("ui_job_timeline", job_id, start, end, limit)
        return [
            Mark(
                r["id"],
                r["scheduled_at"],
                RunStatus(r["status"]),
                r["skip_reason"],
                r["trigger"],
                r["last_error"],
            )
            for r in rows
        ]

    async def ui_job_durations(self, job_id: int, limit: int) -> list[Duration]:
        rows = await self._fetch("ui_job_durations", job_id, limit)
        return [
            Duration(r["id"], r["scheduled_at"], RunStatus(r["status"]), r["seconds"]) for r in rows
        ]

    async def ui_count_requeueable(
        self,
        statuses: list[str],
        job_ids: list[int] | None,
        scheduled: tuple[datetime, datetime],
        finished: tuple[datetime | None, datetime | None],
        cap: int,
    ) -> int:
        """How many runs requeue_runs would move, counted up to `cap`."""
        args = (statuses, job_ids, *scheduled, *finished, cap)
        return int(await self._fetchval("ui_count_requeueable", *args))

    # ------------------------------------------------------------ overview

    async def ui_open_counts(self) -> OpenCounts:
        row = await self._fetchrow("ui_open_counts")
        assert row is not None
        return OpenCounts(row["due"], row["planned"], row["running"])

    async def ui_status_counts(self, window_s: float) -> dict[RunStatus, int]:
        rows = await self._fetch("ui_status_counts", window_s)
        return {RunStatus(r["status"]): r["n"] for r in rows}

    async def ui_outcome_buckets(
        self, window_s: float, bucket_s: float
    ) -> dict[tuple[datetime, RunStatus], int]:
        rows = await self._fetch("ui_outcome_buckets", window_s, bucket_s)
        return {(r["bucket"], RunStatus(r["status"])): r["n"] for r in rows}

    async def ui_lateness(self, window_s: float, limit: int) -> Lateness:
        row = await self._fetchrow("ui_lateness", window_s, limit)
        assert row is not None
        return Lateness(row["p50"], row["p99"], row["n"])

    async def ui_fill_hours(self, limit: int) -> int:
        """Writes up to `limit` missing or young rows of run_hours; returns how many."""
        return len(await self._fetch("ui_fill_hours", limit))

    async def ui_week_hours(self) -> list[Hour]:
        rows = await self._fetch("ui_week_hours")
        return [
            Hour(
                r["hour"],
                r["succeeded"],
                r["failed"],
                r["dead"],
                r["late_n"],
                r["late_p50"],
                r["late_p99"],
            )
            for r in rows
        ]

    async def ui_unserved_jobs(self, limit: int) -> list[Unserved]:
        rows = await self._fetch("ui_unserved_jobs", limit)
        return [Unserved(r["id"], r["name"], r["type"]) for r in rows]


def _args(f: JobFilters) -> tuple[str | None, str | None, bool | None, str | None]:
    status = None if f.last_status is None else f.last_status.value
    return f.text, f.type, f.paused, status
