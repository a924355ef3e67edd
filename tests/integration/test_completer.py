"""The completer against a real PostgreSQL: a value the database refuses fails only the
result that carries it, never the batch or the service (issue 11: a NUL byte in a tail once
ended the supervisor and made the run a poison pill for every host)."""

from __future__ import annotations

import asyncio

from supervisor.completer import COALESCE, Completer
from supervisor.core.db import create_pool
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.runpath import Completion
from supervisor.core.store import Store

from ..factory import all_attempts, due_run, run_ids, statuses
from .test_lost_replies import TTL

SUCCEEDED = RunStatus.SUCCEEDED


async def test_a_refused_value_fails_only_its_own_result(store: Store) -> None:
    ids = [await due_run(store, f"r{i}") for i in range(3)]
    claimed = {r.id: r for r in await store.claim_runs(["echo"], 10, "w1", TTL)}
    assert sorted(claimed) == sorted(ids)
    good, bad, also_good = (
        Completion(i, claimed[i].lease_token, SUCCEEDED, 0.0, Outcome.SUCCEEDED, stdout_tail="ok")
        for i in ids
    )
    # PostgreSQL text cannot hold NUL: as if the runner had not cleaned the tail.
    bad = Completion(bad.run_id, bad.lease_token, SUCCEEDED, 0.0, Outcome.SUCCEEDED, None, 0,
                     stdout_tail="a\x00b", stderr_tail="warn")  # fmt: skip
    completer = Completer(store, owner="w1", lease_ttl=TTL)
    service = asyncio.create_task(completer.run())
    try:
        async with asyncio.timeout(10):
            results = await asyncio.gather(
                *(completer.submit(c, False) for c in (good, bad, also_good))
            )
    finally:
        completer.stop()
        await asyncio.wait_for(service, 10)
    assert results == [True, True, True]
    assert completer.refused == 1
    rows = {r["run_id"]: r for r in await all_attempts(store)}
    assert rows[good.run_id]["stdout_tail"] == "ok" and rows[also_good.run_id]["error"] is None
    refused = rows[bad.run_id]
    # The true outcome stands; only the output that could not be stored is dropped, and
    # the error says so.
    assert refused["outcome"] == "succeeded"
    assert (refused["stdout_tail"], refused["stderr_tail"]) == (None, None)
    assert refused["error"].startswith("result not stored in full: ")
    assert await statuses(store, await run_ids(store)) == {"succeeded": 3}


async def test_a_pass_waits_for_company_then_records_the_batch_in_one_statement(
    store: Store,
) -> None:
    ids = [await due_run(store, f"r{i}") for i in range(2)]
    first, second = (
        Completion(c.id, c.lease_token, SUCCEEDED, 0.0, Outcome.SUCCEEDED)
        for c in await store.claim_runs(["echo"], 10, "w1", TTL)
    )
    completer = Completer(store, owner="w1", lease_ttl=TTL)
    told: list[bool | None] = []
    completer.enqueue(first, False, told.append)
    waiting = await completer.run_once()
    assert waiting.next_in is not None and 0 < waiting.next_in <= COALESCE + 1e-9
    assert waiting.recorded == 0 and await statuses(store, ids) == {"running": 2}
    completer.enqueue(second, False, told.append)
    completer.stop()  # stopping: no more waiting for company
    done = await completer.run_once()
    assert (done.recorded, told) == (2, [True, True])
    assert await statuses(store, ids) == {"succeeded": 2}
    assert (await completer.run_once()).next_in is None  # nothing left: the next result wakes it


async def test_after_stop_an_unreachable_database_is_retried_for_one_ttl_then_given_up(
    dsn: str,
) -> None:
    pool = await create_pool(dsn, min_size=1, max_size=1)
    await pool.close()  # every statement now fails as a lost database does (DB_ERRORS)
    completer = Completer(Store(pool), owner="w1", lease_ttl=0.3)
    told: list[bool | None] = []
    completer.enqueue(Completion(1, 1, SUCCEEDED, 0.0, Outcome.SUCCEEDED), False, told.append)
    completer.stop()
    async with asyncio.timeout(10):
        await completer.run()
    assert told == [None] and completer.errors >= 2  # retried, then given up: never hangs
