"""The planner and job operations against a real PostgreSQL: each planned time exactly once."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta

import asyncpg

from supervisor.core import jobs
from supervisor.core.db import create_pool
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Store
from supervisor.planner import Planner

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
        rows = await store._ex.fetch("select scheduled_at from runs where job_id=$1", job_id)
        got = [r["scheduled_at"] for r in rows]
        assert len(got) == len(set(got))
        expected = await _expected(store, job_id)
        assert set(got) == expected, f"job {job_id}"
        assert expected, "every job has at least its next run planned"
        total += len(got)
    assert total > 500


async def test_planning_is_idempotent_and_proportional(store: Store) -> None:
    await store.insert_job(job("hourly", cron="0 * * * *"))
    planner = Planner(store, LIMITS)
    await planner.run_once()
    count = await store._ex.fetchval("select count(*) from runs")
    assert 24 <= count <= 25
    # Nothing needs planning now: a second tick picks no job and inserts nothing.
    assert await store.pick_jobs_to_plan(10) == ([], None)
    await store._ex.execute("update jobs set plan_after = '-infinity'")
    await planner.run_once()
    assert await store._ex.fetchval("select count(*) from runs") == count


async def test_max_runs_caps_a_pass_and_the_mark_advances(store: Store) -> None:
    await store.insert_job(job("every-second", cron="* * * * * *"))
    planner = Planner(store, PlanLimits(horizon=timedelta(hours=1), max_runs=50))
    await planner.run_once()
    assert await store._ex.fetchval("select count(*) from runs") == 50
    row = await store.get_job_by_name("every-second")
    assert row is not None
    assert row.planned_until is not None and row.plan_after < row.planned_until


async def test_one_off_job_gets_exactly_one_run(store: Store) -> None:
    at = (await store.now()) + timedelta(minutes=5)
    row = await jobs.create_job(store, job("once", cron=None, run_at=at), LIMITS)
    await Planner(store, LIMITS).run_once()
    await store._ex.execute("update jobs set plan_after = '-infinity'")
    await Planner(store, LIMITS).run_once()
    runs = await store._ex.fetch("select scheduled_at, status from runs where job_id=$1", row.id)
    assert [(r["scheduled_at"], r["status"]) for r in runs] == [
        (at.replace(microsecond=0), "scheduled")
    ]


async def test_schedule_change_replans_in_the_same_transaction(store: Store) -> None:
    row = await jobs.create_job(store, job("change", cron="0 * * * *"), LIMITS)
    before = await store._ex.fetch("select scheduled_at from runs where job_id=$1", row.id)
    assert all(r["scheduled_at"].minute == 0 for r in before)
    updated = await jobs.update_job(store, row.id, {"cron": "30 * * * *"}, LIMITS)
    assert updated.spec.cron == "30 * * * *"
    after = await store._ex.fetch(
        "select scheduled_at from runs where job_id=$1 and status='scheduled'", row.id
    )
    assert after and all(r["scheduled_at"].minute == 30 for r in after)
    # A payload-only change keeps the planned runs (they read the job's payload when claimed).
    ids = {r["id"] for r in await store._ex.fetch("select id from runs where job_id=$1", row.id)}
    await jobs.update_job(store, row.id, {"payload": {"x": 1}}, LIMITS)
    ids2 = {r["id"] for r in await store._ex.fetch("select id from runs where job_id=$1", row.id)}
    assert ids == ids2


async def test_invalid_update_writes_nothing(store: Store) -> None:
    row = await jobs.create_job(store, job("keep", cron="0 * * * *"), LIMITS)
    runs_before = await store._ex.fetchval("select count(*) from runs")
    try:
        await jobs.update_job(store, row.id, {"cron": "61 * * * *", "max_attempts": 0}, LIMITS)
    except jobs.InvalidSpecs as exc:
        fields = {e.field for e in exc.errors}
        assert fields == {"cron", "max_attempts"}
    else:
        raise AssertionError("invalid update accepted")
    again = await store.get_job(row.id)
    assert again is not None and again.spec.cron == "0 * * * *"
    assert await store._ex.fetchval("select count(*) from runs") == runs_before


async def test_delete_cancels_unstarted_and_keeps_history(store: Store) -> None:
    row = await jobs.create_job(store, job("gone", cron="0 * * * *"), LIMITS)
    await store._ex.execute(
        "update runs set status='succeeded', finished_at=now() where id = (select min(id) from runs)"
    )
    cancelled = await jobs.delete_job(store, row.id)
    assert cancelled >= 23
    statuses = {r["status"] for r in await store._ex.fetch("select status from runs")}
    assert statuses == {"succeeded", "cancelled"}
    assert await store.get_job(row.id) is None
    # The name is free again; the old job's history stays queryable by id.
    await jobs.create_job(store, job("gone", cron="0 * * * *"), LIMITS)
    assert await store._ex.fetchval("select count(*) from runs where job_id=$1", row.id) >= 24


async def _downtime(store: Store, name: str, catchup: str, hours: float = 3) -> int:
    """A job whose supervisors were all down for `hours`: planned from then, claimed now."""
    row = await store.insert_job(
        job(name, cron="*/10 * * * *", catchup=catchup, catchup_window_seconds=3600)
    )
    await store._ex.execute(
        "update jobs set created_at = now() - make_interval(hours => $2) where id=$1",
        row.id,
        hours,
    )
    await Planner(store, LIMITS).run_once()
    return int(row.id)


async def _claim_all(store: Store) -> list[asyncpg.Record]:
    async with store.transaction() as tx:
        await tx.skip_missed_runs(60.0, 1000)
        return await tx.claim_runs(["echo"], 1000, "w1", 30.0)


async def _due_statuses(store: Store, job_id: int) -> dict[str, int]:
    rows = await store._ex.fetch(
        "select status, count(*) from runs where job_id=$1 and scheduled_at <= now() group by 1",
        job_id,
    )
    return {r["status"]: r["count"] for r in rows}


async def test_catchup_latest_runs_the_most_recent_missed_time_once(store: Store) -> None:
    job_id = await _downtime(store, "latest", "latest")
    claimed = await _claim_all(store)
    assert len(claimed) == 1
    newest = await store._ex.fetchval(
        "select max(scheduled_at) from runs where job_id=$1 and scheduled_at <= now()", job_id
    )
    assert claimed[0]["scheduled_at"] == newest
    statuses = await _due_statuses(store, job_id)
    assert statuses == {"running": 1, "skipped": 17}
    reasons = await store._ex.fetch("select distinct skip_reason from runs where status='skipped'")
    assert [r["skip_reason"] for r in reasons] == ["missed"]


async def test_catchup_all_runs_every_missed_time_within_the_window(store: Store) -> None:
    job_id = await _downtime(store, "all", "all")
    claimed = await _claim_all(store)
    times = [r["scheduled_at"] for r in claimed]
    assert times == sorted(times), "oldest first"
    statuses = await _due_statuses(store, job_id)
    # Three hours of 10-minute runs: those older than the 1 h window are skipped, the rest run.
    assert statuses["running"] == len(claimed) in (6, 7)
    assert statuses["skipped"] + statuses["running"] == 18


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
    await store._ex.execute(
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
    await store._ex.execute(
        "update runs set scheduled_at = now() - interval '2 hours', run_after = now() - interval '2 hours'"
        " where trigger = 'manual'"
    )
    claimed = await _claim_all(store)
    assert created and [(r["id"], r["trigger"]) for r in claimed] == [(run_id, "manual")]


async def test_a_job_this_host_cannot_plan_is_skipped_not_fatal(store: Store) -> None:
    good = await jobs.create_job(store, job("good", cron="0 * * * *"), LIMITS)
    bad = await jobs.create_job(store, job("bad-zone", cron="0 * * * *"), LIMITS)
    # As on a host whose tzdata lacks a zone the API host accepted: make both due again.
    await store._ex.execute(
        "UPDATE jobs SET timezone = CASE WHEN id = $1 THEN 'Mars/Olympus_Mons' ELSE timezone END,"
        " planned_until = NULL, plan_after = now() - interval '1 second'",
        bad.id,
    )
    await store._ex.execute("DELETE FROM runs")
    planner = Planner(store, LIMITS)
    first = await planner.run_once()
    assert (first.next_in, first.jobs, first.failed) == (None, 1, 1)
    planned = await store._ex.fetch("SELECT DISTINCT job_id FROM runs")
    assert [r["job_id"] for r in planned] == [good.id]
    [failure] = planner.details()["unplannable_jobs"]
    assert (failure["job_id"], failure["job_name"]) == (bad.id, "bad-zone")
    assert "Mars/Olympus_Mons" in failure["error"]
    assert planner.plan_failures == 1
    # Not retried on every tick: its next try waits PLAN_RETRY (another host may plan it).
    wait = await store._ex.fetchval(
        "SELECT extract(epoch FROM plan_after - now()) FROM jobs WHERE id = $1", bad.id
    )
    assert 50 < wait <= 60
    await planner.run_once()
    assert planner.plan_failures == 1
    # Once the job can be planned here again, it leaves the list.
    await store._ex.execute(
        "UPDATE jobs SET timezone = 'UTC', plan_after = now() WHERE id = $1", bad.id
    )
    await planner.run_once()
    assert planner.details() == {}
    assert await store._ex.fetchval("SELECT count(*) FROM runs WHERE job_id = $1", bad.id) > 0
