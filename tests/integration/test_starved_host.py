"""A starved host (its CPU shared by many processes, its statements queued at the pooler):
answers come late, and the lease protocol must neither throw their time away nor start
children it would kill at once (tests/e2e/test_fleet_faults.py's fleet on 2 cores)."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from supervisor import lease
from supervisor.core.store import Store
from supervisor.heartbeater import Heartbeater

from ..factory import due_run
from ..helpers import wait_for
from .test_lost_replies import TTL
from .test_services import RecordingLeases, _running_executor


async def test_a_slow_renewal_is_waited_for_not_cancelled(dsn: str, store: Store) -> None:
    """A renewal slower than a heartbeat interval (a starved host, a queue at the pooler)
    still extends the lease: cancelling it at TTL/3 threw that time away and cost the server a
    CancelRequest; on a loaded fleet every renewal was cancelled and every run lost."""
    ttl = 3.0
    run_id = await due_run(store, "slow")
    [row] = await store.claim_runs(["echo"], 1, "w1", ttl)
    holder = RecordingLeases([(run_id, row.lease_token)])
    hb = Heartbeater(store, owner="w1", lease_ttl=ttl, holder=holder)
    locker = await asyncpg.connect(dsn)
    try:
        await locker.execute("BEGIN")
        await locker.execute("SELECT 1 FROM runs WHERE id = $1 FOR UPDATE", run_id)
        beat = asyncio.ensure_future(hb.run_once())
        # Held past one interval (ttl/3), released well before the lease's useful end.
        await wait_for(lambda: beat.done() or _waits_on_lock(locker), 10, "the renewal to wait")
        held = time.monotonic()
        await wait_for(lambda: time.monotonic() - held > hb.interval * 1.2, 5, "an interval")
        assert not beat.done(), "the renewal waits for the lock"
        await locker.execute("ROLLBACK")
        done = await beat
    finally:
        await locker.close()
    assert (done.renewed, done.missing) == (1, 0)
    assert holder.answers == [{run_id}]
    assert hb.failures == 0


async def _waits_on_lock(conn: asyncpg.Connection) -> bool:
    waiting = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database()"
    )
    return bool(waiting)


async def test_a_claim_back_too_late_to_keep_its_lease_starts_no_child(store: Store) -> None:
    """A claim whose answer came back with less lease left than the fence's margin (a slow
    server, a starved host) is fenced before a child costs a spawn only to be killed."""
    async with _running_executor(store, ("sleep", "60")) as (executor, ended):
        run_id = await due_run(store, "late-claim")
        [row] = await store.claim_runs(["echo"], 1, "w1", TTL)
        sent = time.monotonic() - TTL * (1 - lease.SELF_FENCE) - 0.1  # sent that long ago
        executor.start(row, sent)
        entry = executor.inflight[run_id]
        await wait_for(lambda: executor.in_flight() == 0, 10, "the attempt to end")
        assert entry.child is None, "no child was started"
        assert executor.self_fenced == 1
    assert [e.outcome for e in ended] == ["lease_lost"]
