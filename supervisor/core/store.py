"""The data layer: every runtime query, one named block of queries.sql per Store method.

A Store wraps a pool or one connection; `transaction()` yields a Store bound to a connection
inside a transaction. Jobs come back as domain.Job (built by Job.from_row here, the
boundary), runs, attempts and workers as records.py values, built here too. Migrations
live in migrator.py.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from operator import attrgetter
from struct import pack
from typing import Any, cast

from supervisor.core.db import Record
from supervisor.core.domain import Job, JobSpec
from supervisor.core.errors import UniqueConflict
from supervisor.core.history import History, OpenRange, TimeRange
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.records import CatchUp, Claim, Reaped


class Store(History):
    """Every runtime query, one method per `-- name:` block (the API's history reads are in
    History)."""

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

    async def skip_missed_runs(
        self,
        misfire_grace: float,
        limit: int,
        after: tuple[datetime, int] | None = None,
        *,
        old: bool = True,
    ) -> CatchUp:
        """Judge at most `limit` old unstarted runs (none without `old`), from after `after`
        (a previous pass's resume_after), and at most `limit` due runs of exclusive jobs
        that run now; record the skipped."""
        at, run_id = after if after is not None else (None, None)
        window = limit if old else 0
        rows = await self._fetch("skip_missed_runs", misfire_grace, window, at, run_id, limit)
        return CatchUp.from_rows(rows)

    # ------------------------------------------------------------ claiming and leases

    async def claim_runs(
        self,
        types: Sequence[str],
        limit: int,
        owner: str,
        lease_ttl: float,
        held: Sequence[int] | None = None,
        ahead: float = 0.0,
        misfire_grace: float = 60.0,
        after: Mapping[str, tuple[datetime, int]] | None = None,
    ) -> list[Claim]:
        """Claim runs due now or within `ahead` seconds (each Claim says when it starts).
        `held` (the runs this host is running) is given only after a claim whose outcome
        is unknown: runs leased to `owner` but not held go back. A run missed by more than
        `misfire_grace` that its catch-up policy skips is left for skip_missed_runs.
        `after`: per type, read on after this (run_after, id) instead of from the start."""
        args = _claim_args(types, limit, owner, lease_ttl, held, ahead, misfire_grace, after)
        return [Claim.from_row(r) for r in await self._fetch("claim_runs", *args)]

    async def claim_and_complete_runs(
        self,
        results: Sequence[Completion],
        types: Sequence[str],
        limit: int,
        owner: str,
        lease_ttl: float,
        ahead: float = 0.0,
        misfire_grace: float = 60.0,
        after: Mapping[str, tuple[datetime, int]] | None = None,
    ) -> tuple[list[Claim], set[int]]:
        """claim_runs and complete_runs of `results` (successes only) in one statement:
        the claimed runs, and the ids recorded (a missing id is a late result)."""
        if any(c.status is not RunStatus.SUCCEEDED for c in results):
            raise ValueError("claim_and_complete_runs records successes only")
        args = _claim_args(types, limit, owner, lease_ttl, None, ahead, misfire_grace, after)
        rows = await self._fetch(
            "claim_and_complete_runs", *args, *completion_columns(results), owner
        )
        recorded = set(rows[0]["recorded"]) if rows else set()
        return [Claim.from_row(r) for r in rows if r["id"] is not None], recorded

    async def next_due_in(
        self, types: Sequence[str], ahead: float = 0.0, since: float = 0.0
    ) -> float | None:
        """Seconds until the next run of these types is claimable with `ahead`, counting the
        runs that came within the window in the last `since` seconds (after a claim sent
        that long ago could see them) as due now (≤ 0)."""
        return cast(float | None, await self._fetchval("next_due_in", list(types), ahead, since))

    async def write_live_tails(self, rows: Sequence[tuple[int, int, int, str, str]]) -> None:
        """(run_id, attempt, lease_token, stdout, stderr) of running attempts, by run id."""
        cols = zip(*sorted(rows), strict=True)
        await self._execute("write_live_tails", *(list(c) for c in cols))

    async def renew_leases(
        self, leases: Sequence[tuple[int, int]], owner: str, lease_ttl: float
    ) -> set[int]:
        if not leases:
            return set()
        ids, tokens = zip(*sorted(leases), strict=True)  # one lock order: see complete_runs
        rows = await self._fetch("renew_leases", list(ids), list(tokens), lease_ttl, owner)
        return {r["id"] for r in rows}

    async def complete_runs(self, results: Sequence[Completion], owner: str) -> set[int]:
        """Record results; returns the ids recorded. A missing id is a late result.

        Every multi-row write of runs (renew, complete, release) sends its rows sorted by id,
        so that whatever join order a plan picks, concurrent ones lock in one order (the
        failover test once saw a heartbeat deadlock; a deadlock is retried, db.DB_ERRORS).
        """
        if not results:
            return set()
        cols = completion_columns(results)
        if any(c.status is not RunStatus.SUCCEEDED for c in results):
            return await self.complete_runs_with_events(cols, owner)
        # Successes only: the lighter statement (only job_recovered can follow; measured:
        # each data-modifying CTE costs its set-up on every call, rows or not).
        return {r["id"] for r in await self._fetch("complete_runs", *cols, owner)}

    async def warm_hot_statements(self) -> None:
        """The claim, the catch-up pass and the completions (a claim's riders too) with
        nothing to claim, skip or record: on a new connection, their generic plans (3-5 ms
        of the server's CPU each) are made here instead of on the first claim or pass that
        uses the connection."""
        await self.claim_runs([], 0, "", 1.0)  # no type offered, no run claimed
        await self.skip_missed_runs(60.0, 0, old=False)  # judges at most 0 runs
        await self.complete_runs_with_events(completion_columns([]), "")
        # complete_runs sends nothing for no results: one for a run that cannot exist (ids
        # start at 1) matches no row.
        nothing = [Completion(0, 0, RunStatus.SUCCEEDED, 0.0, Outcome.SUCCEEDED)]
        await self.complete_runs(nothing, "")
        await self.claim_and_complete_runs(nothing, [], 0, "", 1.0)

    async def complete_runs_with_events(self, cols: list[list[Any]], owner: str) -> set[int]:
        """complete_runs for a batch with failed or dead results: also their notifications."""
        return {r["id"] for r in await self._fetch("complete_runs_with_events", *cols, owner)}

    async def release_runs(self, leases: Sequence[tuple[int, int]], owner: str) -> set[int]:
        if not leases:
            return set()
        ids, tokens = zip(*sorted(leases), strict=True)  # one lock order: see complete_runs
        rows = await self._fetch("release_runs", list(ids), list(tokens), owner)
        return {r["id"] for r in rows}

    async def reap_expired(self, limit: int) -> list[Reaped]:
        return [Reaped.from_row(r) for r in await self._fetch("reap_expired", limit)]

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


@dataclass(frozen=True, slots=True)
class Completion:
    """One finished attempt, fenced by (run_id, lease_token): columns of complete_runs."""

    run_id: int
    lease_token: int
    status: RunStatus  # what the run becomes: succeeded | failed (retry in retry_in s) | dead
    retry_in: float
    outcome: Outcome  # how the attempt ended
    error: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    stdout_tail: str | None = None
    stderr_tail: str | None = None
    cpu_seconds: float | None = None
    peak_rss_bytes: int | None = None
    stdout_replaced: bool = False
    stderr_replaced: bool = False
    ping_url: str | None = None  # the job's, from the claim: its success or fail ping

    def without_output(self, why: str) -> Completion:
        """The same result with its tails dropped and `why` added to the error."""
        error = f"{self.error}\n{why}" if self.error else why
        return replace(self, error=error, stdout_tail=None, stderr_tail=None)


_COMPLETION_FIELDS = tuple(f.name for f in fields(Completion))
_COMPLETION_COLUMNS = attrgetter(*_COMPLETION_FIELDS)
_RUN_ID = attrgetter("run_id")


def completion_columns(results: Sequence[Completion]) -> list[list[Any]]:
    """complete_runs' array parameters ($1..$15, one per Completion field), rows sorted by
    run id (complete_runs: one lock order); one empty array each when there are none."""
    if not results:
        return [[] for _ in _COMPLETION_FIELDS]
    ordered = sorted(results, key=_RUN_ID)
    return [list(c) for c in zip(*map(_COMPLETION_COLUMNS, ordered), strict=True)]


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


def _claim_args(
    types: Sequence[str],
    limit: int,
    owner: str,
    lease_ttl: float,
    held: Sequence[int] | None,
    ahead: float,
    misfire_grace: float,
    after: Mapping[str, tuple[datetime, int]] | None,
) -> list[Any]:
    """claim_runs' $1-$9."""
    offered = list(dict.fromkeys(types))
    cursors = [(after or {}).get(t) for t in offered]
    return [
        offered, limit, owner, lease_ttl, None if held is None else list(held), ahead,
        misfire_grace, [None if c is None else c[0] for c in cursors],
        [None if c is None else c[1] for c in cursors],
    ]  # fmt: skip
