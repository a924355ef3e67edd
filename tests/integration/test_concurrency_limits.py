"""Concurrency limits in the claim transaction: a job's max_concurrent and a group's
max_running hold across claimers (racing ones meet in the slot indexes), a limit reached
keeps its runs out of the claim window so other jobs still start, and a changed limit
applies to the next claim."""

from __future__ import annotations

import asyncio

from supervisor.core import groups as groups_ops
from supervisor.core.db import create_pool
from supervisor.core.domain import JobLimits
from supervisor.core.errors import UniqueConflict
from supervisor.core.groups import groups, store_job_limits
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.records import Claim
from supervisor.core.runpath import Completion
from supervisor.core.store import Store

from ..factory import count, sql
from ..helpers import job, wait_for


async def _job(store: Store, name: str, n: int, limits: JobLimits) -> int:
    row = await store.insert_job(job(name, cron="0 0 1 1 *"))
    async with store.transaction() as tx:
        await store_job_limits(tx, row.id, limits)
    await sql(  # n runs due at once, oldest first, within the misfire grace (not missed)
        store,
        "INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts)"
        " SELECT $1, now() - make_interval(secs => (100 - i) / 10.0),"
        " now() - make_interval(secs => (100 - i) / 10.0), 'echo', 3"
        " FROM generate_series(1, $2) AS i",
        row.id,
        n,
    )
    return int(row.id)


async def _claim(store: Store, owner: str = "w1", limit: int = 10) -> list[Claim]:
    async with store.transaction() as tx:
        return await tx.claim_runs(["echo"], limit, owner, 30.0)


async def _running(store: Store, where: str = "true") -> int:
    return await count(store, "runs", f"status = 'running' AND {where}")


async def _finish(store: Store, c: Claim, owner: str = "w1") -> None:
    done = Completion(c.id, c.lease_token, RunStatus.SUCCEEDED, 0.0, Outcome.SUCCEEDED)
    assert await store.complete_runs([done], owner) == {c.id}


async def test_max_concurrent_holds_and_a_free_slot_is_taken_again(store: Store) -> None:
    await _job(store, "fan", 5, JobLimits(max_concurrent=2))
    first = await _claim(store)
    assert len(first) == 2 and all(c.wakes_others for c in first)
    assert first[0].held_back == 3  # locked by this claim, left waiting
    assert await _claim(store, "w2") == []  # a limit reached: out of the window
    await _finish(store, first[0])
    again = await _claim(store, "w2")
    assert len(again) == 1 and await _running(store) == 2


async def test_a_group_limits_its_jobs_together_and_others_still_start(store: Store) -> None:
    await groups(store).insert_group("db-heavy", 2)
    await _job(store, "a", 4, JobLimits(group="db-heavy"))
    await _job(store, "b", 4, JobLimits(group="db-heavy"))
    free = await store.insert_job(job("free", cron="0 0 1 1 *"))
    await sql(
        store,
        "INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts)"
        " SELECT $1, now() - make_interval(secs => i), now() - make_interval(secs => i),"
        " 'echo', 3 FROM generate_series(1, 3) AS i",  # due after all of the group's
        free.id,
    )
    first = await _claim(store, limit=4)  # the window: 4 group runs, 2 may start
    assert len(first) == 2 and first[0].held_back == 2
    second = await _claim(store, limit=4)  # the group is full: its runs leave the window
    assert len(second) == 3 and {c.job_name for c in second} == {"free"}
    assert await _running(store, "run_group = 'db-heavy'") == 2
    # A new limit applies to the next claim.
    await groups(store).update_group("db-heavy", 3)
    assert len(await _claim(store)) == 1
    await groups(store).update_group("db-heavy", 1)
    assert await _claim(store) == []  # 3 still run (they finish); none above the limit starts
    listed = await groups(store).list_groups("db-heavy")
    assert (listed[0].max_running, listed[0].running) == (1, 3)


async def test_racing_claimers_never_exceed_a_group_limit(dsn: str, store: Store) -> None:
    await groups(store).insert_group("g", 2)
    for i in range(3):
        await _job(store, f"j{i}", 10, JobLimits(group="g"))
    pools = [await create_pool(dsn, min_size=1, max_size=1) for _ in range(6)]
    lost = 0
    try:
        for _ in range(6):
            results = await asyncio.gather(
                *(_claim(Store(p), f"w{i}", 3) for i, p in enumerate(pools)),
                return_exceptions=True,
            )
            for r in results:
                if isinstance(r, UniqueConflict):  # the claimer retries
                    assert r.constraint == "runs_group_slot", r
                    lost += 1
                else:
                    assert isinstance(r, list), r
            assert await _running(store) <= 2
        assert await _running(store) == 2
    finally:
        for p in pools:
            await p.close()


async def test_two_uncommitted_claims_of_one_slot_meet_in_the_index(dsn: str, store: Store) -> None:
    await groups(store).insert_group("one", 1)
    await _job(store, "solo", 4, JobLimits(group="one"))
    a = await create_pool(dsn, min_size=1, max_size=1)
    b = await create_pool(dsn, min_size=1, max_size=1)
    try:
        b_pid = await b.fetchval("SELECT pg_backend_pid()")
        async with a.acquire() as ca:
            tx = ca.transaction()
            await tx.start()
            got = await Store(ca).claim_runs(["echo"], 1, "wa", 30.0)  # slot 0, not committed
            assert len(got) == 1
            other = asyncio.ensure_future(_claim(Store(b), "wb", 1))  # sees slot 0 as free

            async def b_waits() -> bool:  # on a's uncommitted entry in runs_group_slot
                event = await ca.fetchval(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", b_pid
                )
                return bool(event == "Lock")

            await wait_for(b_waits, 10, "the second claim to wait on the slot index")
            assert not other.done()
            await tx.commit()
            try:
                await other
            except UniqueConflict as exc:  # the claimer retries; the retry sees the slot taken
                assert exc.constraint == "runs_group_slot"
            else:
                raise AssertionError("two claims held one slot")
            assert await _claim(Store(b), "wb", 1) == []
        assert await _running(store) == 1
    finally:
        await a.close()
        await b.close()


async def test_a_group_in_use_cannot_be_deleted_until_its_jobs_leave(store: Store) -> None:
    await groups(store).insert_group("g", 2)
    job_id = await _job(store, "member", 0, JobLimits(group="g"))
    try:
        await groups_ops.delete_group(store, "g")
    except groups_ops.Conflict as exc:
        assert "has 1 job(s)" in str(exc)
    else:
        raise AssertionError("deleted a group in use")
    await store.soft_delete_job(job_id)  # a deleted job leaves its group
    await groups_ops.delete_group(store, "g")
    assert await groups(store).list_groups("g") == []
