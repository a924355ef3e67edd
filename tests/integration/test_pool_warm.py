"""A supervisor's pool connection makes the claim's, the catch-up pass's and the
completions' plans before it serves (db.create_pool's `warm`): the first claim on a new
connection, at start-up or after a failover, does not pay 3-20 ms of the server's planning
and catalog look-ups. Warming claims nothing and changes nothing, and works on a database
not yet migrated."""

from __future__ import annotations

from supervisor.core.db import Conn, create_pool
from supervisor.core.migrator import migrate
from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

from ..factory import all_attempts, due_run, manual_runs, run_ids, set_run, sql_value, statuses
from ..helpers import drop_database, fresh_database

HOT = (
    "claim_runs",
    "claim_and_complete_runs",
    "skip_missed_runs",
    "complete_runs",
    "complete_runs_with_events",
)


async def _warm(conn: Conn) -> None:
    await Store(conn).warm_hot_statements()


async def _plans(conn: Conn) -> dict[str, int]:
    """Generic plans made so far on this connection, by statement name."""
    rows = await conn.fetch("SELECT statement, generic_plans FROM pg_prepared_statements")
    by_text = {r["statement"]: r["generic_plans"] for r in rows}
    return {name: by_text.get(QUERIES[name], 0) for name in HOT}


async def test_a_new_connection_has_the_hot_plans_before_it_serves(dsn: str) -> None:
    pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=True, warm=_warm)
    try:
        async with pool.acquire() as conn:
            assert await _plans(conn) == dict.fromkeys(HOT, 1)
    finally:
        await pool.close()
    cold = await create_pool(dsn, min_size=1, max_size=1, generic_plans=True)
    try:
        async with cold.acquire() as conn:
            assert await _plans(conn) == dict.fromkeys(HOT, 0)  # the check can fail
    finally:
        await cold.close()


async def test_warming_claims_and_changes_nothing(store: Store, dsn: str) -> None:
    job_id = await manual_runs(store, "echo", [5.0, 1.0])
    ids = await run_ids(store, job_id)
    # A run the catch-up pass skips once it judges it: warming judges nothing.
    missed = await due_run(store, "old", catchup="none")
    ago = await sql_value(store, "SELECT now() - interval '10 minutes'")
    await set_run(store, missed, scheduled_at=ago, run_after=ago)
    pool = await create_pool(dsn, min_size=3, max_size=3, generic_plans=True, warm=_warm)
    try:
        assert pool.get_size() == 3  # three connections warmed
        assert await statuses(store, ids) == {"scheduled": 2}
        assert await statuses(store, [missed]) == {"scheduled": 1}
        assert await all_attempts(store, ids) == []
        assert [s.id for s in (await Store(pool).skip_missed_runs(60.0, 100)).skipped] == [missed]
        # ... and the warmed connections still claim what is due.
        claimed = await Store(pool).claim_runs(["echo"], 10, "host-a", 30.0)
        assert sorted(c.id for c in claimed) == sorted(ids)
    finally:
        await pool.close()


async def test_a_warmed_pool_opens_on_an_unmigrated_database(admin_dsn: str) -> None:
    """`supervise --auto-migrate` opens its pool before the schema exists: the warm-up is
    skipped there (the statements plan on first use), never the connection."""
    name = "pc_pool_warm_empty"
    pool = await create_pool(
        await fresh_database(admin_dsn, name),
        min_size=1,
        max_size=1,
        generic_plans=True,
        warm=_warm,
    )
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
            assert await Store(conn).claim_runs(["echo"], 10, "host-a", 30.0) == []
    finally:
        await pool.close()
    await drop_database(admin_dsn, name)
