"""The API's runs-by-status gauge at scale: a status the statistics put under the limit is
counted on every scrape; above it the gauge is PostgreSQL's own estimate, so a scrape never
counts millions of finished runs. Against a real PostgreSQL and its real statistics."""

from __future__ import annotations

from supervisor.core.health import database_snapshot
from supervisor.core.store import Store

from ..factory import raw, sql_value
from ..helpers import job

STATUSES = {"scheduled", "running", "succeeded", "failed", "dead", "cancelled", "skipped"}


async def _finished(store: Store, status: str, n: int, start: int = 0) -> None:
    """`n` finished runs of `status` of one job, an hour apart from `start` hours back (so
    they never collide)."""
    job_id = await sql_value(store, "SELECT id FROM jobs WHERE name = 'history'")
    if job_id is None:
        job_id = (await store.insert_job(job("history", "t", cron="0 0 1 1 *"))).id
    await raw(store).execute(
        """INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts, status,
                             attempts, finished_at)
           SELECT $1, t, t, 't', 1, $2::run_status, 1, t
           FROM generate_series($3::int, $3::int + $4::int - 1) g,
                LATERAL (SELECT now() - make_interval(hours => 1 + g)) AS x(t)""",
        job_id,
        status,
        start,
        n,
    )


async def _count(store: Store, status: str) -> int:
    return int(await sql_value(store, "SELECT count(*) FROM runs WHERE status = $1", status))


async def test_small_statuses_are_counted_exactly_and_every_status_is_reported(
    store: Store,
) -> None:
    await _finished(store, "succeeded", 40)
    await _finished(store, "dead", 3, start=100)
    await raw(store).execute("ANALYZE runs")
    await _finished(store, "dead", 2, start=200)  # after ANALYZE: counted all the same
    snap = await database_snapshot(store, exact_below=1_000)
    assert set(snap.runs_by_status) == STATUSES
    assert snap.runs_by_status["succeeded"] == 40
    assert snap.runs_by_status["dead"] == 5
    assert snap.runs_by_status["skipped"] == 0
    assert snap.runs_estimated == frozenset()


async def test_a_never_analyzed_table_is_counted(store: Store) -> None:
    await _finished(store, "succeeded", 3_000)
    snap = await database_snapshot(store, exact_below=1_000)
    assert snap.runs_by_status["succeeded"] == 3_000
    assert snap.runs_estimated == frozenset()


async def test_a_big_status_is_the_planners_estimate(store: Store) -> None:
    await _finished(store, "succeeded", 20_000)
    await _finished(store, "dead", 30, start=50_000)
    await raw(store).execute("ANALYZE runs")
    snap = await database_snapshot(store, exact_below=5_000)
    assert snap.runs_estimated == frozenset({"succeeded"})
    assert abs(snap.runs_by_status["succeeded"] - 20_000) <= 1_000
    assert snap.runs_by_status["dead"] == 30  # under the limit: counted

    # The estimate follows the table's size at once (more pages, more rows) ...
    await _finished(store, "succeeded", 10_000, start=20_000)
    snap = await database_snapshot(store, exact_below=5_000)
    assert abs(snap.runs_by_status["succeeded"] - 30_000) <= 1_500
    # ... and deletions once statistics see them: until then it is not a count.
    await raw(store).execute("DELETE FROM runs WHERE status = 'succeeded' AND id % 2 = 0")
    exact = await _count(store, "succeeded")
    stale = (await database_snapshot(store, exact_below=5_000)).runs_by_status["succeeded"]
    assert stale > exact * 1.5
    await raw(store).execute("VACUUM ANALYZE runs")
    snap = await database_snapshot(store, exact_below=5_000)
    assert abs(snap.runs_by_status["succeeded"] - exact) <= exact * 0.05
    assert snap.runs_by_status["dead"] == 30
