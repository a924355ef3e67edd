"""Claims and completions whose reply was lost (connection killed around COMMIT).

The transaction committed but the host never saw the result. A retried completion must be
recognised as recorded, not reported late; runs claimed by a lost claim must go back
without being charged an attempt. (The e2e storm test hits both at random; these pin them.)
"""

from __future__ import annotations

from supervisor.core.model import Outcome, RunStatus
from supervisor.core.runpath import Completion
from supervisor.core.store import Store

from ..factory import age_lease, due_run, outcome, run_ids, run_row, runs

TTL = 30.0


def _done(
    run_id: int, token: int, status: str = "succeeded", outcome: str = "succeeded"
) -> Completion:
    return Completion(
        run_id, token, RunStatus(status), 0.0, Outcome(outcome), None, 0, None, "", "", 0.1, 1024
    )


async def test_retried_completion_counts_as_recorded(store: Store) -> None:
    run_id = await due_run(store, "once")
    [claimed] = await store.claim_runs(["echo"], 10, "w1", TTL)
    completion = _done(run_id, claimed.lease_token)
    assert await store.complete_runs([completion], "w1") == {run_id}
    # The same batch again, as after "connection closed in the middle of operation".
    assert await store.complete_runs([completion], "w1") == {run_id}
    # Anything that is not exactly what was recorded is still a late result.
    assert await store.complete_runs([_done(run_id, claimed.lease_token + 1)], "w1") == set()
    assert await store.complete_runs([completion], "w2") == set()
    failed = _done(run_id, claimed.lease_token, "failed", "failed")
    assert await store.complete_runs([failed], "w1") == set()
    row = await run_row(store, run_id)
    assert row is not None
    assert (row["status"], row["attempts"]) == ("succeeded", 1)


async def test_reaped_attempt_is_not_mistaken_for_our_completion(store: Store) -> None:
    run_id = await due_run(store, "reaped")
    [claimed] = await store.claim_runs(["echo"], 10, "w1", TTL)
    await age_lease(store, run_id, -60)
    assert [r.id for r in await store.reap_expired(10)] == [run_id]
    fenced = _done(run_id, claimed.lease_token, "failed", "lease_lost")
    assert await store.complete_runs([fenced], "w1") == set()


async def test_claim_after_a_lost_claim_gives_unstarted_runs_back(store: Store) -> None:
    lost_id = await due_run(store, "lost")
    kept_id = await due_run(store, "kept")
    claimed = await store.claim_runs(["echo"], 10, "w1", TTL)
    assert sorted(r.id for r in claimed) == sorted([lost_id, kept_id])
    other = await due_run(store, "other-host")
    await store.claim_runs(["echo"], 10, "w2", TTL)  # another host's lease stays untouched

    # w1 saw only `kept` start (the reply carrying `lost` never arrived, say).
    assert await store.claim_runs(["echo"], 10, "w1", TTL, held=[kept_id]) == []
    rows = await runs(store, await run_ids(store))
    assert (rows[kept_id]["status"], rows[kept_id]["lease_owner"]) == ("running", "w1")
    assert (rows[other]["status"], rows[other]["lease_owner"]) == ("running", "w2")
    # Given back unstarted: due again, and the attempt it was charged is refunded.
    assert (rows[lost_id]["status"], rows[lost_id]["attempts"]) == ("scheduled", 1)
    assert rows[lost_id]["max_attempts"] == rows[kept_id]["max_attempts"] + 1
    assert await outcome(store, lost_id, 1) == "interrupted"

    [again] = await store.claim_runs(["echo"], 10, "w1", TTL)
    assert (again.id, again.attempts) == (lost_id, 2)


async def test_lost_claim_recovery_leaves_expired_leases_to_the_reaper(store: Store) -> None:
    # The database was down for longer than the lease: the handler of `ran` really ran and
    # its late result was rejected, so the host no longer holds it. Giving it back as
    # "unstarted" would refund an attempt that executed; the reaper records lease_lost.
    ran = await due_run(store, "ran")
    [claimed] = await store.claim_runs(["echo"], 10, "w1", TTL)
    await age_lease(store, ran, -1)
    assert await store.claim_runs(["echo"], 10, "w1", TTL, held=[]) == []
    row = await run_row(store, ran)
    assert row is not None
    assert (row["status"], row["lease_owner"], row["attempts"]) == ("running", "w1", 1)
    [reaped] = await store.reap_expired(10)
    assert reaped.id == ran
    assert await outcome(store, ran, 1) == "lease_lost"
    assert claimed.max_attempts == row["max_attempts"]
