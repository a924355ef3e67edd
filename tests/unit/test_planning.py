"""planning.FireTimes: a batch's jobs share one walk per schedule and get exactly what their
own walk would give, across DST shifts, caps and unordered starts."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from supervisor.core.domain import Job, JobSpec, cron_schedule
from supervisor.core.planning import FireTimes, PlanLimits, plan_job
from supervisor.core.schedule import CronSchedule

EXPRESSIONS = [
    "* * * * *",
    "*/15 * * * *",
    "30 2 * * *",  # inside Berlin's and New York's skipped and repeated hours
    "0 1-3 * * *",  # an interval expression: fires twice in a repeated hour
    "*/20 1,2 * * *",
    "0 */6 * * *",
    "15 3 * * 0",
    "0 12 L * *",
    "45 */2 * * *",
    "0 0 1 * *",
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago"]
# Around DST transitions of those zones (2026), and a quiet day.
MOMENTS = [
    datetime(2026, 3, 29, 0, 30, tzinfo=UTC),  # Berlin springs forward at 01:00 UTC
    datetime(2026, 10, 25, 0, 10, tzinfo=UTC),  # Berlin falls back at 01:00 UTC
    datetime(2026, 3, 8, 6, 50, tzinfo=UTC),  # New York springs forward at 07:00 UTC
    datetime(2026, 11, 1, 5, 20, tzinfo=UTC),  # New York falls back at 06:00 UTC
    datetime(2026, 4, 4, 14, 45, tzinfo=UTC),  # Lord Howe's half-hour shift at 15:00 UTC
    datetime(2026, 9, 6, 3, 0, tzinfo=UTC),  # Santiago springs forward at 04:00 UTC
    datetime(2026, 6, 15, 12, 0, tzinfo=UTC),
]
LIMITS = [
    PlanLimits(),
    PlanLimits(horizon=timedelta(hours=3), max_runs=5),
    PlanLimits(horizon=timedelta(days=3), max_runs=40),
]


def _job(i: int, expression: str, zone: str, start: datetime, first: bool) -> Job:
    spec = JobSpec(name=f"j{i}", type="t", schedule=cron_schedule(expression, zone))
    return Job(
        id=i,
        spec=spec,
        planned_until=None if first else start,
        plan_after=start,
        created_at=start,
        updated_at=start,
    )


def _batch(rng: random.Random, now: datetime, size: int) -> list[Job]:
    """Jobs of a few schedules whose marks cluster (as jobs planned together do), some a
    few seconds apart, some days back, some ahead of now, some with microseconds."""
    anchors = [now + timedelta(minutes=rng.randint(-3000, 600)) for _ in range(3)]
    jobs = []
    for i in range(size):
        start = rng.choice(anchors)
        if rng.random() < 0.5:
            start += timedelta(seconds=rng.randint(-900, 900), microseconds=rng.randint(0, 999_999))
        expr, zone = rng.choice(EXPRESSIONS[:4]), rng.choice(ZONES)
        if rng.random() < 0.3:
            expr = rng.choice(EXPRESSIONS)
        jobs.append(_job(i, expr, zone, start, first=rng.random() < 0.3))
    rng.shuffle(jobs)
    return jobs


@pytest.mark.parametrize("seed", range(40))
def test_a_shared_walk_plans_every_job_as_its_own_walk_would(seed: int) -> None:
    rng = random.Random(seed)
    now = rng.choice(MOMENTS) + timedelta(minutes=rng.randint(-120, 120), microseconds=7)
    limits = rng.choice(LIMITS)
    shared = FireTimes(now, limits)
    for job in _batch(rng, now, 120):
        assert plan_job(job, now, limits, shared) == plan_job(job, now, limits), (
            job.spec.schedule,
            job.planned_until or job.created_at,
        )


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_fire_times_after_a_later_start_are_the_tail_of_an_earlier_walk(
    expression: str, zone: str
) -> None:
    """What sharing rests on, checked minute by minute through each DST shift."""
    sched = cron_schedule(expression, zone)
    for moment in MOMENTS[:6]:
        early = moment - timedelta(hours=4)
        end = moment + timedelta(hours=6)
        walk = sched.between(early, end, 10_000)
        for minutes in range(0, 600, 7):
            later = early + timedelta(minutes=minutes, seconds=30)
            assert sched.between(later, end, 10_000) == [t for t in walk if t > later]


def test_jobs_that_share_a_schedule_and_a_mark_walk_it_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walks: list[CronSchedule] = []
    own = CronSchedule.between

    def counted(self: CronSchedule, after: datetime, until: datetime, limit: int) -> list[datetime]:
        walks.append(self)
        return own(self, after, until, limit)

    monkeypatch.setattr(CronSchedule, "between", counted)
    now = MOMENTS[-1]
    jobs = [_job(i, EXPRESSIONS[i % 4], "Europe/Berlin", now, first=True) for i in range(500)]
    shared = FireTimes(now, PlanLimits())
    plans = [plan_job(job, now, PlanLimits(), shared) for job in jobs]
    assert len(walks) == 4
    assert [len(p.times) for p in plans[:4]] == [100, 96, 1, 3]  # capped, 15-minutely, ...
    plans[0].times.append(now)  # a caller's list is its own
    assert len(plan_job(jobs[4], now, PlanLimits(), shared).times) == 100
