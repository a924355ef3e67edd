"""Claims and completions whose reply was lost (connection killed around COMMIT).

The transaction committed but the host never saw the result. A retried completion must be
recognised as recorded, not reported late; runs claimed by a lost claim must go back
without being charged an attempt. (The e2e storm test hits both at random; these pin them.)
"""

from __future__ import annotations

from datetime import timedelta

from supervisor.core import jobs
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Completion, Store

from ..helpers import job

TTL = 30.0


async def _due_run(store: Store, name: str) -> int:
    now = await store.now()
    row = await jobs.create_job(
        store, job(name, cron=None, run_at=now - timedelta(seconds=1)), PlanLimits()
    )
    run_id = await store._ex.fetchval("SELECT id FROM runs WHERE job_id = $1", row.id)
    return int(run_id)


def _done(
    run_id: int, token: int, status: str = "succeeded", outcome: str = "succeeded"
) -> Completion:
    return Completion(run_id, token, status, 0.0, outcome, None, 0, None, "", "", 0.1, 1024)


async def test_retried_completion_counts_as_recorded(store: Store) -> None:
    run_id = await _due_run(store, "once")
    [claimed] = await store.claim_runs(["echo"], 10, "w1", TTL)
    completion = _done(run_id, claimed["lease_token"])
    assert [r["id"] for r in await store.complete_runs([completion], "w1")] == [run_id]
    # The same batch again, as after "connection closed in the middle of operation".
    assert [r["id"] for r in await store.complete_runs([completion], "w1")] == [run_id]
    # Anything that is not exactly what was recorded is still a late result.
    assert await store.complete_runs([_done(run_id, claimed["lease_token"] + 1)], "w1") == []
    assert await store.complete_runs([completion], "w2") == []
    failed = _done(run_id, claimed["lease_token"], "failed", "failed")
    assert await store.complete_runs([failed], "w1") == []
    row = await store._ex.fetchrow("SELECT status::text, attempts FROM runs WHERE id = $1", run_id)
    assert (row["status"], row["attempts"]) == ("succeeded", 1)


async def test_reaped_attempt_is_not_mistaken_for_our_completion(store: Store) -> None:
    run_id = await _due_run(store, "reaped")
    [claimed] = await store.claim_runs(["echo"], 10, "w1", TTL)
    await store._ex.execute(
        "UPDATE runs SET lease_expires_at = now() - interval '1 minute' WHERE id = $1", run_id
    )
    assert [r["id"] for r in await store.reap_expired(10)] == [run_id]
    fenced = _done(run_id, claimed["lease_token"], "failed", "lease_lost")
    assert await store.complete_runs([fenced], "w1") == []


async def test_claim_after_a_lost_claim_gives_unstarted_runs_back(store: Store) -> None:
    lost_id = await _due_run(store, "lost")
    kept_id = await _due_run(store, "kept")
    claimed = await store.claim_runs(["echo"], 10, "w1", TTL)
    assert sorted(r["id"] for r in claimed) == sorted([lost_id, kept_id])
    other = await _due_run(store, "other-host")
    await store.claim_runs(["echo"], 10, "w2", TTL)  # another host's lease stays untouched

    # w1 saw only `kept` start (the reply carrying `lost` never arrived, say).
    assert await store.claim_runs(["echo"], 10, "w1", TTL, held=[kept_id]) == []
    rows = {
        r["id"]: r
        for r in await store._ex.fetch(
            "SELECT id, status::text, attempts, max_attempts, lease_owner FROM runs"
        )
    }
    assert (rows[kept_id]["status"], rows[kept_id]["lease_owner"]) == ("running", "w1")
    assert (rows[other]["status"], rows[other]["lease_owner"]) == ("running", "w2")
    # Given back unstarted: due again, and the attempt it was charged is refunded.
    assert (rows[lost_id]["status"], rows[lost_id]["attempts"]) == ("scheduled", 1)
    assert rows[lost_id]["max_attempts"] == rows[kept_id]["max_attempts"] + 1
    outcome = await store._ex.fetchval(
        "SELECT outcome::text FROM run_attempts WHERE run_id = $1 AND attempt = 1", lost_id
    )
    assert outcome == "interrupted"

    [again] = await store.claim_runs(["echo"], 10, "w1", TTL)
    assert (again["id"], again["attempts"]) == (lost_id, 2)


async def test_lost_claim_recovery_leaves_expired_leases_to_the_reaper(store: Store) -> None:
    # The database was down for longer than the lease: the handler of `ran` really ran and
    # its late result was rejected, so the host no longer holds it. Giving it back as
    # "unstarted" would refund an attempt that executed; the reaper records lease_lost.
    ran = await _due_run(store, "ran")
    [claimed] = await store.claim_runs(["echo"], 10, "w1", TTL)
    await store._ex.execute(
        "UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", ran
    )
    assert await store.claim_runs(["echo"], 10, "w1", TTL, held=[]) == []
    row = await store._ex.fetchrow(
        "SELECT status::text, attempts, max_attempts, lease_owner FROM runs WHERE id = $1", ran
    )
    assert (row["status"], row["lease_owner"], row["attempts"]) == ("running", "w1", 1)
    [reaped] = await store.reap_expired(10)
    assert reaped["id"] == ran
    outcome = await store._ex.fetchval(
        "SELECT outcome::text FROM run_attempts WHERE run_id = $1 AND attempt = 1", ran
    )
    assert outcome == "lease_lost"
    assert claimed["max_attempts"] == row["max_attempts"]
