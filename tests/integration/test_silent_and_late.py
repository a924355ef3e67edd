"""The time-based events against a real PostgreSQL, moved through the data (timestamps
aged with UPDATE), never by waiting: job_silent (the dead-man's switch) once per episode,
and run_late at each job's own late_after_seconds."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from supervisor.core import channels
from supervisor.core.events import ChannelSpec, NotifyRule
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.runpath import Completion
from supervisor.core.store import Store
from supervisor.notifier import WebhookNotifier

from ..factory import due_run, set_job, set_run, sql_rows, sql_value
from ..notify_support import SECRET

HOUR = 3600.0


async def _channel(store: Store) -> None:
    spec = ChannelSpec(name="ops", url="http://127.0.0.1:9/hook", secret=SECRET)
    await channels.create_channel(store, spec)


def _notifier(store: Store, owner: str = "n1", late_after: float = 60.0) -> WebhookNotifier:
    n = channels.notifications(store)
    return WebhookNotifier(n, owner=owner, timeout=5.0, retry_window=HOUR, late_after=late_after)


async def _ago(store: Store, seconds: float) -> datetime:
    return await store.now() - timedelta(seconds=seconds)


async def _job_of(store: Store, run_id: int) -> int:
    return int(await sql_value(store, "SELECT job_id FROM runs WHERE id = $1", run_id))


async def _succeed(store: Store, run_id: int) -> None:
    claims = {c.id: c for c in await store.claim_runs(["echo"], 10, "w1", 30.0)}
    claim = claims[run_id]
    done = Completion(run_id, claim.lease_token, RunStatus.SUCCEEDED, 0.0, Outcome.SUCCEEDED)
    assert await store.complete_runs([done], "w1") == {run_id}


async def _outbox(store: Store) -> list[Any]:
    return await sql_rows(store, "SELECT event, job_id, run_id, data FROM outbox ORDER BY id")


async def test_job_silent_fires_once_until_the_next_success(store: Store) -> None:
    await _channel(store)
    watch = (NotifyRule("ops", ("job_silent",)),)
    run = await due_run(store, "nightly", expect_success_within_seconds=HOUR, notify=watch)
    job_id = await _job_of(store, run)
    # Others that must stay quiet: no setting; paused.
    plain = await _job_of(store, await due_run(store, "plain", notify=watch))
    held = await due_run(store, "held", expect_success_within_seconds=60, notify=watch)
    paused = await _job_of(store, held)
    await set_job(store, plain, updated_at=await _ago(store, 10 * HOUR))
    await set_job(store, paused, paused=True, updated_at=await _ago(store, 10 * HOUR))
    n1, n2 = _notifier(store), _notifier(store, "n2")
    assert await n1.check_silent() == 0  # just created: the clock starts at its last change
    await set_job(store, job_id, updated_at=await _ago(store, HOUR + 5))
    assert await n1.check_silent() == 1
    assert await n2.check_silent() == 0, "once, whichever notifier checks"
    [row] = await _outbox(store)
    assert (row["event"], row["job_id"], row["run_id"]) == ("job_silent", job_id, None)
    assert row["data"]["last_success"] is None and row["data"]["silent_seconds"] >= HOUR
    # A success ends the episode; once it is an hour old the job is silent again.
    await _succeed(store, run)
    assert await n1.check_silent() == 0
    await set_run(store, run, finished_at=await _ago(store, HOUR + 1))
    assert await n2.check_silent() == 1
    assert await n1.check_silent() == 0
    rows = await _outbox(store)
    assert [(r["event"], r["run_id"]) for r in rows] == [("job_silent", None), ("job_silent", run)]
    assert rows[1]["data"]["last_success"]["run_id"] == run


async def test_run_late_uses_each_jobs_late_after_seconds(store: Store) -> None:
    await _channel(store)
    watch = (NotifyRule("ops", ("run_late",)),)
    quick = await due_run(store, "quick", late_after_seconds=10, notify=watch)
    default = await due_run(store, "default", notify=watch)  # ready_max_lag: 60 s here
    patient = await due_run(store, "patient", late_after_seconds=300, notify=watch)
    n = _notifier(store, late_after=60.0)
    for run_id in (quick, default, patient):
        await set_run(store, run_id, run_after=await _ago(store, 30))
    assert await n.check_late() == 1
    for run_id in (quick, default, patient):
        await set_run(store, run_id, run_after=await _ago(store, 120))
    assert await n.check_late() == 1
    rows = await _outbox(store)
    assert [r["run_id"] for r in rows] == [quick, default]
    assert [r["data"]["run"]["late_after_seconds"] for r in rows] == [10, 60]
