"""The completer against a real PostgreSQL: a value the database refuses fails only the
result that carries it, never the batch or the service (issue 11: a NUL byte in a tail once
ended the supervisor and made the run a poison pill for every host)."""

from __future__ import annotations

import asyncio

from supervisor.completer import Completer
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.store import Completion, Store

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
    stop = asyncio.Event()
    service = asyncio.create_task(completer.run(stop))
    try:
        async with asyncio.timeout(10):
            results = await asyncio.gather(
                *(completer.submit(c, False) for c in (good, bad, also_good))
            )
    finally:
        stop.set()
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
