"""The planner and job operations against a real PostgreSQL: each planned time exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Self

import asyncpg
import pytest

from supervisor.core import jobs
from supervisor.core.db import create_pool
from supervisor.core.planning import PlanLimits
from supervisor.core.records import Claim
from supervisor.core.store import PlannedRuns, Store
from supervisor.planner import Planner

from ..factory import (
    count,
    finish_run,
    make_jobs_due,
    run_ids,
    seconds_until,
    set_job,
    set_run,
    sql,
    sql_rows,
    sql_value,
)
from ..helpers import job

LIMITS = PlanLimits(horizon=timedelta(hours=24), max_runs=100)
CRONS = [
    "* * * * *",
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 0 * * MON",
    "15 10 1 * *",
    "0 */6 * * *",
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]


async def _times(store: Store, job_id: int, status: str | None = None) -> list[datetime]:
    """When a job's runs (in `status`, if given) are scheduled."""
    rows = await sql_rows(
        store,
        "select scheduled_at from runs where job_id=$1 and ($2::run_status is null or status=$2)",
        job_id,
        status,
    )
    return [r["scheduled_at"] for r in rows]


async def _expected(store: Store, job_id: int) -> set:
    row = await store.get_job(job_id)
    assert row is not None
    sched = row.spec.schedule
    return set(sched.between(row.created_at, row.planned_until, 10**6))


async def test_eight_planners_plan_500_jobs_exactly_once(dsn: str, store: Store) -> None:
    rng = random.Random(7)
    ids = []
    for i in range(500):
        row = await store.insert_job(
            job(f"j{i}", cron=rng.choice(CRONS), timezone=rng.choice(ZONES))
        )
        ids.append(row.id)
    pools = [await create_pool(dsn, min_size=1, max_size=1) for _ in range(8)]
    try:
        planners = [Planner(Store(p), LIMITS, batch=25) for p in pools]
        results = await asyncio.gather(*(p.run_once() for p in planners), return_exceptions=True)
        assert not [r for r in results if isinstance(r, BaseException)], results
        # Between them the planners planned every job once (SKIP LOCKED split the work).
        assert sum(r.jobs for r in results if not isinstance(r, BaseException)) == len(ids)
    finally:
        for p in pools:
            await p.close()
    assert await store.count_jobs_behind() == 0
    total = 0
    for job_id in ids:
        got = await _times(store, job_id)
        assert len(got) == len(set(got))
        expected = await _expected(store, job_id)
        assert set(got) == expected, f"job {job_id}"
        assert expected, "every job has at least its next run planned"
        total += len(got)
    assert total > 500


class _Overlap(Store):
    """A store that counts its open transactions (not savepoints): the most at once."""

    now_open = 0
    most = 0

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Self]:
        async with super().transaction() as tx:
            if not isinstance(self._ex, asyncpg.Pool):  # a savepoint
                yield tx
                return
            _Overlap.now_open += 1
            _Overlap.most = max(_Overlap.most, _Overlap.now_open)
            try:
                yield tx
            finally:
                _Overlap.now_open -= 1


async def test_a_planning_wave_runs_two_lanes_that_plan_every_job_once(
    dsn: str, store: Store
) -> None:
    rng = random.Random(11)
    ids = [
        (
            await store.insert_job(job(f"w{i}", cron=rng.choice(CRONS), timezone=rng.choice(ZONES)))
        ).id
        for i in range(300)
    ]
    pool = await create_pool(dsn, min_size=2, max_size=2)
    _Overlap.most = 0
    try:
        done = await Planner(_Overlap(pool), LIMITS, batch=20, lanes=2).run_once()
    finally:
        await pool.close()
    assert _Overlap.most == 2, "the wave's batches ran two at a time"
    assert (done.jobs, done.failed) == (300, 0)
    assert await store.count_jobs_behind() == 0
    total = 0
    for job_id in ids:
        got = await _times(store, job_id)
        assert len(got) == len(set(got)) and set(got) == await _expected(store, job_id)
        total += len(got)
    assert done.runs == total == await count(store, "runs")


class _FailsOnce(Store):
    """A store whose third batch's insert fails as a dropped connection would."""

    inserts = 0

    async def insert_planned_runs(self, p: PlannedRuns) -> int:
        _FailsOnce.inserts += 1
        if _FailsOnce.inserts == 3:
            raise asyncpg.ConnectionDoesNotExistError("connection was closed")
        return await super().insert_planned_runs(p)


async def test_a_failing_lane_stops_the_wave_and_the_next_pass_plans_every_job_once(
    dsn: str, store: Store
) -> None:
    ids = [(await store.insert_job(job(f"f{i}", cron="*/15 * * * *"))).id for i in range(200)]
    pool = await create_pool(dsn, min_size=2, max_size=2)
    _FailsOnce.inserts = 0
    try:
        planner = Planner(_FailsOnce(pool), LIMITS, batch=10, lanes=2)
        with pytest.raises(asyncpg.ConnectionDoesNotExistError):
            await planner.run_once()
        # The other lane finished the batch it had and started no other.
        assert _FailsOnce.inserts <= 4
        assert 0 < await store.count_jobs_behind() < 200
        await planner.run_once()
    finally:
        await pool.close()
    assert await store.count_jobs_behind() == 0
    for job_id in ids:
        got = await _times(store, job_id)
        assert len(got) == len(set(got)) and set(got) == await _expected(store, job_id)


async def test_a_busy_host_plans_a_wave_in_one_lane(dsn: str, store: Store) -> None:
    for i in range(100):
        await store.insert_job(job(f"b{i}", cron="*/5 * * * *"))
    pool = await create_pool(dsn, min_size=2, max_size=2)
    _Overlap.most = 0
    try:
        planner = Planner(_Overlap(pool), LIMITS, batch=10, lanes=2, idle=lambda: False)
        assert (await planner.run_once()).jobs == 100
    finally:
        await pool.close()
    assert _Overlap.most == 1
    assert await store.count_jobs_behind() == 0


class _Writes(Store):
    """A store that counts the planning inserts under way: the most at once. An insert
    waits (up to a deadline) for another to start beside it, and `on_insert` runs first."""

    now_writing = 0
    most = 0
    on_insert: Callable[[], None] = staticmethod(lambda: None)
    other_started = asyncio.Event()

    async def insert_planned_runs(self, p: PlannedRuns) -> int:
        _Writes.on_insert()
        _Writes.now_writing += 1
        _Writes.most = max(_Writes.most, _Writes.now_writing)
        if _Writes.now_writing > 1:
            _Writes.other_started.set()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_Writes.other_started.wait(), 1.0)
            return await super().insert_planned_runs(p)
        finally:
            _Writes.now_writing -= 1


@pytest.mark.parametrize("busy_after_first_write", [False, True], ids=["idle", "turns-busy"])
async def test_planning_lanes_write_together_only_while_the_host_is_idle(
    dsn: str, store: Store, busy_after_first_write: bool
) -> None:
    """An idle host's two lanes insert at once; once it runs something (a claim arrives
    during a lane's insert), no insert starts beside one under way, not even beside one
    begun while the host was idle."""
    for i in range(60):
        await store.insert_job(job(f"t{i}", cron="*/5 * * * *"))
    idle, writes = [True], [0]

    def first_write() -> None:  # the wave's first batch writes alone; then the lanes
        writes[0] += 1
        if busy_after_first_write and writes[0] == 2:
            idle[0] = False

    _Writes.most, _Writes.on_insert, _Writes.other_started = 0, first_write, asyncio.Event()
    pool = await create_pool(dsn, min_size=2, max_size=2)
    try:
        planner = Planner(_Writes(pool), LIMITS, batch=10, lanes=2, idle=lambda: idle[0])
        assert (await planner.run_once()).jobs == 60
    finally:
        await pool.close()
    assert _Writes.most == (1 if busy_after_first_write else 2)
    assert await store.count_jobs_behind() == 0


async def test_a_quiet_tick_is_one_transaction(dsn: str, store: Store) -> None:
    await store.insert_job(job("one", cron="0 * * * *"))
    pool = await create_pool(dsn, min_size=1, max_size=2)
    _Overlap.most = 0
    try:
        planner = Planner(_Overlap(pool), LIMITS, lanes=2)
        assert (await planner.run_once()).jobs == 1
        assert (await planner.run_once()).jobs == 0
    finally:
        await pool.close()
    assert _Overlap.most == 1


async def test_planning_is_idempotent_and_proportional(store: Store) -> None:
    await store.insert_job(job("hourly", cron="0 * * * *"))
    planner = Planner(store, LIMITS)
    await planner.run_once()
    planned = await count(store, "runs")
    assert 24 <= planned <= 25
    # Nothing needs planning now: a second tick picks no job and inserts nothing.
    assert await store.pick_jobs_to_plan(10) == ([], None)
    await make_jobs_due(store)
    await planner.run_once()
    assert await count(store, "runs") == planned


async def test_max_runs_caps_a_pass_and_the_mark_advances(store: Store) -> None:
    await store.insert_job(job("every-second", cron="* * * * * *"))
    planner = Planner(store, PlanLimits(horizon=timedelta(hours=1), max_runs=50))
    await planner.run_once()
    assert await count(store, "runs") == 50
    row = await store.get_job_by_name("every-second")
    assert row is not None
    assert row.planned_until is not None and row.plan_after < row.planned_until


async def test_one_off_job_gets_exactly_one_run(store: Store) -> None:
    at = (await store.now()) + timedelta(minutes=5)
    row = await jobs.create_job(store, job("once", cron=None, run_at=at), LIMITS)
    await Planner(store, LIMITS).run_once()
    await make_jobs_due(store)
    await Planner(store, LIMITS).run_once()
    runs = await sql_rows(  # what the job's runs are is the point
        store, "select scheduled_at, status from runs where job_id=$1", row.id
    )
    assert [(r["scheduled_at"], r["status"]) for r in runs] == [
        (at.replace(microsecond=0), "scheduled")
    ]


async def test_schedule_change_replans_in_the_same_transaction(store: Store) -> None:
    row = await jobs.create_job(store, job("change", cron="0 * * * *"), LIMITS)
    before = await _times(store, row.id)
    assert all(t.minute == 0 for t in before)
    updated = await jobs.update_job(store, row.id, {"cron": "30 * * * *"}, LIMITS)
    assert updated.spec.cron == "30 * * * *"
    after = await _times(store, row.id, "scheduled")
    assert after and all(t.minute == 30 for t in after)
    # A payload-only change keeps the planned runs (they read the job's payload when claimed).
    ids = set(await run_ids(store, row.id))
    await jobs.update_job(store, row.id, {"payload": {"x": 1}}, LIMITS)
    ids2 = set(await run_ids(store, row.id))
    assert ids == ids2


async def test_invalid_update_writes_nothing(store: Store) -> None:
    row = await jobs.create_job(store, job("keep", cron="0 * * * *"), LIMITS)
    runs_before = await count(store, "runs")
    try:
        await jobs.update_job(store, row.id, {"cron": "61 * * * *", "max_attempts": 0}, LIMITS)
    except jobs.InvalidSpecs as exc:
        fields = {e.field for e in exc.errors}
        assert fields == {"cron", "max_attempts"}
    else:
        raise AssertionError("invalid update accepted")
    again = await store.get_job(row.id)
    assert again is not None and again.spec.cron == "0 * * * *"
    assert await count(store, "runs") == runs_before


async def test_delete_cancels_unstarted_and_keeps_history(store: Store) -> None:
    row = await jobs.create_job(store, job("gone", cron="0 * * * *"), LIMITS)
    await finish_run(store, (await run_ids(store))[0])
    cancelled = await jobs.delete_job(store, row.id)
    assert cancelled >= 23
    seen = await sql_rows(store, "select distinct status::text from runs")  # all of them
    assert {r["status"] for r in seen} == {"succeeded", "cancelled"}
    assert await store.get_job(row.id) is None
    # The name is free again; the old job's history stays queryable by id.
    await jobs.create_job(store, job("gone", cron="0 * * * *"), LIMITS)
    assert await count(store, "runs", "job_id=$1", row.id) >= 24


async def test_a_job_is_never_deleted_so_its_runs_always_have_it(store: Store) -> None:
    """Runs have no foreign key to jobs (migration 0013); the database refuses to lose a job."""
    row = await jobs.create_job(store, job("kept", cron="0 * * * *"), LIMITS)
    planned = await count(store, "runs", "job_id=$1", row.id)
    for statement in ("DELETE FROM jobs WHERE id = $1", "TRUNCATE jobs CASCADE"):
        args = (row.id,) if "$1" in statement else ()
        with pytest.raises(asyncpg.RestrictViolationError, match="jobs are never deleted"):
            await sql(store, statement, *args)
    assert await sql_value(store, "select count(*) from jobs where id=$1", row.id) == 1
    assert await count(store, "runs", "job_id=$1", row.id) == planned >= 24


async def test_planned_runs_of_an_id_that_is_no_job_are_not_inserted(store: Store) -> None:
    row = await jobs.create_job(store, job("real", cron="0 * * * *"), LIMITS)
    missing = row.id + 1000
    start = await store.now() + timedelta(days=3)
    at = [start + timedelta(hours=h) for h in range(3)]
    p = PlannedRuns()
    p.add(missing, "echo", False, 3, at)
    p.add(row.id, "echo", False, 3, at)
    assert await store.insert_planned_runs(p) == 3
    assert await count(store, "runs", "job_id=$1", missing) == 0
    assert sorted(await _times(store, row.id))[-3:] == at


_RUN_COLUMNS = (
    "job_id, scheduled_at, run_after, type, exclusive, max_attempts, status, trigger,"
    " attempts, lease_token, payload, finished_at, skip_reason"
)


async def test_copied_runs_are_the_rows_the_sql_insert_writes_in_time_order(
    store: Store,
) -> None:
    """A plan of fresh fire times is copied in (binary COPY); the same plan through the SQL
    insert gives the same rows, column by column. Jobs differ in type, exclusivity and
    attempts; instants carry microseconds, lie before PostgreSQL's epoch (2000) and far
    after it, and several jobs share some. Rows are written in time order: ids follow
    scheduled_at."""
    a = await jobs.create_job(store, job("copy-a", cron="0 * * * *"), LIMITS)
    b = await jobs.create_job(store, job("copy-b", cron="0 * * * *"), LIMITS)
    base = await store.now() + timedelta(days=3)
    early = datetime(1999, 12, 31, 23, 59, 59, 999_999, tzinfo=base.tzinfo)
    late = datetime(2100, 2, 28, 1, 2, 3, 456_789, tzinfo=base.tzinfo)
    a_times = [early, base + timedelta(microseconds=1), base + timedelta(hours=1), late]
    b_times = [base + timedelta(microseconds=1), base + timedelta(minutes=30), late]

    def plan() -> PlannedRuns:
        p = PlannedRuns()
        p.add(a.id, "copy.type-A", True, 7, a_times)
        p.add(b.id, "b", False, 1, b_times)
        return p

    async def rows() -> list[tuple[object, ...]]:
        got = await sql_rows(
            store,
            f"SELECT id, {_RUN_COLUMNS} FROM runs WHERE job_id = ANY($1) AND"
            " (scheduled_at < now() OR scheduled_at >= $2) ORDER BY id",
            [a.id, b.id],
            base,
        )
        by_id = [r["scheduled_at"] for r in got]
        assert by_id == sorted(by_id), "rows not written in time order"
        return sorted(tuple(r)[1:] for r in got)

    async def forget() -> None:
        await sql(
            store,
            "DELETE FROM runs WHERE job_id = ANY($1) AND (scheduled_at < now()"
            " OR scheduled_at >= $2)",
            [a.id, b.id],
            base,
        )

    await forget()  # the jobs' own plans (hourly from now) reach past `base`
    assert await store.insert_planned_runs(plan()) == 7
    copied = await rows()
    await forget()
    assert await store.insert_planned_runs_idempotent(plan()) == 7
    assert await rows() == copied
    assert [(r[0], r[1], r[3], r[4], r[5]) for r in copied] == sorted(
        [(a.id, t, "copy.type-A", True, 7) for t in a_times]
        + [(b.id, t, "b", False, 1) for t in b_times]
    )
    assert {r[2] for r in copied} == set(a_times) | set(b_times)  # run_after = scheduled_at
    assert {(r[6], r[7], r[8]) for r in copied} == {("scheduled", "schedule", 0)}


async def test_a_batch_records_the_missed_runs_of_any_of_its_jobs(store: Store) -> None:
    """Missed fire times take the other insert (it records them skipped), whichever job of
    the batch has them: here only the second."""
    first = await jobs.create_job(store, job("first", cron="0 * * * *"), LIMITS)
    second = await jobs.create_job(store, job("second", cron="0 * * * *"), LIMITS)
    start = await store.now() + timedelta(days=3)
    at = [start + timedelta(hours=h) for h in range(3)]
    p = PlannedRuns()
    p.add(first.id, "echo", False, 3, at)
    p.add(second.id, "echo", False, 3, at, missed=2)
    assert await store.insert_planned_runs(p) == 6
    assert sorted(await _times(store, second.id, "skipped")) == at[:2]
    assert at[2] in await _times(store, second.id, "scheduled")
    assert set(at) <= set(await _times(store, first.id, "scheduled"))
    assert await store.insert_planned_runs(p) == 0  # planned twice: nothing new


async def test_a_fire_time_that_exists_already_is_skipped_inside_the_transaction(
    store: Store,
) -> None:
    """The fast insert has no ON CONFLICT: a run at one of the plan's instants (here a
    manual run) fails it, and the store plans the rest idempotently in the same
    transaction (a savepoint), which then goes on and commits."""
    row = await jobs.create_job(store, job("clash", cron="0 * * * *"), LIMITS)
    start = await store.now() + timedelta(days=3)
    at = [start + timedelta(hours=h) for h in range(4)]
    await sql(
        store,
        "INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type, max_attempts)"
        " VALUES ($1, $2, $2, 'manual', 'echo', 3)",
        row.id,
        at[1],
    )
    p = PlannedRuns()
    p.add(row.id, "echo", False, 3, at)
    async with store.transaction() as tx:
        assert await tx.insert_planned_runs(p) == 3
        await tx.set_plan_marks([(row.id, at[-1], at[-1])])
    assert sorted(t for t in await _times(store, row.id) if t >= start) == at
    assert await sql_value(store, "SELECT planned_until FROM jobs WHERE id = $1", row.id) == at[-1]


async def _downtime(store: Store, name: str, catchup: str, hours: float = 3) -> int:
    """A job whose supervisors were all down for `hours`: planned from then, claimed now."""
    row = await store.insert_job(
        job(name, cron="*/10 * * * *", catchup=catchup, catchup_window_seconds=3600)
    )
    await set_job(store, row.id, created_at=await store.now() - timedelta(hours=hours))
    await Planner(store, LIMITS).run_once()
    return int(row.id)


async def _claim_all(store: Store) -> list[Claim]:
    async with store.transaction() as tx:
        await tx.skip_missed_runs(60.0, 1000)
        return await tx.claim_runs(["echo"], 1000, "w1", 30.0)


async def _due_statuses(store: Store, job_id: int) -> dict[str, int]:
    rows = await sql_rows(  # the due ones only: what this file's catch-up tests are about
        store,
        "select status, count(*) from runs where job_id=$1 and scheduled_at <= now() group by 1",
        job_id,
    )
    return {r["status"]: r["count"] for r in rows}


async def test_catchup_latest_runs_the_most_recent_missed_time_once(store: Store) -> None:
    job_id = await _downtime(store, "latest", "latest")
    claimed = await _claim_all(store)
    assert len(claimed) == 1
    newest = await sql_value(  # the newest missed time
        store,
        "select max(scheduled_at) from runs where job_id=$1 and scheduled_at <= now()",
        job_id,
    )
    assert claimed[0].scheduled_at == newest
    statuses = await _due_statuses(store, job_id)
    assert statuses == {"running": 1, "skipped": 17}
    reasons = await sql_rows(  # why the others were skipped
        store, "select distinct skip_reason from runs where status='skipped'"
    )
    assert [r["skip_reason"] for r in reasons] == ["missed"]


async def test_catchup_all_runs_every_missed_time_within_the_window(store: Store) -> None:
    job_id = await _downtime(store, "all", "all")
    claimed = await _claim_all(store)
    times = [r.scheduled_at for r in claimed]
    assert times == sorted(times), "oldest first"
    statuses = await _due_statuses(store, job_id)
    # Three hours of 10-minute runs: those older than the 1 h window are skipped, the rest run.
    assert statuses["running"] == len(claimed) in (6, 7)
    assert statuses["skipped"] + statuses["running"] == 18


class _Rollback(Exception):
    pass


async def test_the_claim_and_the_catchup_pass_judge_missed_runs_alike(store: Store) -> None:
    # The policy is written twice: the pass records skips, the claim refuses them. For every
    # policy and age, a due run is exactly one of: claimable, or skipped by the pass.
    ages = [30, 300, 1200, 1800, 7200, 9000]  # seconds: within the grace, the window, older
    for policy in ("none", "latest", "all"):
        row = await store.insert_job(
            job(f"judged-{policy}", cron="0 0 1 1 *", catchup=policy, catchup_window_seconds=3600)
        )
        await sql(
            store,
            "INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts)"
            " SELECT $1, now() - make_interval(secs => a), now() - make_interval(secs => a),"
            " 'echo', 3 FROM unnest($2::int[]) a",
            row.id,
            ages,
        )
    due = set(await run_ids(store))
    claimed: set[int] = set()
    skipped: set[int] = set()
    for into, judge in ((claimed, "claim"), (skipped, "pass")):
        try:
            async with store.transaction() as tx:  # each judges the same rows, rolled back
                if judge == "claim":
                    into |= {c.id for c in await tx.claim_runs(["echo"], 1000, "w1", 30.0)}
                else:
                    into |= {s.id for s in (await tx.skip_missed_runs(60.0, 1000)).skipped}
                raise _Rollback
        except _Rollback:
            pass
    assert skipped and claimed  # each policy keeps and skips something here
    assert claimed.isdisjoint(skipped)
    assert claimed | skipped == due


async def test_catchup_none_skips_every_missed_time(store: Store) -> None:
    job_id = await _downtime(store, "none", "none")
    claimed = await _claim_all(store)
    statuses = await _due_statuses(store, job_id)
    # The run due within the misfire grace (if any) is not missed; everything older is skipped.
    assert len(claimed) <= 1
    assert statuses.get("skipped", 0) >= 17


async def test_pause_stops_claiming_and_resume_applies_catchup(store: Store) -> None:
    row = await jobs.create_job(store, job("paused", cron="*/10 * * * *", catchup="latest"), LIMITS)
    await jobs.set_paused(store, row.id, True, LIMITS)
    # Two hours pass while paused: age the planned runs instead of sleeping (off the
    # 10-minute grid so no aged time collides with a planned one).
    await sql(  # every planned run of the job moves back at once, keeping their spacing
        store,
        "update runs set scheduled_at = scheduled_at - interval '2 hours 5 minutes',"
        " run_after = run_after - interval '2 hours 5 minutes' where job_id=$1",
        row.id,
    )
    assert await _claim_all(store) == []
    await jobs.set_paused(store, row.id, False, LIMITS)
    claimed = await _claim_all(store)
    assert len(claimed) == 1
    statuses = await _due_statuses(store, row.id)
    assert statuses["running"] == 1 and statuses["skipped"] >= 11


async def test_manual_runs_are_never_skipped_as_missed(store: Store) -> None:
    row = await jobs.create_job(
        store, job("manual", cron="0 0 1 1 *", catchup="none", overlap="skip"), LIMITS
    )
    run_id, created = await jobs.trigger_job(store, row.id, None, None)
    # The trigger waited two hours (no worker, say): it still runs.
    two_hours_ago = await store.now() - timedelta(hours=2)
    await set_run(store, run_id, scheduled_at=two_hours_ago, run_after=two_hours_ago)
    claimed = await _claim_all(store)
    assert created and [(r.id, r.trigger) for r in claimed] == [(run_id, "manual")]


async def test_a_job_this_host_cannot_plan_is_skipped_not_fatal(store: Store) -> None:
    good = await jobs.create_job(store, job("good", cron="0 * * * *"), LIMITS)
    bad = await jobs.create_job(store, job("bad-zone", cron="0 * * * *"), LIMITS)
    # As on a host whose tzdata lacks a zone the API host accepted: make both due again.
    now = await store.now()
    await set_job(store, bad.id, timezone="Mars/Olympus_Mons")
    for due in (good, bad):
        await set_job(store, due.id, planned_until=None, plan_after=now - timedelta(seconds=1))
    await sql(store, "DELETE FROM runs")  # no run planned yet: the point of the test
    planner = Planner(store, LIMITS)
    first = await planner.run_once()
    assert (first.next_in, first.jobs, first.failed) == (None, 1, 1)
    planned = await sql_rows(store, "SELECT DISTINCT job_id FROM runs")  # which jobs got runs
    assert [r["job_id"] for r in planned] == [good.id]
    [failure] = planner.details()["unplannable_jobs"]
    assert (failure["job_id"], failure["job_name"]) == (bad.id, "bad-zone")
    assert "Mars/Olympus_Mons" in failure["error"]
    assert planner.plan_failures == 1
    # Not retried on every tick: its next try waits PLAN_RETRY (another host may plan it).
    wait = await seconds_until(store, "jobs", "plan_after", bad.id)
    assert 50 < wait <= 60
    await planner.run_once()
    assert planner.plan_failures == 1
    # Once the job can be planned here again, it leaves the list.
    await set_job(store, bad.id, timezone="UTC", plan_after=await store.now())
    await planner.run_once()
    assert planner.details() == {}
    assert await count(store, "runs", "job_id = $1", bad.id) > 0


async def test_the_catchup_pass_locks_only_the_runs_it_skips(store: Store, dsn: str) -> None:
    # A backlog the policy keeps ('all' within its window) is judged on every claim pass;
    # locking it whole each time wrote every row (a row lock is a heap write).
    kept_job = await _downtime(store, "kept", "all")
    dropped_job = await _downtime(store, "dropped", "none")
    other = await create_pool(dsn, min_size=1, max_size=1)
    try:
        async with store.transaction() as tx:
            # No misfire grace: every due run counts as missed, whatever the minute (with
            # 60 s, a */10 run under a minute old was neither kept nor skipped yet).
            skipped = (await tx.skip_missed_runs(0.0, 1000)).skipped
            # Inside the pass's transaction another session can still lock every kept run.
            kept = await other.fetch(
                """SELECT id FROM runs WHERE job_id = $1 AND status = 'scheduled'
                     AND scheduled_at <= now() FOR UPDATE NOWAIT""",
                kept_job,
            )
        assert len(kept) == 6  # the last hour of */10: the catch-up window
        assert {s.job_id for s in skipped} == {dropped_job}
    finally:
        await other.close()
    # (its runs older than the window were recorded missed when they were planned)
    assert (await _due_statuses(store, kept_job)) == {"scheduled": 6, "skipped": 12}
    assert (await _due_statuses(store, dropped_job)).keys() == {"skipped"}


async def test_a_window_full_of_paused_runs_never_lets_a_missed_run_start(store: Store) -> None:
    # The catch-up pass reads the oldest old unstarted runs up to its limit. A paused job's
    # planned runs age there and are never judged (its policy applies on resume), so enough
    # of them once filled the window for good: a 'none' job's missed runs behind them were
    # never judged, and the claim started them.
    paused = await jobs.create_job(store, job("paused", cron="* * * * *"), LIMITS)
    await jobs.set_paused(store, paused.id, True, LIMITS)
    shift = "interval '3 hours'"
    await sql(
        store,
        f"update runs set scheduled_at = scheduled_at - {shift}, run_after = run_after - {shift}"
        " where job_id=$1",
        paused.id,
    )
    dropped = await _downtime(store, "dropped", "none")
    async with store.transaction() as tx:
        # A window of 10 stands for the claimer's 1,000, filled by the paused job's runs.
        first = await tx.skip_missed_runs(60.0, 10)
        claimed = await tx.claim_runs(["echo"], 1000, "w1", 30.0, misfire_grace=60.0)
    started_missed = [
        c.scheduled_at
        for c in claimed
        if c.job_id == dropped and c.scheduled_at < c.db_now - timedelta(seconds=60)
    ]
    assert started_missed == [], "missed runs of a catch-up 'none' job started"
    assert first.skipped == [] and first.resume_after is not None
    # Later passes read on past the paused runs and record the rest as missed.
    resume = first.resume_after
    for _ in range(30):
        async with store.transaction() as tx:
            catchup = await tx.skip_missed_runs(60.0, 10, resume)
        resume = catchup.resume_after
        if resume is None:
            break
    statuses = await _due_statuses(store, dropped)
    assert statuses.get("scheduled", 0) == 0, statuses
    assert statuses["skipped"] >= 17
    # The paused job's runs wait for its resume, unjudged.
    assert (await _due_statuses(store, paused.id)).keys() == {"scheduled"}
