"""Turning a job's schedule into run rows: which fire times to insert, with which status.

Shared by the planner service and by API job updates (which replan in their own
transaction). Times come from the database clock passed in as `db_now`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from supervisor.core.domain import Job, JobSchedule
from supervisor.core.model import INFINITY, Overlap
from supervisor.core.schedule import CronSchedule
from supervisor.core.store import PlannedRuns, Store

# Planning a job takes ~0.1 ms of CPU; a batch of 500 would hold the event loop for 50 ms+
# and delay claims and spawns by as much (bench/: start lateness while 10,000 jobs are
# planned). Yielding every few jobs keeps the loop responsive.
YIELD_EVERY = 25


@dataclass(frozen=True)
class PlanLimits:
    horizon: timedelta = timedelta(hours=24)  # plan this far ahead
    max_runs: int = 100  # per job per pass: bounds rows for every-second crons
    min_replan: timedelta = timedelta(seconds=1)


# A job this host cannot plan (a zone its tzdata lacks, a cron its croniter rejects) is
# skipped and tried again after this long, here or on a host that can plan it.
PLAN_RETRY = timedelta(minutes=1)


@dataclass(frozen=True)
class PlanFailure:
    job_id: int
    job_name: str
    error: str


@dataclass(frozen=True)
class JobPlan:
    times: list[datetime]  # fire times to insert, ascending
    missed: int  # the first this many are older than the catch-up window: recorded skipped
    planned_until: datetime
    plan_after: datetime


class FireTimes:
    """The fire times of one planning batch (one `db_now`, one horizon), shared by the jobs
    with the same cron schedule: a fleet has few distinct (cron, zone) pairs, and jobs
    planned together start from the same or nearby marks, so one walk of a schedule serves
    all of them. `between` and `next_after` return what the schedule's own methods would.

    A walk from `start` holds the schedule's fire times in (start, end], or its first
    `limit` after start when it was cut there. Its tail after a later start s is the walk
    from s (a schedule's fire times after s are its fire times after start that lie after
    s; tests/unit/test_planning.py checks this across DST shifts), whole when the walk
    reached `end`, else only while no fire time lies in (start, s].
    """

    def __init__(self, db_now: datetime, limits: PlanLimits) -> None:
        self.now = db_now
        self.end = db_now + limits.horizon
        self.limit = limits.max_runs
        self._walks: dict[CronSchedule, tuple[datetime, list[datetime]]] = {}
        self._next: dict[CronSchedule, datetime | None] = {}

    def between(self, sched: JobSchedule, start: datetime) -> list[datetime]:
        """sched.between(start, end, limit)."""
        if not isinstance(sched, CronSchedule):
            return sched.between(start, self.end, self.limit)
        walk = self._walks.get(sched)
        if walk is not None and walk[0] <= start:
            times = walk[1]
            i = bisect.bisect_right(times, start)
            if i == 0 or len(times) < self.limit:
                return times[i : i + self.limit]
        times = sched.between(start, self.end, self.limit)
        self._walks[sched] = (start, times)
        return times[:]

    def next_after(self, sched: JobSchedule) -> datetime | None:
        """sched.next_after(db_now)."""
        if not isinstance(sched, CronSchedule):
            return sched.next_after(self.now)
        if sched not in self._next:
            self._next[sched] = sched.next_after(self.now)
        return self._next[sched]


def plan_job(
    job: Job, db_now: datetime, limits: PlanLimits, fire_times: FireTimes | None = None
) -> JobPlan:
    """Fire times after the job's high-water mark, up to the horizon.

    Times older than the catch-up window are recorded as skipped ("missed") at once;
    younger ones are inserted as scheduled and the claim-time catch-up pass applies the
    job's policy to them (see DESIGN.md, Catch-up). Raises what the job's schedule raises
    when this host cannot load it (domain.UnloadableSchedule). `fire_times`: the batch's
    shared fire times (for the same db_now and limits); without it, the job's own.
    """
    spec = job.spec
    start: datetime = job.planned_until or job.created_at
    oldest_runnable = db_now - timedelta(seconds=spec.catchup_window_seconds)

    at = spec.run_at
    if at is not None:
        # A one-off job has exactly one run (its instant needs no zone); planned_until
        # marks it done.
        times = [] if job.planned_until is not None else [at]
        return JobPlan(times, _missed(times, oldest_runnable), at, INFINITY)

    sched = spec.schedule
    horizon_end = db_now + limits.horizon
    if fire_times is None:
        times = sched.between(start, horizon_end, limits.max_runs)
    else:
        times = fire_times.between(sched, start)
    if len(times) == limits.max_runs:
        until = times[-1]  # capped: plan the rest next pass
    else:
        until = max(start, horizon_end)
        # At least the next run is always planned (a yearly job has none within 24 h).
        # Fire times <= start are planned already, so only a later one is added.
        nxt = sched.next_after(db_now) if fire_times is None else fire_times.next_after(sched)
        if nxt is not None and nxt > until:
            times.append(nxt)
            until = nxt
    if until <= db_now:
        plan_after = db_now  # catching up a long gap: continue next pass
    else:
        plan_after = max(db_now + (until - db_now) / 2, db_now + limits.min_replan)
    return JobPlan(times, _missed(times, oldest_runnable), until, plan_after)


def _missed(times: list[datetime], oldest_runnable: datetime) -> int:
    return bisect.bisect_left(times, oldest_runnable)


async def plan_jobs(
    tx: Store,
    jobs: list[Job],
    db_now: datetime,
    limits: PlanLimits,
    failures: list[PlanFailure] | None = None,
    pause: Callable[[], Awaitable[None]] | None = None,
    gate: contextlib.AbstractAsyncContextManager[object] | None = None,
) -> int:
    """Insert the runs of already locked jobs and move their marks; returns rows inserted.

    With `failures`, a job that cannot be planned here is listed there and retried after
    PLAN_RETRY instead of failing the batch: one bad job never stops a planner. `pause` is
    awaited between steps (default: one loop turn); the planner's pause holds off near a start.
    `gate` is held around the writes (the planner's: one batch's insert at a time).
    """
    yield_ = pause or _one_turn
    fire_times = FireTimes(db_now, limits)
    planned = PlannedRuns()
    marks: list[tuple[int, datetime | None, datetime]] = []
    for i, job in enumerate(jobs):
        if i and i % YIELD_EVERY == 0:
            await yield_()
        try:
            plan = plan_job(job, db_now, limits, fire_times)
        except Exception as exc:
            if failures is None:
                raise
            failures.append(PlanFailure(job.id, job.spec.name, f"{type(exc).__name__}: {exc}"))
            marks.append((job.id, job.planned_until, db_now + PLAN_RETRY))
            continue
        spec = job.spec
        exclusive = spec.overlap != Overlap.ALLOW
        planned.add(job.id, spec.type, exclusive, spec.max_attempts, plan.times, plan.missed)
        marks.append((job.id, plan.planned_until, plan.plan_after))
    await yield_()  # the insert's encoding is the next block of CPU
    async with gate or contextlib.nullcontext():
        inserted = await tx.insert_planned_runs(planned)
        await tx.set_plan_marks(marks)
    return inserted


async def _one_turn() -> None:
    await asyncio.sleep(0)
