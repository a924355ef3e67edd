"""Claiming ahead (config claim_ahead): runs due within the window are claimed early and
each child starts at its run's instant, never before it; a run claimed ahead that has not
started at shutdown goes back unstarted; the planner holds off around such starts."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from supervisor.claimer import Claimer
from supervisor.core import jobs, runs
from supervisor.core.records import Claim
from supervisor.core.store import Store
from supervisor.executor import HOLD_AFTER, HOLD_BEFORE
from supervisor.heartbeater import Heartbeater
from supervisor.inflight import Phase
from supervisor.planner import MAX_HOLD, Planner

from ..factory import LIMITS, attempts, due_run, make_jobs_due, run_row, sql, sql_value, status
from ..helpers import job, wait_for
from .test_lost_replies import TTL
from .test_services import RecordingSlots, _claimer, _running_executor


async def _due_in(store: Store, name: str, seconds: float) -> int:
    """A one-off run whose instant is `seconds` from now on the database clock."""
    run_id = await due_run(store, name)
    await sql(
        store,
        """UPDATE runs SET scheduled_at = now() + make_interval(secs => $2),
               run_after = now() + make_interval(secs => $2) WHERE id = $1""",
        run_id,
        seconds,
    )
    return run_id


async def test_a_claim_takes_runs_due_within_the_window_and_starts_them_at_their_instant(
    store: Store,
) -> None:
    soon, later = await _due_in(store, "soon", 0.6), await _due_in(store, "later", 5.0)
    assert await store.claim_runs(["echo"], 10, "w1", TTL) == []  # nothing due yet
    # With a 1 s window `soon` is claimable now, and the next wait is for `later`'s window.
    due_in = await store.next_due_in(["echo"], 1.0)
    assert due_in is not None and 3.5 < due_in <= 4.0
    plain = await store.next_due_in(["echo"])
    assert plain is not None and 0.1 < plain <= 0.6  # without a window `soon` is next
    [claim] = await store.claim_runs(["echo"], 10, "w1", TTL, ahead=1.0)
    assert claim.id == soon and 0.3 < claim.start_in <= 0.6
    row = await run_row(store, soon)
    assert row is not None and row["status"] == "running"
    # started_at is the run's instant, not the earlier claim.
    assert row["started_at"] == row["run_after"] == row["scheduled_at"]
    [attempt] = await attempts(store, soon)
    assert attempt["started_at"] == row["scheduled_at"]
    # The next one is claimable in about 5 - 1 seconds.
    due_in = await store.next_due_in(["echo"], 1.0)
    assert due_in is not None and 3.5 < due_in <= 4.0
    assert await status(store, later) == "scheduled"


async def test_the_claimer_wakes_a_window_before_the_next_instant(store: Store) -> None:
    await _due_in(store, "soon", 2.0)
    slots = RecordingSlots(free=4)
    claimer = _claimer(store, slots)
    claimer.ahead = 0.5
    first = await claimer.run_once()
    assert first.claimed == 0 and first.next_in is not None and 1.0 < first.next_in <= 1.5
    await wait_for(lambda: _claimed(claimer, slots), 5, "the claim a window ahead")
    [claim] = slots.started
    assert 0.0 < claim.start_in <= 0.5


async def _claimed(claimer: Claimer, slots: RecordingSlots) -> bool:
    await claimer.run_once()
    return bool(slots.started)


async def test_a_run_entering_the_window_just_after_an_empty_claim_is_claimed_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim comes up empty just before a run enters the window (a retry due 0.25 s
    after the completion whose NOTIFY woke the claimer): the claimer must claim again at
    once, not sleep its poll interval because the run is inside the window by then."""
    run_id = await _due_in(store, "edge", 1.0)
    slots = RecordingSlots(free=4)
    claimer = _claimer(store, slots)
    claimer.ahead = 0.5
    claim_runs = store.claim_runs

    async def claim_then_time_passes(*args: Any, **kw: Any) -> list[Claim]:
        got = await claim_runs(*args, **kw)
        await wait_for(lambda: _in_window(store, run_id, claimer.ahead), 5, "the window")
        return got

    monkeypatch.setattr(store, "claim_runs", claim_then_time_passes)
    first = await claimer.run_once()
    assert (first.claimed, first.next_in) == (0, 0.0)
    monkeypatch.undo()
    assert (await claimer.run_once()).claimed == 1
    assert [r.id for r in slots.started] == [run_id]


async def _in_window(store: Store, run_id: int, ahead: float) -> bool:
    return bool(
        await sql_value(
            store,
            "SELECT run_after <= now() + make_interval(secs => $2) FROM runs WHERE id = $1",
            run_id,
            ahead,
        )
    )


async def test_a_child_claimed_ahead_starts_at_its_instant_never_before(store: Store) -> None:
    # The child stamps its own clock: the observer does not trust the executor's timers.
    async with _running_executor(store, ("sh", "-c", "date +%s.%N")) as (executor, ended):
        run_id = await _due_in(store, "stamped", 0.8)
        [claim] = await store.claim_runs(["echo"], 1, "w1", TTL, ahead=2.0)
        executor.start(claim, time.monotonic())
        entry = executor.inflight[run_id]
        assert entry.child is None and await status(store, run_id) == "running"
        await wait_for(lambda: executor.in_flight() == 0, 10, "the attempt to end")
    [attempt] = await attempts(store, run_id)
    child_clock = float(attempt["stdout_tail"])
    instant: datetime = claim.scheduled_at
    assert instant.timestamp() <= child_clock < instant.timestamp() + 0.5
    assert [e.outcome for e in ended] == ["succeeded"]


async def test_shutdown_gives_back_a_run_claimed_ahead_unstarted(
    store: Store, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    async with _running_executor(store, ("sh", "-c", f"touch {marker}")) as (executor, ended):
        run_id = await _due_in(store, "waiting", 3.0)
        [claim] = await store.claim_runs(["echo"], 1, "w1", TTL, ahead=5.0)
        executor.start(claim, time.monotonic())
        assert await executor.release_waiting() == 1
        # Given back at once, not when its instant comes (its wait is cancelled).
        assert executor.in_flight() == 0
        assert await executor.release_waiting() == 0
    assert not marker.exists(), "the child never started"
    row = await run_row(store, run_id)
    assert row is not None
    # Back to scheduled with its attempt not spent (the budget grew by one), due at its
    # instant still: another host must not start it early.
    assert (row["status"], row["lease_owner"], row["max_attempts"]) == (
        "scheduled",
        None,
        claim.max_attempts + 1,
    )
    assert row["run_after"] == row["scheduled_at"]
    assert await sql_value(store, "SELECT now() < $1::timestamptz", row["run_after"])
    assert await store.claim_runs(["echo"], 1, "w2", TTL) == []
    [attempt] = await attempts(store, run_id)
    assert attempt["outcome"] == "interrupted"
    assert attempt["finished_at"] >= attempt["started_at"]
    assert [e.outcome for e in ended] == ["interrupted"]


async def test_the_planner_holds_off_near_a_start_and_never_stops(store: Store) -> None:
    async with _running_executor(store, ("true",)) as (executor, _):
        run_id = await _due_in(store, "near", 2.0)
        [claim] = await store.claim_runs(["echo"], 1, "w1", TTL, ahead=5.0)
        executor.start(claim, time.monotonic())
        # Asked at instants around the start (a slow machine cannot make it miss them):
        # nothing before HOLD_BEFORE, then until HOLD_AFTER past the start.
        start_at = executor.inflight[run_id].start_at
        assert start_at > time.monotonic()
        assert executor.hold_off(start_at - HOLD_BEFORE - 0.001) == 0.0
        assert executor.hold_off(start_at - 0.02) == pytest.approx(0.02 + HOLD_AFTER)
        assert executor.hold_off(start_at) == pytest.approx(HOLD_AFTER)
        assert executor.hold_off(start_at + HOLD_AFTER + 0.001) == 0.0
        await wait_for(lambda: executor.in_flight() == 0, 10, "the attempt to end")
        assert executor.hold_off() == 0.0
        assert await status(store, run_id) == "succeeded"
    # A host that always has a start near still plans: each step waits MAX_HOLD at most.
    for i in range(60):
        await jobs.create_job(store, job(f"cron-{i}", cron="*/5 * * * *"), LIMITS)
    await make_jobs_due(store)
    planner = Planner(store, LIMITS, batch=30, hold_off=lambda: 3600.0)
    began = time.monotonic()
    done = await asyncio.wait_for(planner.run_once(), 30)
    assert done.failed == 0 and done.runs == 60 * LIMITS.max_runs  # every */5 job, capped
    assert time.monotonic() - began < 60 * MAX_HOLD  # ~3 steps of 25 jobs, held each time


async def test_a_run_cancelled_inside_the_window_never_starts(store: Store, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    async with _running_executor(store, ("sh", "-c", f"touch {marker}")) as (executor, ended):
        run_id = await _due_in(store, "cancelled", 1.5)
        [claim] = await store.claim_runs(["echo"], 1, "w1", TTL, ahead=2.0)
        executor.start(claim, time.monotonic())
        await runs.cancel_run(store, run_id)  # as DELETE /v1/runs/{id} does
        renewals = Heartbeater(store, owner="w1", lease_ttl=TTL, holder=executor)
        assert (await renewals.run_once()).missing == 1  # the renewal finds it gone
        assert executor.inflight[run_id].phase is Phase.LOST
        await wait_for(lambda: executor.in_flight() == 0, 10, "the waiting run to end")
    assert not marker.exists(), "its child never started"
    row = await run_row(store, run_id)
    assert row is not None and row["status"] == "cancelled"
    assert row["finished_at"] >= row["started_at"]
    assert [e.outcome for e in ended] == ["rejected_late"]  # its not-run result was fenced off


async def test_the_wait_counts_from_the_claims_end_not_its_transactions_start(
    store: Store,
) -> None:
    # A claim pass of several statements is one transaction, and now() is its start: a
    # claim made 0.6 s into it must still start the run at its instant, not 0.6 s late.
    run_id = await _due_in(store, "late-claim", 1.0)
    async with store.transaction() as tx:
        began = await tx.now()
        await asyncio.sleep(0.6)  # the transaction grows old (not a synchronisation)
        [claim] = await tx.claim_runs(["echo"], 1, "w1", TTL, ahead=2.0)
    assert claim.id == run_id
    left_at_begin = (claim.scheduled_at - began).total_seconds()
    assert 0.2 < claim.start_in < left_at_begin - 0.5, (claim.start_in, left_at_begin)
