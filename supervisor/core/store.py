"""The data layer: every runtime query, one named block of queries.sql per Store method.

A Store wraps a pool or one connection; `transaction()` yields a Store bound to a connection
inside a transaction. Jobs come back as domain.Job (built by Job.from_row here, the
boundary), runs, attempts and workers as records.py values, built here too. Migrations
live in migrator.py.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from struct import pack
from typing import Any, cast

from supervisor.core.db import Record
from supervisor.core.domain import Job, JobSpec
from supervisor.core.errors import UniqueConflict
from supervisor.core.history import History, OpenRange, TimeRange
from supervisor.core.model import RunStatus
from supervisor.core.runpath import RunPath


class Store(History, RunPath):
    """Every runtime query, one method per `-- name:` block (the API's history reads are in
    History, a host's run path in RunPath)."""

    # ------------------------------------------------------------ misc

    async def now(self) -> datetime:
        return cast(datetime, await self._fetchval("now"))

    async def notify_wake(self, types: Sequence[str] = ("",)) -> None:
        """Wake hosts that can run `types` ('' for any), a few seats first (DESIGN.md,
        Fleet); sent at COMMIT."""
        await self._fetchval("notify_wake", list(types), random.randrange(1 << 30))

    # ------------------------------------------------------------ jobs

    async def insert_job(self, spec: JobSpec) -> Job:
        row = await self._fetchrow("insert_job", *_job_args(spec))
        assert row is not None
        return Job.from_row(row, spec.schedule)

    async def get_job(self, job_id: int) -> Job | None:
        return _job(await self._fetchrow("get_job", job_id))

    async def get_job_by_name(self, name: str) -> Job | None:
        return _job(await self._fetchrow("get_job_by_name", name))

    async def lock_job(self, job_id: int) -> Job | None:
        return _job(await self._fetchrow("lock_job", job_id))

    async def list_jobs(
        self,
        *,
        type: str | None = None,
        paused: bool | None = None,
        name_prefix: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Job]:
        rows = await self._fetch("list_jobs", type, paused, name_prefix, after_id, limit)
        return [Job.from_row(r) for r in rows]

    async def update_job(self, job_id: int, spec: JobSpec) -> Job | None:
        row = await self._fetchrow("update_job", job_id, *_job_args(spec))
        return None if row is None else Job.from_row(row, spec.schedule)

    async def reset_job_plan(self, job_id: int) -> None:
        await self._execute("reset_job_plan", job_id)

    async def delete_unstarted_future_runs(self, job_id: int) -> int:
        return _rowcount(await self._execute("delete_unstarted_future_runs", job_id))

    async def sync_unstarted_runs(
        self, job_id: int, type: str, exclusive: bool, max_attempts: int
    ) -> None:
        await self._execute("sync_unstarted_runs", job_id, type, exclusive, max_attempts)

    async def soft_delete_job(self, job_id: int) -> Job | None:
        return _job(await self._fetchrow("soft_delete_job", job_id))

    async def cancel_unstarted_runs(self, job_id: int, reason: str) -> int:
        return _rowcount(await self._execute("cancel_unstarted_runs", job_id, reason))

    async def set_job_paused(self, job_id: int, paused: bool) -> Job | None:
        return _job(await self._fetchrow("set_job_paused", job_id, paused))

    async def backfill_holes(self, job_id: int, instants: list[datetime]) -> list[datetime]:
        """Of `instants`, those the job has no run at."""
        return [r["at"] for r in await self._fetch("backfill_holes", job_id, instants)]

    async def insert_backfill_runs(self, job_id: int, instants: list[datetime]) -> list[int]:
        return [r["id"] for r in await self._fetch("insert_backfill_runs", job_id, instants)]

    async def set_pause_reason(self, job_id: int, reason: str | None) -> Job | None:
        """A paused job's reason (None: none); None when it is not a live paused job."""
        return _job(await self._fetchrow("set_pause_reason", job_id, reason))

    # ------------------------------------------------------------ planning

    async def pick_jobs_to_plan(self, limit: int) -> tuple[list[Job], datetime | None]:
        """Jobs due for planning, locked, and the database's now() (None: no job is due)."""
        rows = await self._fetch("pick_jobs_to_plan", limit)
        return [Job.from_row(r) for r in rows], rows[0]["db_now"] if rows else None

    async def insert_planned_runs(self, p: PlannedRuns) -> int:
        """Insert what is not planned yet; returns how many were inserted.

        A plan with no missed run (all but a catch-up's) whose jobs all exist is copied in
        (binary COPY, in a savepoint): no conflict check, no statement to execute per row.
        Its fire times lie after each job's mark, under the job's row lock, so they are new
        unless a manual run took one or a schedule change moved a mark back: the unique
        violation then rolls back to the savepoint and the plan goes through
        insert_planned_runs_idempotent, as a plan with missed runs or a missing job does.
        """
        if not p.by_instant:
            return 0
        if not p.missed_total and not await self.count_missing_jobs(p.job_ids):
            try:
                async with self.transaction() as sp:
                    return _rowcount(await sp._copy_in("runs", PLANNED_RUN_COLUMNS, p.copy_data()))
            except UniqueConflict as exc:  # a fire time exists already
                if exc.constraint != "runs_job_scheduled_at":
                    raise
        return await self.insert_planned_runs_idempotent(p)

    async def count_missing_jobs(self, job_ids: Sequence[int]) -> int:
        """How many of `job_ids` are no job (runs have no foreign key to jobs)."""
        return cast(int, await self._fetchval("count_missing_jobs", list(job_ids)))

    async def insert_planned_runs_idempotent(self, p: PlannedRuns) -> int:
        """Insert what is not planned yet, the missed runs recorded skipped (with their
        run_missed events); returns how many were inserted."""
        if not p.by_instant:
            return 0
        return cast(int, await self._fetchval("insert_planned_runs_idempotent", *p.columns()))

    async def set_plan_marks(self, marks: Sequence[tuple[int, datetime | None, datetime]]) -> None:
        if marks:
            await self._execute("set_plan_marks", *zip(*marks, strict=True))

    async def count_jobs_behind(self) -> int:
        return cast(int, await self._fetchval("count_jobs_behind"))

    # ------------------------------------------------------------ heartbeat ping

    async def heartbeat_ping(self, url: str) -> bool:
        """The minute's heartbeat ping; False when a planner wrote it already."""
        return _rowcount(await self._execute("heartbeat_ping", url)) == 1

    # ------------------------------------------------------------ retention

    async def prune_runs(
        self, keep_succeeded: float, keep_failed: float, limit: int, after: datetime | None = None
    ) -> tuple[int, datetime | None]:
        """Delete up to `limit` finished runs older than their retention (seconds), finished
        at or after `after` (where the sweep's previous batch ended); returns how many and
        the newest finished_at among them (the next batch's `after`)."""
        row = await self._fetchrow("prune_runs", keep_succeeded, keep_failed, limit, after)
        assert row is not None
        return row["deleted"], row["reached"]

    async def prune_deliveries(self, keep: float, limit: int) -> int:
        """Delete up to `limit` finished deliveries whose event is older than `keep` s."""
        return _rowcount(await self._execute("prune_deliveries", keep, limit))

    # ------------------------------------------------------------ observability

    async def late_runs(self, older_than: float, limit: int) -> list[Record]:
        return await self._fetch("late_runs", older_than, limit)

    async def database_gauges(self, exact_below: int) -> Record:
        """The API's database-wide gauges; statuses estimated at `exact_below` rows or more."""
        row = await self._fetchrow("database_gauges", exact_below)
        assert row is not None
        return row

    async def last_success_ages(self, limit: int) -> list[Record]:
        return await self._fetch("last_success_ages", limit)

    # ------------------------------------------------------------ workers

    async def upsert_worker(
        self,
        worker_id: str,
        host: str,
        pid: int,
        types: list[str],
        concurrency: int,
        version: str,
        lease_ttl: float,
    ) -> None:
        await self._execute(
            "upsert_worker", worker_id, host, pid, types, concurrency, version, lease_ttl
        )

    async def touch_worker(self, worker_id: str, running: int) -> None:
        await self._execute("touch_worker", worker_id, running)

    async def stop_worker(self, worker_id: str) -> None:
        await self._execute("stop_worker", worker_id)

    # ------------------------------------------------------------ api

    async def job_ids_by_name(self, name: str) -> list[int]:
        return [r["id"] for r in await self._fetch("job_ids_by_name", name)]

    async def type_has_live_worker(self, type: str) -> bool:
        return bool(await self._fetchval("type_has_live_worker", type))

    async def replan_one_off(self, job_id: int) -> None:
        await self._execute("replan_one_off", job_id)

    async def trigger_run(
        self, job_id: int, payload: dict[str, Any] | None, key: str | None, shift_us: int = 0
    ) -> int | None:
        """Insert a manual run due now; None when the job is gone or a unique key clashed."""
        return cast(int | None, await self._fetchval("trigger_run", job_id, payload, key, shift_us))

    async def run_by_idempotency_key(self, job_id: int, key: str) -> Record | None:
        return await self._fetchrow("run_by_idempotency_key", job_id, key)

    async def requeue_run(self, run_id: int) -> int | None:
        return cast(int | None, await self._fetchval("requeue_run", run_id))

    async def requeue_runs(
        self,
        statuses: Sequence[str],
        job_ids: Sequence[int] | None,
        scheduled: TimeRange,
        finished: OpenRange,
    ) -> int:
        ids = None if job_ids is None else list(job_ids)
        status = await self._execute("requeue_runs", list(statuses), ids, *scheduled, *finished)
        return _rowcount(status)

    async def lock_run(self, run_id: int) -> RunStatus | None:
        """Lock one run for a state change; its status, None if there is no such run."""
        row = await self._fetchrow("lock_run", run_id)
        return None if row is None else RunStatus(row["status"])

    async def cancel_waiting_run(self, run_id: int, reason: str) -> int | None:
        return cast(int | None, await self._fetchval("cancel_waiting_run", run_id, reason))

    async def revoke_running_run(self, run_id: int, reason: str) -> int | None:
        return cast(int | None, await self._fetchval("revoke_running_run", run_id, reason))


# A binary COPY of planned runs (PostgreSQL's COPY BINARY file format): the signature, no
# flags, no header extension; per row the field count and each field as length + bytes; a
# trailer. Timestamps are microseconds since 2000-01-01 UTC.
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_COPY_TRAILER = b"\xff\xff"
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
PLANNED_RUN_COLUMNS = ("job_id", "scheduled_at", "run_after", "type", "exclusive", "max_attempts")


def _pg_timestamp(at: datetime) -> int:
    d = at - _PG_EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


@dataclass(slots=True)
class PlannedRuns:
    """Runs to insert: per job its type, exclusivity and attempts; per distinct instant the
    jobs that have a run then. A plan of 500 jobs is some 11,000 runs but far fewer distinct
    instants (jobs share fire times: every minute, every hour), so each instant is encoded
    once, and the runs come out in time order (queries.sql, insert_planned_runs_idempotent;
    DESIGN.md, Planning)."""

    job_ids: list[int] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    exclusive: list[bool] = field(default_factory=list)
    max_attempts: list[int] = field(default_factory=list)
    # Per job, its latest missed fire time (None: none is missed): it and the job's earlier
    # times are older than the catch-up window.
    last_missed: list[datetime | None] = field(default_factory=list)
    by_instant: dict[datetime, list[int]] = field(default_factory=dict)  # -> job indexes
    missed_total: int = 0

    def add(self, job_id: int, type_: str, exclusive: bool, max_attempts: int,
            times: Sequence[datetime], missed: int = 0) -> None:  # fmt: skip
        """The job's runs at `times` (ascending), the first `missed` of them missed."""
        job = len(self.job_ids)
        self.job_ids.append(job_id)
        self.types.append(type_)
        self.exclusive.append(exclusive)
        self.max_attempts.append(max_attempts)
        self.last_missed.append(times[missed - 1] if missed else None)
        by_instant = self.by_instant
        for t in times:
            jobs = by_instant.get(t)
            if jobs is None:
                by_instant[t] = [job]
            else:
                jobs.append(job)
        self.missed_total += missed

    def columns(self) -> tuple[Any, ...]:
        """The arguments of insert_planned_runs_idempotent: per run its job, its instant's
        position in the instants ($7) and whether it is missed ($8, NULL when none is)."""
        run_jobs: list[int] = []
        run_at: list[int] = []
        missed: list[bool] = []
        ids, last_missed = self.job_ids, self.last_missed
        for position, (at, jobs) in enumerate(self.by_instant.items(), 1):
            run_jobs += [ids[j] for j in jobs]
            run_at += [position] * len(jobs)
            if self.missed_total:
                missed += [(m := last_missed[j]) is not None and at <= m for j in jobs]
        return (self.job_ids, self.types, self.exclusive, self.max_attempts, run_jobs,
                run_at, list(self.by_instant), missed if self.missed_total else None)  # fmt: skip

    def copy_data(self) -> bytes:
        """The runs as binary COPY rows of PLANNED_RUN_COLUMNS, in time order: consecutive
        rows land on the same leaf pages of the time-ordered indexes, and runs due together
        share heap pages. Missed runs are not here (insert_planned_runs takes the SQL path)."""
        heads = [pack(">hiq", 6, 8, job_id) for job_id in self.job_ids]
        tails = [
            pack(">i", len(t)) + t + pack(">i?ii", 1, e, 4, m)
            for t, e, m in zip(
                (t.encode() for t in self.types), self.exclusive, self.max_attempts, strict=True
            )
        ]
        parts = [_COPY_HEADER]
        for at in sorted(self.by_instant):
            us = _pg_timestamp(at)
            both = pack(">iqiq", 8, us, 8, us)  # scheduled_at, run_after
            parts += [heads[j] + both + tails[j] for j in self.by_instant[at]]
        parts.append(_COPY_TRAILER)
        return b"".join(parts)


# The job columns in the parameter order of insert_job ($1..) and update_job ($2..), then
# the exit policy's three, then NOTIFY_COLUMNS.
JOB_COLUMNS = (
    "name",
    "type",
    "payload",
    "cron",
    "run_at",
    "timezone",
    "max_attempts",
    "timeout_seconds",
    "retry_base_seconds",
    "retry_cap_seconds",
    "catchup",
    "catchup_window_seconds",
    "overlap",
    "paused",
)
NOTIFY_COLUMNS = (
    "pause_after_failures",
    "job_failing_after",
    "expect_success_within_seconds",
    "late_after_seconds",
    "ping_url",
)


def _job_args(spec: JobSpec) -> list[Any]:
    return [
        *(getattr(spec, c) for c in JOB_COLUMNS),
        *spec.exit_policy.columns(),
        *(getattr(spec, c) for c in NOTIFY_COLUMNS),
    ]


def _job(row: Record | None) -> Job | None:
    return None if row is None else Job.from_row(row)


def _rowcount(status: str) -> int:
    """asyncpg returns the command tag ("INSERT 0 5", "UPDATE 3"); the count is last."""
    return int(status.rsplit(" ", 1)[-1])
