"""Overlap policies in the claim transaction: skip is recorded, wait waits, races lose cleanly."""

from __future__ import annotations

import asyncio

import pytest

from supervisor.core.db import create_pool
from supervisor.core.errors import UniqueConflict
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.records import Claim
from supervisor.core.runpath import Completion
from supervisor.core.store import Store

from ..factory import count, run_ids, runs, sql, sql_rows, statuses
from ..helpers import job


async def _job_with_due_runs(store: Store, overlap: str, n: int) -> int:
    row = await store.insert_job(job(f"o-{overlap}", cron="0 0 1 1 *", overlap=overlap))
    await sql(  # n runs due at once, planned by hand: what the overlap rules are about
        store,
        "INSERT INTO runs (job_id, scheduled_at, run_after, type, exclusive, max_attempts)"
        " SELECT $1, now() - make_interval(secs => i), now() - make_interval(secs => i),"
        " 'echo', $2, 3 FROM generate_series(1, $3) AS i",
        row.id,
        overlap != "allow",
        n,
    )
    return int(row.id)


async def _claim(store: Store, owner: str = "w1", limit: int = 10) -> list[Claim]:
    async with store.transaction() as tx:
        await tx.skip_missed_runs(60.0, 1000)
        return await tx.claim_runs(["echo"], limit, owner, 30.0)


async def _statuses(store: Store, job_id: int) -> dict[str, int]:
    return await statuses(store, await run_ids(store, job_id))


async def test_allow_runs_everything_at_once(store: Store) -> None:
    job_id = await _job_with_due_runs(store, "allow", 3)
    assert len(await _claim(store)) == 3
    assert await _statuses(store, job_id) == {"running": 3}


async def test_skip_records_overlapping_runs_as_skipped(store: Store) -> None:
    job_id = await _job_with_due_runs(store, "skip", 3)
    first = await _claim(store)
    assert len(first) == 1, "one run of an exclusive job at a time"
    assert first[0].scheduled_at == min(
        r["scheduled_at"] for r in (await runs(store, await run_ids(store))).values()
    )
    assert await _claim(store) == []
    assert await _statuses(store, job_id) == {"running": 1, "skipped": 2}
    reasons = await sql_rows(  # why the others were skipped
        store, "SELECT DISTINCT skip_reason FROM runs WHERE status='skipped'"
    )
    assert [r["skip_reason"] for r in reasons] == ["overlap"]


async def test_wait_keeps_runs_until_the_running_one_ends(store: Store) -> None:
    job_id = await _job_with_due_runs(store, "wait", 3)
    first = await _claim(store)
    assert len(first) == 1
    assert await _claim(store) == []
    assert await _statuses(store, job_id) == {"running": 1, "scheduled": 2}
    done = await store.complete_runs(
        [
            Completion(
                first[0].id, first[0].lease_token, RunStatus.SUCCEEDED, 0.0, Outcome.SUCCEEDED
            )
        ],
        "w1",
    )
    assert done == {first[0].id}
    second = await _claim(store)
    assert len(second) == 1
    assert await _statuses(store, job_id) == {"succeeded": 1, "running": 1, "scheduled": 1}


@pytest.mark.parametrize("overlap", ["skip", "wait"])
async def test_racing_claimers_never_run_an_exclusive_job_twice(
    dsn: str, store: Store, overlap: str
) -> None:
    job_id = await _job_with_due_runs(store, overlap, 6)
    pools = [await create_pool(dsn, min_size=1, max_size=1) for _ in range(6)]
    try:
        for _ in range(5):
            results = await asyncio.gather(
                *(_claim(Store(p), f"w{i}") for i, p in enumerate(pools)),
                return_exceptions=True,
            )
            # A racer may lose on runs_one_running_exclusive; the claimer then retries.
            for r in results:
                lost_race = isinstance(r, UniqueConflict)
                assert isinstance(r, list) or lost_race, r
                assert not lost_race or r.constraint == "runs_one_running_exclusive", r
            running = await count(store, "runs", "job_id=$1 AND status='running'", job_id)
            assert running == 1
    finally:
        for p in pools:
            await p.close()
