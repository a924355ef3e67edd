"""Each run-history query is served by an index, never a sequential scan of runs: checked
with EXPLAIN on the generic plan (the one a prepared statement settles on) over 50,000 runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from supervisor.store import QUERIES, Store

INF = "'infinity'::timestamptz"
FIRST = f"{INF}, 9223372036854775807"
DEEP = "now() - interval '300 seconds', 9223372036854775807"
WHOLE = f"'-infinity'::timestamptz, {INF}"
CASES = [
    ("list_runs_page", "{key}, {range}, NULL, NULL, 50", "runs_history"),
    (
        "list_runs_page",
        f"{{key}}, now() - interval '2 hours', {INF}, now() - interval '1 day', NULL, 50",
        "runs_history",
    ),
    ("list_runs_by_status", "'{{dead}}', {key}, {range}, NULL, NULL, 50", "runs_status_history"),
    (
        "list_runs_by_status",
        "'{{dead,failed}}', {key}, {range}, NULL, NULL, 500",
        "runs_status_history",
    ),
    ("list_runs_by_job", "'{{7}}', NULL, {key}, {range}, NULL, NULL, 50", "runs_job_history"),
    (
        "list_runs_by_job",
        "'{{7,8}}', '{{dead}}', {key}, {range}, NULL, NULL, 50",
        "runs_job_history",
    ),
]


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


@pytest.mark.parametrize(("query", "args", "index"), CASES)
async def test_history_queries_use_their_index(
    store: Store, query: str, args: str, index: str
) -> None:
    await store._ex.execute(
        """insert into jobs (name, type, cron) select 'j' || g, 'echo', '* * * * *'
           from generate_series(1, 100) g;
           insert into runs (job_id, scheduled_at, run_after, type, max_attempts, status)
           select 1 + g % 100, now() - make_interval(secs => g), now(), 'echo', 3,
                  (array['succeeded','dead','failed','scheduled'])[1 + g % 4]::run_status
           from generate_series(1, 50000) g;
           analyze jobs; analyze runs;"""
    )
    async with store.transaction() as tx:
        conn = tx._ex
        await conn.execute("set local plan_cache_mode = force_generic_plan")
        await conn.execute(f"prepare q as {QUERIES[query]}")
        for key in (FIRST, DEEP):
            sql = f"explain (format json) execute q({args.format(key=key, range=WHOLE)})"
            plan = json.loads(await conn.fetchval(sql))[0]["Plan"]
            scans = [n for n in _nodes(plan) if n.get("Relation Name") == "runs"]
            assert scans, plan
            assert all(
                n["Node Type"] == "Index Scan" and n["Index Name"] == index for n in scans
            ), json.dumps(plan, indent=1)
        await conn.execute("deallocate q")
