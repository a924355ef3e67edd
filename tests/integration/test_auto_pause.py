"""Auto-pause (pause_after_failures) and the per-job N of job_failing, against a real
PostgreSQL: the pause is written by the completion that reaches N, with its event; endings
that are ours (lost lease, shutdown, cancel) neither count nor reset; resume and success
reset; a paused job's manual trigger still runs."""

from __future__ import annotations

from typing import Any

from supervisor.core import channels, jobs
from supervisor.core.events import ChannelSpec, NotifyRule
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.runpath import Completion
from supervisor.core.store import Store

from ..api_support import api_client
from ..factory import LIMITS, age_lease, count, due_run, sql_rows, sql_value
from ..notify_support import SECRET

TTL = 30.0


async def _channel(store: Store) -> None:
    spec = ChannelSpec(name="ops", url="http://127.0.0.1:9/hook", secret=SECRET)
    await channels.create_channel(store, spec)


async def _job_of(store: Store, run_id: int) -> int:
    return int(await sql_value(store, "SELECT job_id FROM runs WHERE id = $1", run_id))


async def _end(
    store: Store,
    run_id: int,
    outcome: Outcome = Outcome.FAILED,
    status: RunStatus = RunStatus.DEAD,
    **kw: Any,
) -> None:
    """Claim `run_id` (due now) and complete it so."""
    claims = {c.id: c for c in await store.claim_runs(["echo"], 10, "w1", TTL)}
    assert run_id in claims, "the run was claimable"
    kw.setdefault("exit_code", None if outcome is not Outcome.FAILED else 3)
    done = Completion(run_id, claims[run_id].lease_token, status, 0.0, outcome, "x", **kw)
    assert await store.complete_runs([done], "w1") == {run_id}


async def _dead_run(store: Store, job_id: int, **kw: Any) -> int:
    """A manual run of the job, ended dead by the handler (exit 3 unless `kw` says)."""
    run_id, _ = await jobs.trigger_job(store, job_id, None, None)
    await _end(store, run_id, **kw)
    return run_id


async def _job(store: Store, job_id: int) -> tuple[bool, str | None]:
    job = await store.get_job(job_id)
    assert job is not None
    return job.spec.paused, job.pause_reason


async def _events(store: Store, job_id: int) -> list[str]:
    rows = await sql_rows(store, "SELECT event FROM outbox WHERE job_id = $1 ORDER BY id", job_id)
    return [r["event"] for r in rows]


async def test_n_dead_runs_pause_the_job_with_its_event_in_the_same_completion(
    store: Store,
) -> None:
    await _channel(store)
    first = await due_run(
        store,
        "flaky",
        max_attempts=1,
        pause_after_failures=3,
        notify=(NotifyRule("ops", ("job_auto_paused",)),),
    )
    job_id = await _job_of(store, first)
    await _end(store, first)
    await _dead_run(store, job_id, exit_code=None, signal=9)
    assert await _job(store, job_id) == (False, None)
    assert await _events(store, job_id) == []
    last = await _dead_run(store, job_id, outcome=Outcome.TIMED_OUT, exit_code=None)
    reason = f"auto-paused after 3 consecutive failures (last: run {last}, timeout)"
    assert await _job(store, job_id) == (True, reason)
    [row] = await sql_rows(store, "SELECT event, run_id, data FROM outbox")
    assert (row["event"], row["run_id"]) == ("job_auto_paused", last)
    assert row["data"]["reason"] == reason and row["data"]["job"]["name"] == "flaky"
    assert (row["data"]["streak"], row["data"]["pause_after_failures"]) == (3, 3)
    # Planned runs now wait; a manual trigger still runs once, and the job stays paused.
    # A fourth dead run raises no second job_auto_paused.
    again = await _dead_run(store, job_id)
    assert await _job(store, job_id) == (True, reason)
    assert await _events(store, job_id) == ["job_auto_paused"]
    ok, _ = await jobs.trigger_job(store, job_id, None, None)
    await _end(store, ok, Outcome.SUCCEEDED, RunStatus.SUCCEEDED, exit_code=0)
    assert await _job(store, job_id) == (True, reason)
    assert again != ok


async def test_a_paused_jobs_planned_run_waits_but_a_trigger_runs(
    store: Store,
) -> None:
    planned = await due_run(store, "held", paused=False)
    job_id = await _job_of(store, planned)
    await jobs.set_paused(store, job_id, True, LIMITS, "maintenance")
    assert await store.claim_runs(["echo"], 10, "w1", TTL) == []
    manual, _ = await jobs.trigger_job(store, job_id, None, None)
    assert [c.id for c in await store.claim_runs(["echo"], 10, "w1", TTL)] == [manual]
    assert await _job(store, job_id) == (True, "maintenance")


async def test_lost_leases_interruptions_and_cancels_neither_count_nor_reset(
    store: Store,
) -> None:
    first = await due_run(store, "j", max_attempts=1, pause_after_failures=3)
    job_id = await _job_of(store, first)
    await _end(store, first)
    await _dead_run(store, job_id)  # streak 2
    # A lease lost to the reaper, dead for want of attempts: ours, not the handler's.
    reaped, _ = await jobs.trigger_job(store, job_id, None, None)
    assert [c.id for c in await store.claim_runs(["echo"], 10, "w1", TTL)] == [reaped]
    await age_lease(store, reaped, -60)
    [gone] = await store.reap_expired(10)
    assert (gone.id, gone.status) == (reaped, "dead")
    # Interrupted at shutdown: released, not ended.
    released, _ = await jobs.trigger_job(store, job_id, None, None)
    [claim] = await store.claim_runs(["echo"], 10, "w1", TTL)
    assert await store.release_runs([(released, claim.lease_token)], "w1") == {released}
    await _end(store, released, Outcome.INTERRUPTED, exit_code=None)
    # Completions whose ending was ours (a keeper's kill, a cancel), dead all the same.
    await _dead_run(store, job_id, outcome=Outcome.LEASE_LOST, exit_code=None, signal=9)
    await _dead_run(store, job_id, outcome=Outcome.CANCELLED, exit_code=None)
    assert await _job(store, job_id) == (False, None)
    last = await _dead_run(store, job_id)  # the third of the handler's own: 2 + 1
    paused, reason = await _job(store, job_id)
    assert (
        paused and reason == f"auto-paused after 3 consecutive failures (last: run {last}, exit 3)"
    )


async def test_resume_and_success_reset_the_streak(store: Store) -> None:
    first = await due_run(store, "j", max_attempts=1, pause_after_failures=2)
    job_id = await _job_of(store, first)
    await _end(store, first)
    ok, _ = await jobs.trigger_job(store, job_id, None, None)
    await _end(store, ok, Outcome.SUCCEEDED, RunStatus.SUCCEEDED, exit_code=0)
    await _dead_run(store, job_id)  # 1 again, after the success
    assert await _job(store, job_id) == (False, None)
    await _dead_run(store, job_id)
    assert (await _job(store, job_id))[0] is True
    async with api_client(store) as api:  # resume through the API (the CLI's path too)
        resp = await api.post(f"/v1/jobs/{job_id}/resume")
        assert resp.status == 200
        view = await resp.json()
        assert (view["paused"], view["pause_reason"]) == (False, None)
        assert view["pause_after_failures"] == 2
    await _dead_run(store, job_id)
    assert await _job(store, job_id) == (False, None), "resume started the count again"
    await _dead_run(store, job_id)
    assert (await _job(store, job_id))[0] is True
    await jobs.set_paused(store, job_id, False, LIMITS)  # the dashboard's and CLI's store path
    assert await sql_value(store, "SELECT pause_streak FROM job_streaks") == 0


async def test_jobs_without_the_setting_or_watchers_keep_no_streak(store: Store) -> None:
    """The successes' statement then probes an empty job_streaks index, as before."""
    first = await due_run(store, "plain", max_attempts=1)
    job_id = await _job_of(store, first)
    await _end(store, first)
    for _ in range(3):
        await _dead_run(store, job_id)
    assert await _job(store, job_id) == (False, None)
    assert await count(store, "job_streaks") == 0
    assert await count(store, "outbox") == 0


async def test_job_failing_after_n_fires_once_per_streak(store: Store) -> None:
    await _channel(store)
    watch = (NotifyRule("ops", ("job_failing", "job_recovered")),)
    first = await due_run(store, "j", max_attempts=1, job_failing_after=3, notify=watch)
    job_id = await _job_of(store, first)
    await _end(store, first)
    await _dead_run(store, job_id)
    ok, _ = await jobs.trigger_job(store, job_id, None, None)
    await _end(store, ok, Outcome.SUCCEEDED, RunStatus.SUCCEEDED, exit_code=0)
    assert await _events(store, job_id) == [], "a streak of 2 < 3: no failing, no recovered"
    runs = [await _dead_run(store, job_id) for _ in range(5)]
    ok, _ = await jobs.trigger_job(store, job_id, None, None)
    await _end(store, ok, Outcome.SUCCEEDED, RunStatus.SUCCEEDED, exit_code=0)
    rows = await sql_rows(store, "SELECT event, run_id, data FROM outbox ORDER BY id")
    assert [(r["event"], r["run_id"]) for r in rows] == [
        ("job_failing", runs[2]),
        ("job_recovered", ok),
    ]
    assert rows[0]["data"]["streak"] == 3 and rows[1]["data"]["streak"] == 5
