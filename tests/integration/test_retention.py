"""Retention: finished runs past their period go; planned, retrying and running runs stay."""

from __future__ import annotations

from supervisor.core import jobs
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Store
from supervisor.pruner import Pruner

from ..factory import count, run_ids, sql, sql_rows
from ..helpers import job


async def test_pruning_keeps_what_it_must(store: Store) -> None:
    row = await jobs.create_job(store, job("r", cron="* * * * *"), PlanLimits(max_runs=30))
    ids = await run_ids(store)
    assert len(ids) >= 20

    # Age finished runs through data, not time: finished N days ago.
    def age(run_id: int, status: str, days: float) -> str:
        return (
            f"update runs set status='{status}', finished_at = now() - interval '{days} days'"
            f" where id = {run_id}"
        )

    cases = {
        ids[0]: ("succeeded", 31),  # pruned (30 days)
        ids[1]: ("succeeded", 29),  # kept
        ids[2]: ("skipped", 31),  # pruned
        ids[3]: ("dead", 31),  # kept (90 days)
        ids[4]: ("dead", 91),  # pruned
        ids[5]: ("cancelled", 91),  # pruned
    }
    for run_id, (status, days) in cases.items():
        await sql(store, age(run_id, status, days))
    # A retrying run and a running run from long ago are never pruned. (These rows, each
    # in its own state, are the test's point: one-off statements.)
    await sql(
        store,
        "update runs set status='failed', attempts=1, run_after=now() - interval '200 days' where id=$1",
        ids[6],
    )
    await sql(
        store,
        "update runs set status='running', attempts=1, lease_owner='w', lease_token=1,"
        " lease_expires_at = now() - interval '200 days', started_at = now() - interval '200 days'"
        " where id=$1",
        ids[7],
    )
    await sql(
        store,
        "insert into run_attempts (run_id, attempt, worker_id, lease_token, finished_at, outcome)"
        " values ($1, 1, 'w', 1, now() - interval '31 days', 'succeeded')",
        ids[0],
    )
    pruner = Pruner(store, keep_succeeded_days=30, keep_failed_days=90, batch=2)
    passes = [await pruner.run_once()]
    while passes[-1].next_in == 0.0:  # full batches continue at once
        passes.append(await pruner.run_once())
    assert [p.pruned for p in passes] == [2, 2, 0]
    left = set(await run_ids(store))
    pruned = {ids[0], ids[2], ids[4], ids[5]}
    assert pruned.isdisjoint(left)
    assert set(ids) - pruned == left
    assert pruner.pruned == 4
    assert await count(store, "run_attempts", "run_id=$1", ids[0]) == 0
    assert (await store.get_job(row.id)) is not None
    # Each batch went on from where the previous one ended; a sweep that ended starts the
    # next one from the oldest again, so a run older than where it stopped still goes.
    await sql(store, age(ids[1], "succeeded", 95))
    assert (await pruner.run_once()).pruned == 1
    assert ids[1] not in set(await run_ids(store))


async def test_finished_deliveries_past_retention_go_in_batches_pending_ones_stay(
    store: Store,
) -> None:
    from supervisor.core import channels
    from supervisor.core.events import ChannelSpec

    from ..notify_support import SECRET

    spec = ChannelSpec(name="ops", url="http://127.0.0.1:9/hook", secret=SECRET)
    cid = (await channels.create_channel(store, spec)).id
    ids = [await channels.test_channel(store, cid) for _ in range(6)]
    # (Each row's state is the test's point: one-off statements.)
    cases = {  # id: (status, age in days)
        ids[0]: ("delivered", 31),  # pruned
        ids[1]: ("failed", 31),  # pruned
        ids[2]: ("delivered", 31),  # pruned
        ids[3]: ("pending", 31),  # kept: never delivered, still tried
        ids[4]: ("delivered", 29),  # kept
        ids[5]: ("failed", 1),  # kept
    }
    for outbox_id, (st, days) in cases.items():
        await sql(
            store,
            "update outbox set status = $2, created_at = now() - make_interval(days => $3),"
            " finished_at = CASE WHEN $2 <> 'pending' THEN now() END where id = $1",
            outbox_id,
            st,
            days,
        )
    await sql(
        store,
        "insert into delivery_attempts (outbox_id, attempt, worker_id, duration_seconds)"
        " values ($1, 1, 'w', 0.1)",
        ids[0],
    )
    pruner = Pruner(store, keep_succeeded_days=30, keep_failed_days=90, batch=2)
    passes = [await pruner.run_once()]
    while passes[-1].next_in == 0.0:
        passes.append(await pruner.run_once())
    assert [p.deliveries for p in passes] == [2, 1]
    left = {r["id"] for r in await sql_rows(store, "select id from outbox")}
    assert left == {ids[3], ids[4], ids[5]}
    assert pruner.pruned_deliveries == 3
    assert await count(store, "delivery_attempts") == 0
