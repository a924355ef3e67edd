"""The claim cursor (DESIGN.md, Lease and fencing protocol): while a host's claims come back
full, the next reads on after the last run it claimed. Behind an old snapshot the index
entries of runs claimed since cannot be cleaned up, and a claim from the start steps over
every one of them; the cursor keeps a claim's reads to its own batch. A run the cursor
passed over is claimed again from the start after a NOTIFY or within CURSOR_EVERY."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from supervisor import claimpace
from supervisor.claimer import Claimer
from supervisor.core.db import create_pool
from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

from ..factory import manual_runs, sql, sql_rows
from .test_services import RecordingSlots

TTL = 30.0


async def _due(store: Store, n: int) -> list[tuple[Any, int]]:
    """`n` due manual runs of type a, oldest first: their (run_after, id)."""
    job_id = await manual_runs(store, "a", [float(n - i) for i in range(n)])
    rows = await sql_rows(
        store, "SELECT run_after, id FROM runs WHERE job_id = $1 ORDER BY run_after, id", job_id
    )
    return [(r["run_after"], r["id"]) for r in rows]


async def test_a_claim_reads_on_after_its_cursor(store: Store) -> None:
    due = await _due(store, 6)
    at, run_id = due[2]
    claimed = await store.claim_runs(["a"], 2, "w1", TTL, after={"a": (at, run_id)})
    assert [c.id for c in claimed] == [due[3][1], due[4][1]]
    assert [(c.run_after, c.id) for c in claimed] == due[3:5]
    # Another type's cursor is not this one's; without one a claim reads from the start.
    rest = await store.claim_runs(["a", "b"], 10, "w1", TTL, after={"b": (at, run_id)})
    assert [c.id for c in rest] == [i for _, i in due[:3] + due[5:]]


async def test_behind_an_old_snapshot_a_claim_with_its_cursor_reads_only_its_batch(
    dsn: str, store: Store
) -> None:
    """2,000 runs claimed and finished while another session holds a snapshot from before:
    their old index entries stay. A claim from the start visits every one of them; read on
    after the cursor, it touches about what it claims."""
    due = await _due(store, 2100)
    await sql(store, "ANALYZE jobs, runs")
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        assert await holder.fetchval("SELECT count(*) FROM runs") == 2100  # the snapshot
        for _ in range(20):
            ids = [c.id for c in await store.claim_runs(["a"], 100, "w1", TTL)]
            await sql(
                store,
                "UPDATE runs SET status = 'succeeded', finished_at = now(), lease_owner = NULL,"
                " lease_expires_at = NULL WHERE id = ANY($1)",
                ids,
            )
        at, last = due[1999]
        start = await _claim_reads(dsn, None)
        cursor = await _claim_reads(dsn, (at, last))
    finally:
        await holder.close()
    assert start["first"] == cursor["first"] == due[2000][1]  # the same run either way
    assert start["entries"] >= 2000, start
    assert cursor["entries"] <= 20, cursor


async def _claim_reads(dsn: str, after: tuple[Any, int] | None) -> dict[str, Any]:
    """One claim of 8 (rolled back) on a supervisor's session: the first run it claims, and
    how many runs_claimable_by_type entries its scan read (the dead ones included: the
    index hands them over before the heap says they are gone)."""
    at, run_id = after if after is not None else (None, None)
    args = (["a"], 8, "w1", TTL, None, 0.0, 3600.0, [at], [run_id])
    pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=True)
    try:
        async with pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                first = await conn.fetchval(QUERIES["claim_runs"], *args)
                entries = await conn.fetchval(
                    "SELECT pg_stat_get_xact_tuples_returned($1::regclass)",
                    "runs_claimable_by_type",
                )
            finally:
                await tx.rollback()
    finally:
        await pool.close()
    return {"first": first, "entries": entries}


async def test_a_run_passed_over_is_claimed_after_a_notify_or_within_a_second(
    dsn: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    due = [i for _, i in await _due(store, 8)]
    slots = RecordingSlots(free=2)
    claimer = Claimer(
        store, owner="w1", types=["a"], slots=slots, lease_ttl=TTL, misfire_grace=3600,
        poll_interval=5,
    )  # fmt: skip
    locker = await asyncpg.connect(dsn)
    try:
        # The oldest run is locked elsewhere (a claim in flight on another host): skipped.
        await locker.execute("BEGIN")
        await locker.execute("SELECT 1 FROM runs WHERE id = $1 FOR UPDATE", due[0])
        await claimer.run_once()
        assert [r.id for r in slots.started] == due[1:3]  # full: the cursor is after due[2]
        await locker.execute("ROLLBACK")  # that claim failed: due[0] is free again
    finally:
        await locker.close()
    slots.free += 2
    await claimer.run_once()
    assert [r.id for r in slots.started] == due[1:5]  # read on after the cursor
    claimer.notified()  # a NOTIFY: from the start again
    slots.free += 2
    await claimer.run_once()
    assert [r.id for r in slots.started] == [*due[1:5], due[0], due[5]]
    # Without a NOTIFY the cursors last CURSOR_EVERY at most.
    await _requeue(store, due[1])
    slots.free += 1
    await claimer.run_once()
    assert slots.started[-1].id == due[6]  # behind the cursor (after due[5]): passed over
    monkeypatch.setattr(claimpace, "CURSOR_EVERY", 0.0)
    claimer.notified()
    slots.free += 1
    await claimer.run_once()  # from the start; full: a new cursor, after due[1], for 0 s
    assert slots.started[-1].id == due[1]
    await _requeue(store, due[0])
    slots.free += 1
    await claimer.run_once()
    assert slots.started[-1].id == due[0]  # that cursor had lapsed: from the start


async def _requeue(store: Store, run_id: int) -> None:
    """The run is due again (as a reaped or requeued run is), behind where claims got to."""
    await sql(
        store,
        "UPDATE runs SET status = 'scheduled', lease_owner = NULL, lease_expires_at = NULL"
        " WHERE id = $1",
        run_id,
    )
