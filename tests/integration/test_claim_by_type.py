"""Claims and the next-due query read each offered type's due runs apart (migration 0012):
runs of a type nobody here offers are neither read nor locked, and the offered types' runs
come merged in run_after order. The plan itself: test_hot_plans.py."""

from __future__ import annotations

from supervisor.core.store import Store

from ..factory import manual_runs, sql_rows


async def test_a_claim_merges_the_offered_types_and_leaves_the_others_alone(
    store: Store,
) -> None:
    a = await manual_runs(store, "a", [50, 30, 10])
    b = await manual_runs(store, "b", [40, 20])
    unserved = await manual_runs(store, "c", [float(s) for s in range(100, 2100)])  # older than all
    async with store.transaction() as tx:
        claimed = await tx.claim_runs(["a", "b", "a"], 3, "w1", 30.0)
        # The unoffered backlog is not locked by the claim (another host may take it).
        free = await sql_rows(
            store,
            "SELECT id FROM runs WHERE job_id = $1 FOR UPDATE SKIP LOCKED",
            unserved,
        )
    assert [(c.job_id, c.type) for c in claimed] == [(a, "a"), (b, "b"), (a, "a")]
    times = [c.scheduled_at for c in claimed]
    assert times == sorted(times)
    assert len(free) == 2000
    # What the claim locked past its limit was let go: the next claim takes it.
    async with store.transaction() as tx:
        rest = await tx.claim_runs(["b", "a"], 10, "w2", 30.0)
    assert sorted((c.job_id, c.type) for c in rest) == [(a, "a"), (b, "b")]


async def test_next_due_in_is_the_soonest_of_the_offered_types(store: Store) -> None:
    await manual_runs(store, "a", [-30.0])
    await manual_runs(store, "b", [-10.0])
    await manual_runs(store, "c", [-1.0])  # sooner, but not offered
    due = await store.next_due_in(["a", "b"])
    assert due is not None and 8 < due <= 10
    assert await store.next_due_in(["x"]) is None
