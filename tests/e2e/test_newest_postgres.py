"""The run lists on the newest PostgreSQL this machine has (a throwaway cluster: what
`./dev up` embeds), not only on the shared server: index scans behave differently across
major versions. PostgreSQL 18 did not start a backward scan of runs_status_history at a
row comparison, so the plan ahead read every succeeded run's entry to find none. The
dashboard's jobs by next run reads that index the same way; 18 starts it right (its reads
do not grow with the planned runs left behind), so only its answer is checked. A job's own
lists (runs_job_scheduled_at, read forwards ahead and backwards behind) are measured too."""

from __future__ import annotations

import json
from typing import Any

import pytest

from supervisor.core import runs
from supervisor.core.dashboard import Dashboard, JobFilters
from supervisor.core.db import connect, create_pool
from supervisor.core.model import MINUS_INFINITY, RunStatus
from supervisor.core.runs import FIRST_PAGE, FIRST_UPCOMING, RunFilters
from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

from .procs import ThrowawayPostgres

HISTORY = 30_000  # succeeded runs in the past: about 150 pages of runs_status_history
DUE = 10_000  # planned runs of another job left behind (its type's hosts are down)
AHEAD = 5
PAGE = 10
READ_AT_MOST = 60  # buffers for a page of 10 runs (16-17 when the scan starts right)


@pytest.fixture
async def newest(pg: ThrowawayPostgres) -> str:
    """The cluster with a job's history, its plan ahead, and another job's runs left due."""
    conn = await connect(pg.dsn)
    try:
        job_id = await conn.fetchval(
            "INSERT INTO jobs (name, type, cron, timezone, planned_until, plan_after)"
            " VALUES ('hourly', 'noop', '0 * * * *', 'UTC', now(), 'infinity') RETURNING id"
        )
        await conn.execute(
            "INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts, status,"
            " attempts, started_at, finished_at)"
            " SELECT $1, t, t, 'noop', 3, 'succeeded', 1, t, t FROM"
            " (SELECT now() - make_interval(mins => g) AS t"
            "  FROM generate_series(1, $2::int) g) s",
            job_id,
            HISTORY,
        )
        await conn.execute(
            "INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts)"
            " SELECT $1, now() + make_interval(hours => g), now() + make_interval(hours => g),"
            " 'noop', 3 FROM generate_series(1, $2::int) g",
            job_id,
            AHEAD,
        )
        await conn.execute(
            "WITH j AS (INSERT INTO jobs (name, type, cron, timezone, planned_until,"
            " plan_after) VALUES ('unserved', 'gone', '* * * * *', 'UTC', now(), 'infinity')"
            " RETURNING id)"
            " INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts)"
            " SELECT j.id, now() - make_interval(mins => g), now() - make_interval(mins => g),"
            " 'gone', 3 FROM j, generate_series(1, $1::int) g",
            DUE,
        )
        await conn.execute("VACUUM ANALYZE runs")
    finally:
        await conn.close()
    return pg.dsn


def _list_args(f: RunFilters, key: tuple[Any, int]) -> tuple[Any, ...]:
    """list_runs_(upcoming_)by_status's arguments for a first page, as runs.list_runs sends
    them with no filter (every status)."""
    return ([s.value for s in RunStatus], *key, *f.scheduled, *f.finished, PAGE)


def _job_args(job_id: int, f: RunFilters, key: tuple[Any, int]) -> tuple[Any, ...]:
    """list_runs_(upcoming_)by_job's arguments for a job's first page, no status filter."""
    return ([job_id], None, *key, *f.scheduled, *f.finished, PAGE)


async def test_run_lists_read_a_page_not_the_history(newest: str) -> None:
    pool = await create_pool(newest, min_size=1, max_size=1)
    try:
        store = Store(pool)
        ahead = await runs.list_runs(store, RunFilters(upcoming=True), None, PAGE)
        assert [(r.job_name, r.status) for r in ahead] == [("hourly", RunStatus.SCHEDULED)] * AHEAD
        nexts = await Dashboard(pool).ui_jobs_by_next(JobFilters(), (MINUS_INFINITY, 0), PAGE)
        assert [j.name for j in nexts] == ["hourly"]
        past = await runs.list_runs(store, RunFilters(), None, PAGE)
        # The newest of both jobs' past: a page, newest first, both kinds among them.
        times = [r.scheduled_at for r in past]
        assert len(past) == PAGE and times == sorted(times, reverse=True)
        assert {r.status for r in past} == {RunStatus.SUCCEEDED, RunStatus.SCHEDULED}
        # One job's: its plan ahead after its long past, and its newest past.
        mine = RunFilters(job_name="hourly", upcoming=True)
        ahead_of_job = await runs.list_runs(store, mine, None, PAGE)
        assert [r.scheduled_at for r in ahead_of_job] == [r.scheduled_at for r in ahead]
        past_of_job = await runs.list_runs(store, RunFilters(job_name="hourly"), None, PAGE)
        assert len(past_of_job) == PAGE
        assert {r.status for r in past_of_job} == {RunStatus.SUCCEEDED}
        left = RunFilters(job_name="unserved", upcoming=True)
        assert await runs.list_runs(store, left, None, PAGE) == []
        read = {}
        async with pool.acquire() as conn:
            version = await conn.fetchval("SHOW server_version")
            ids = dict(await conn.fetch("SELECT name, id FROM jobs"))
            up, back = RunFilters(upcoming=True), RunFilters()
            queries: list[tuple[str, str, tuple[Any, ...]]] = [
                ("ahead", "list_runs_upcoming_by_status", _list_args(up, FIRST_UPCOMING)),
                ("past", "list_runs_by_status", _list_args(back, FIRST_PAGE)),
            ]
            # A job's own lists: ahead of a long past, and the past of a job planned ahead.
            for job, job_id in ids.items():
                queries += [
                    (
                        f"{job} ahead",
                        "list_runs_upcoming_by_job",
                        _job_args(job_id, up, FIRST_UPCOMING),
                    ),
                    (f"{job} past", "list_runs_by_job", _job_args(job_id, back, FIRST_PAGE)),
                ]
            for label, name, args in queries:
                text = QUERIES[name].rstrip().rstrip(";")
                plan = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text, *args)
                top = json.loads(plan)[0]["Plan"]
                read[label] = top["Shared Hit Blocks"] + top["Shared Read Blocks"]
    finally:
        await pool.close()
    assert all(n <= READ_AT_MOST for n in read.values()), (version, read)
