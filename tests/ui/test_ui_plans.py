"""The jobs list stays index-backed with 10,000 jobs: the generic plan of each list query
(the one a prepared statement settles on) never scans `runs` sequentially, and reads a
bounded number of buffers for a first page however many jobs and runs there are."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

from .. import factory

FIRST = "'-infinity'::timestamptz, 0"
CASES = [
    ("ui_jobs_by_name", "NULL, NULL, NULL, NULL, '', 51, NULL"),
    ("ui_jobs_by_name", "'12', 'type3', false, 'succeeded', 'job-05000', 51, NULL"),
    ("ui_jobs_by_name", "NULL, NULL, NULL, 'succeeded', '', 51, ARRAY[{job}]::bigint[]"),
    ("ui_job_last_statuses", ""),
    ("ui_jobs_by_next", f"NULL, NULL, NULL, NULL, {FIRST}, 51"),
    ("ui_jobs_by_next", "'12', NULL, NULL, 'succeeded', now() + interval '1 minute', 1, 51"),
    # A job's page: its timeline and durations read its range of runs_job_scheduled_at.
    ("ui_job_timeline", "{job}, now() - interval '7 days', now() + interval '1 day', 2000"),
    ("ui_job_durations", "{job}, 60"),
    # The runs page's bulk requeue count.
    (
        "ui_count_requeueable",
        "'{{dead}}', ARRAY[{job}]::bigint[], '-infinity', 'infinity', NULL, NULL, 1000",
    ),
    (
        "ui_count_requeueable",
        "'{{dead}}', NULL, '-infinity', 'infinity', NULL, NULL, 1000",
    ),
]


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


@pytest.fixture
async def ten_thousand_jobs(store: Store) -> Store:
    await factory.sql(
        store,
        """INSERT INTO jobs (name, type, cron, timezone)
           SELECT 'job-' || lpad(i::text, 5, '0'), 'type' || (i % 7), '*/5 * * * *', 'UTC'
           FROM generate_series(1, 10000) i""",
    )
    await factory.sql(
        store,
        """INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts, status)
           SELECT j.id, now() + make_interval(mins => 5 * k), now() + make_interval(mins => 5 * k),
                  j.type, 3, (CASE WHEN k <= 0 THEN 'succeeded' ELSE 'scheduled' END)::run_status
           FROM jobs j, generate_series(-4, 2) k""",
    )
    await factory.sql(
        store,
        """UPDATE runs SET started_at = scheduled_at, finished_at = scheduled_at + interval '2 s'
           WHERE status = 'succeeded'""",
    )
    await factory.sql(store, "ANALYZE jobs, runs")
    return store


async def test_jobs_list_never_scans_runs(ten_thousand_jobs: Store) -> None:
    pool = factory.raw(ten_thousand_jobs)
    assert isinstance(pool, asyncpg.Pool)
    job = await factory.sql_value(ten_thousand_jobs, "SELECT id FROM jobs WHERE name = 'job-05000'")
    async with pool.acquire() as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        for n, (query, template) in enumerate(CASES):
            args = template.format(job=job)
            await conn.execute(f"PREPARE q{n} AS {QUERIES[query]}")
            call = f"q{n}({args})" if args else f"q{n}"
            out = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {call}")
            plan = json.loads(out)[0]["Plan"]
            scans = [
                node
                for node in _nodes(plan)
                if node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "runs"
            ]
            assert scans == [], f"{query}({args}) scans runs: {json.dumps(plan)[:3000]}"
            assert plan["Actual Rows"] > 0, f"{query}({args}) found nothing: a vacuous plan"
