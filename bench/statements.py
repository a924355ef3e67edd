"""PostgreSQL's CPU per run for the hot statements alone: one connection claims runs and
records their results in a loop, as a supervisor's claimer and completer do, with no
children and no other process. `python -m bench.statements` prints backend CPU per run (its
/proc times) for each variant, alternated round by round on fresh copies of one database,
and each variant's ratio to `as-is` in the same run.

Variants (each drains the same due runs; every run must end succeeded after one attempt):
- `as-is`: claim_runs, then complete_runs for the previous claim's runs (two statements
  and two commits per batch), through the supervisor's pool settings (generic plans).
- `merged`: the previous batch's completion carried by the next claim, one statement (the
  claim's and the completion's CTEs in one WITH list). Not what the supervisor does: it
  measures what merging them would save (DESIGN.md, Lease and fencing protocol).
- `lean-claim`: claim_runs without its lost-reply recovery CTEs (what a claim with
  `held` NULL could send instead).
- `no-history-indexes`: `as-is` on a `runs` without the indexes only the history reads
  (HISTORY_INDEXES: the status lists and retention). Not a schema we could ship: it
  measures what the index upkeep of the two non-HOT updates per run costs, the most a hot
  queue kept apart from the history could save on them (docs/performance.md).
- `no-attempt-fk`: `as-is` without the attempts' foreign key to `runs` (its check locks the
  run's row `FOR KEY SHARE` for every attempt the claim inserts). Not a schema we ship
  either: it measures what that check costs the claim.
`--batch` sets the runs per claim (the supervisor's claim takes its free slots).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import asyncpg
import psutil

from bench.common import Databases, admin_dsn
from bench.throughput import insert_due_runs
from supervisor.core.db import create_pool
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.runpath import Completion, completion_columns
from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

OWNER = "bench-statements:1"
TYPE = "bench"
VARIANTS = ("as-is", "merged", "lean-claim", "no-history-indexes", "no-attempt-fk")
# Read only by the API's history lists and the pruner, never by claim or completion.
HISTORY_INDEXES = ("runs_status_history", "runs_finished")
_CLAIM_PARAMS = 9  # claim_runs' $1..$9; the completion's follow in the merged statement


def _cut(sql: str, start: str, end: str) -> tuple[str, str, str]:
    """sql split around [start, end): a query that changed shape fails here, by name."""
    i, j = sql.find(start), sql.find(end)
    if i < 0 or j < i:
        raise RuntimeError(f"bench.statements: {start!r} .. {end!r} not found; adapt it")
    return sql[:i], sql[i:j], sql[j:]


def merged_sql() -> str:
    """claim_runs with complete_runs' CTEs in its WITH list; the recorded run ids in the
    last column of every row, and one row of NULLs beside them when nothing was claimed."""
    head, ctes, select = _cut(QUERIES["claim_runs"], "WITH ", "\nSELECT c.id, c.job_id")
    _, comp_ctes, _ = _cut(QUERIES["complete_runs"], "WITH t AS (", "\nSELECT d.id, d.run_after")
    comp_ctes = re.sub(
        r"\$(\d+)", lambda m: f"${int(m.group(1)) + _CLAIM_PARAMS}", comp_ctes[len("WITH ") :]
    )
    return (
        f"{head}{ctes},\n{comp_ctes},\nclaim_rows AS ({select.strip().rstrip(';')})\n"
        "SELECT c.id, c.lease_token, c.run_after, (SELECT array_agg(id) FROM done) AS recorded\n"
        "FROM claim_rows c RIGHT JOIN (SELECT 1) one ON true ORDER BY c.run_after, c.id"
    )


def lean_claim_sql() -> str:
    head, _, tail = _cut(QUERIES["claim_runs"], "orphans AS (", "candidates AS (")
    # $5 (held) is read only by the recovery CTEs: keep its type known to the server.
    return (head + tail).replace("now() AS db_now,", "now() AS db_now, $5::bigint[] AS held,", 1)


MERGED = merged_sql()
LEAN_CLAIM = lean_claim_sql()


def _completions(claimed: Sequence[tuple[int, int]]) -> list[Completion]:
    return [
        Completion(
            run_id=run_id,
            lease_token=token,
            status=RunStatus.SUCCEEDED,
            retry_in=0.0,
            outcome=Outcome.SUCCEEDED,
            exit_code=0,
            stdout_tail="",
            stderr_tail="",
            cpu_seconds=0.001,
            peak_rss_bytes=1 << 20,
        )
        for run_id, token in claimed
    ]


Claimed = list[tuple[int, int, Any]]  # (run id, lease token, run_after)


async def step(
    pool: asyncpg.Pool,
    store: Store,
    variant: str,
    batch: int,
    pending: list[tuple[int, int]],
    cursor: tuple[Any, int] | None,
) -> tuple[Claimed, set[int]]:
    """One claim of `batch` runs and the results of `pending`: what it claimed, and which
    of `pending` it recorded."""
    after = [None if cursor is None else cursor[0]], [None if cursor is None else cursor[1]]
    claim_args = ([TYPE], batch, OWNER, 60.0, None, 0.0, 60.0, *after)
    if variant == "merged":
        results = completion_columns(_completions(pending))
        rows = await pool.fetch(MERGED, *claim_args, *results, OWNER)
        recorded = set(rows[0]["recorded"] or [])  # one row at least (the RIGHT JOIN)
        return [(r["id"], r["lease_token"], r["run_after"]) for r in rows if r["id"]], recorded
    if variant == "lean-claim":
        rows = await pool.fetch(LEAN_CLAIM, *claim_args)
        claimed = [(r["id"], r["lease_token"], r["run_after"]) for r in rows]
    else:
        cursors = None if cursor is None else {TYPE: cursor}
        claims = await store.claim_runs([TYPE], batch, OWNER, 60.0, after=cursors)
        claimed = [(c.id, c.lease_token, c.run_after) for c in claims]
    return claimed, await store.complete_runs(_completions(pending), OWNER)


async def drain(dsn: str, variant: str, runs: int, batch: int) -> dict[str, Any]:
    """Drain `runs` due runs with one connection; backend CPU per run and the outcome."""
    setup = await asyncpg.connect(dsn)
    try:
        if variant == "no-history-indexes":
            for index in HISTORY_INDEXES:
                await setup.execute(f"DROP INDEX {index}")
        if variant == "no-attempt-fk":
            await setup.execute("ALTER TABLE run_attempts DROP CONSTRAINT run_attempts_run_id_fkey")
        await insert_due_runs(setup, runs, TYPE)
    finally:
        await setup.close()
    pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=True)
    try:
        backend = psutil.Process(await pool.fetchval("SELECT pg_backend_pid()"))
        store = Store(pool)
        before = backend.cpu_times()
        pending: list[tuple[int, int]] = []
        cursor: tuple[Any, int] | None = None
        while True:
            claimed, recorded = await step(pool, store, variant, batch, pending, cursor)
            if {run_id for run_id, _ in pending} - recorded:
                raise RuntimeError(f"{variant}: a result was not recorded")
            # While claims come back full, read on after the last one (claimer.py's cursor).
            cursor = (claimed[-1][2], claimed[-1][0]) if len(claimed) == batch else None
            pending = [(run_id, token) for run_id, token, _ in claimed]
            if not pending:
                break
        after = backend.cpu_times()
        once = await pool.fetchval(
            """SELECT count(*) FROM runs r WHERE r.status = 'succeeded' AND r.attempts = 1
                     AND (SELECT count(*) FROM run_attempts a WHERE a.run_id = r.id
                            AND a.outcome = 'succeeded') = 1"""
        )
    finally:
        await pool.close()
    cpu = (after.user - before.user) + (after.system - before.system)
    return {"variant": variant, "cpu_us_per_run": cpu / runs * 1e6, "exactly_once": once == runs}


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.statements", description=__doc__)
    p.add_argument("--runs", type=int, default=4000, help="runs per drain (default 4000)")
    p.add_argument("--rounds", type=int, default=3, help="drains of each variant (default 3)")
    p.add_argument("--batch", type=int, default=8, help="runs per claim (default 8)")
    p.add_argument("--variant", action="append", choices=VARIANTS, help="default: all")
    args = p.parse_args(argv)
    variants = args.variant or list(VARIANTS)
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    ok = True
    with admin_dsn() as admin:
        dbs = Databases(admin)
        await dbs.create()
        print(json.dumps({"server": await dbs.server_info(), "batch": args.batch}), flush=True)
        try:
            for r in range(args.rounds):
                for v in variants if r % 2 == 0 else variants[::-1]:
                    async with dbs.fresh(f"st{r}{v.replace('-', '')}") as dsn:
                        res = await drain(dsn, v, args.runs, args.batch)
                    print(json.dumps(res), flush=True)
                    cpu[v].append(res["cpu_us_per_run"])
                    ok &= res["exactly_once"]
        finally:
            await dbs.drop()
    base = statistics.median(cpu["as-is"]) if "as-is" in cpu else None
    for v, values in cpu.items():
        med = statistics.median(values)
        ratio = f", {med / base:.2f}x as-is" if base else ""
        print(f"{v}: {med:.1f} us of backend CPU per run (median of {len(values)}){ratio}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
