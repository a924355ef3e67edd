"""Each run-list query is served by its index, never a sequential scan of runs, and a first
page's scan starts at now rather than stepping over the runs on the far side of it: checked
with EXPLAIN (ANALYZE, BUFFERS) on the generic plan (the one a prepared statement settles
on) over 40,000 due and 40,000 planned runs."""

from __future__ import annotations

import json
from typing import Any

from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

from .. import factory

INF = "'infinity'::timestamptz"
WHOLE = f"'-infinity'::timestamptz, {INF}"
# Cursor keys: a first page and one 300 s in. History reads back from now, the plan ahead
# forward from now; a first page's open key must not make either step over the other side.
HISTORY_KEYS = (
    f"{INF}, 9223372036854775807",
    "now() - interval '300 seconds', 9223372036854775807",
)
UPCOMING_KEYS = ("'-infinity'::timestamptz, 0", "now() + interval '300 seconds', 0")
AT_NOW = "now(), 9223372036854775807"  # where both modes' first pages should start
DAY_AGO = f"now() - interval '2 hours', {INF}, now() - interval '1 day', NULL"
SOON = "now(), now() + interval '2 hours', NULL, NULL"
EVERY = "enum_range(NULL::run_status)"  # what the API passes when no status is asked for
CASES = [
    ("list_runs_by_status", f"{EVERY}, {{key}}, {{range}}, NULL, NULL, 50", "runs_status_history"),
    ("list_runs_by_status", f"{EVERY}, {{key}}, {DAY_AGO}, 50", "runs_status_history"),
    ("list_runs_by_status", "'{{dead}}', {key}, {range}, NULL, NULL, 50", "runs_status_history"),
    (
        "list_runs_by_status",
        "'{{dead,failed}}', {key}, {range}, NULL, NULL, 500",
        "runs_status_history",
    ),
    ("list_runs_by_job", "'{{7}}', NULL, {key}, {range}, NULL, NULL, 50", "runs_job_scheduled_at"),
    (
        "list_runs_by_job",
        "'{{7,8}}', '{{dead}}', {key}, {range}, NULL, NULL, 50",
        "runs_job_scheduled_at",
    ),
    (
        "list_runs_upcoming_by_status",
        f"{EVERY}, {{key}}, {{range}}, NULL, NULL, 50",
        "runs_status_history",
    ),
    ("list_runs_upcoming_by_status", f"{EVERY}, {{key}}, {SOON}, 50", "runs_status_history"),
    (
        "list_runs_upcoming_by_status",
        "'{{scheduled}}', {key}, {range}, NULL, NULL, 50",
        "runs_status_history",
    ),
    (
        "list_runs_upcoming_by_status",
        "'{{dead,scheduled}}', {key}, {range}, NULL, NULL, 500",
        "runs_status_history",
    ),
    (
        "list_runs_upcoming_by_job",
        "'{{7}}', NULL, {key}, {range}, NULL, NULL, 50",
        "runs_job_scheduled_at",
    ),
    (
        "list_runs_upcoming_by_job",
        "'{{7,8}}', '{{scheduled}}', {key}, {range}, NULL, NULL, 50",
        "runs_job_scheduled_at",
    ),
]


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


async def test_run_list_queries_use_their_index_from_the_page_position(store: Store) -> None:
    await factory.sql(  # 80,000 runs, so the planner has a reason to use the indexes
        store,
        """insert into jobs (name, type, cron) select 'j' || g, 'echo', '* * * * *'
           from generate_series(1, 100) g;
           insert into runs (job_id, scheduled_at, run_after, type, max_attempts, status,
                             finished_at)
           select 1 + g % 100, now() - make_interval(secs => g), now(), 'echo', 3,
                  (array['succeeded','dead','failed','scheduled'])[1 + g / 100 % 4]::run_status,
                  case when g / 100 % 4 < 2 then now() - make_interval(secs => g - 1) end
           from generate_series(1, 40000) g;
           insert into runs (job_id, scheduled_at, run_after, type, max_attempts, status)
           select 1 + g % 100, now() + make_interval(secs => g), now(), 'echo', 3,
                  (case when g % 8 = 0 then 'cancelled' else 'scheduled' end)::run_status
           from generate_series(1, 40000) g;
           analyze jobs; analyze runs;""",
    )
    assert set(QUERIES) >= {c[0] for c in CASES}
    assert {q for q in QUERIES if q.startswith("list_runs")} == {c[0] for c in CASES}
    async with store.transaction() as tx:  # one now() for every statement
        conn = factory.raw(tx)  # PREPARE and EXPLAIN on one connection: the test's point
        await conn.execute("set local plan_cache_mode = force_generic_plan")
        for n, (query, args, index) in enumerate(CASES):
            await conn.execute(f"prepare q{n} as {QUERIES[query]}")
            first, deep = UPCOMING_KEYS if "upcoming" in query else HISTORY_KEYS
            blocks = {}
            for key in (first, deep, AT_NOW):
                call = f"q{n}({args.format(key=key, range=WHOLE)})"
                sql = f"explain (analyze, buffers, format json) execute {call}"
                plan = json.loads(await conn.fetchval(sql))[0]["Plan"]
                scans = [p for p in _nodes(plan) if p.get("Relation Name") == "runs"]
                where = f"{query} {call}:\n{json.dumps(plan, indent=1)}"
                assert scans, where
                assert all(
                    p["Node Type"] == "Index Scan" and p["Index Name"] == index for p in scans
                ), where
                assert plan["Actual Rows"] > 0, where
                blocks[key] = sum(p["Shared Hit Blocks"] + p["Shared Read Blocks"] for p in scans)
            # The first page reads what a page starting exactly at now reads.
            assert blocks[first] <= blocks[AT_NOW] + 2, (query, args, blocks)
