"""The daemon's services built and driven through run_once against a real PostgreSQL.

Time moves through data: a lease is aged in its row (`lease_expires_at = now() - ...`)
instead of waiting it out. The executor runs real (tiny) child processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Collection
from typing import Any

import asyncpg
import psutil
import pytest

from supervisor import claimpace
from supervisor.claimer import Claimer, ClaimPass
from supervisor.compose import build_executor
from supervisor.core.records import CatchUp, Claim
from supervisor.core.store import Store
from supervisor.executor import Executor
from supervisor.faces import AttemptEnded
from supervisor.heartbeater import Heartbeater
from supervisor.inflight import Phase
from supervisor.livetail import LiveTail
from supervisor.registry import Handler, Registry

from ..factory import (
    age_lease,
    attempts,
    due_run,
    outcome,
    run_ids,
    seconds_until,
    set_run,
    sql,
    status,
    statuses,
)
from ..helpers import wait_for
from .test_lost_replies import TTL
from .test_overlap import _job_with_due_runs


class RecordingSlots:
    """The claimer's view of an executor, recording what it is asked to start."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.started: list[Claim] = []

    @property
    def free_slots(self) -> int:
        return self.free - len(self.started)

    def room(self) -> dict[str, int]:
        return {}

    def start(self, row: Claim, claimed_at: float) -> None:
        self.started.append(row)

    def held(self) -> Collection[int]:
        return [r.id for r in self.started]


def _claimer(store: Store, slots: RecordingSlots) -> Claimer:
    return Claimer(
        store,
        owner="w1",
        types=["echo"],
        slots=slots,
        lease_ttl=TTL,
        misfire_grace=3600,
        poll_interval=5,
    )


async def test_claimer_claims_up_to_its_free_slots(store: Store) -> None:
    ids = [await due_run(store, f"j{i}") for i in range(3)]
    slots = RecordingSlots(free=2)
    claimer = _claimer(store, slots)
    # Every slot filled: it waits for a finishing run to wake it (or the fallback poll).
    first = await claimer.run_once()
    assert (first.next_in, first.claimed) == (claimer.interval, 2)
    assert len(slots.started) == 2 and {r.id for r in slots.started} < set(ids)
    assert all(r.attempts == 1 and r.lease_token >= 1 for r in slots.started)
    assert await claimer.run_once() == ClaimPass(claimer.interval)  # no slot: nothing claimed
    assert len(slots.started) == 2
    slots.free = 3
    await claimer.run_once()
    assert sorted(r.id for r in slots.started) == sorted(ids)


async def test_claimer_runs_the_catchup_pass_once_a_second_and_for_waiting_overlaps(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between its once-a-second passes over old runs, a drain of jobs that never overlap
    spends no statement on the catch-up pass; a due run of an overlap 'skip' job that
    waits for a running one is recorded skipped by the claim that finds it waiting."""
    monkeypatch.setattr(claimpace, "CATCHUP_OLD_EVERY", 3600.0)  # one old pass here
    passes = 0
    judge = store.skip_missed_runs

    async def counted(*args: Any, **kwargs: Any) -> CatchUp:
        nonlocal passes
        passes += 1
        return await judge(*args, **kwargs)

    monkeypatch.setattr(store, "skip_missed_runs", counted)
    for i in range(4):
        await due_run(store, f"p{i}")
    slots = RecordingSlots(free=2)
    claimer = _claimer(store, slots)
    assert (await claimer.run_once()).claimed == 2
    slots.free = 4
    assert (await claimer.run_once()).claimed == 2
    assert passes == 1  # the first claim's pass over old runs, and no other
    # Two runs of an overlap 'skip' job due: the first starts; the claim after it finds
    # the second waiting and has it judged.
    job_id = await _job_with_due_runs(store, "skip", 2)
    slots.free = 10
    assert (await claimer.run_once()).claimed == 1
    assert passes == 1  # its snapshot had no run of the job running yet
    after = await claimer.run_once()
    assert (after.claimed, after.skipped, passes) == (0, 1, 2)
    assert await statuses(store, await run_ids(store, job_id)) == {"running": 1, "skipped": 1}


async def test_claimer_a_failed_overlap_pass_is_counted_and_the_next_claim_judges_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overlap pass after a claim fails on the database: the claim's runs are started
    all the same, the error counts as the claimer's (punchclock_db_errors), and the next
    claim's pass records the skip."""
    monkeypatch.setattr(claimpace, "CATCHUP_OLD_EVERY", 3600.0)
    slots = RecordingSlots(free=10)
    claimer = _claimer(store, slots)
    assert (await claimer.run_once()).claimed == 0  # the old pass, with nothing due
    job_id = await _job_with_due_runs(store, "skip", 2)
    assert (await claimer.run_once()).claimed == 1
    judge = store.skip_missed_runs

    async def canceled(*args: Any, **kwargs: Any) -> CatchUp:
        raise asyncpg.QueryCanceledError("canceling statement due to statement timeout")

    monkeypatch.setattr(store, "skip_missed_runs", canceled)
    failed = await claimer.run_once()
    assert (failed.claimed, failed.skipped, claimer.errors) == (0, 0, 1)
    monkeypatch.setattr(store, "skip_missed_runs", judge)
    assert (await claimer.run_once()).skipped == 1
    assert await statuses(store, await run_ids(store, job_id)) == {"running": 1, "skipped": 1}


async def test_claimer_after_an_uncertain_claim_gives_back_what_it_does_not_hold(
    store: Store,
) -> None:
    held, lost = await due_run(store, "held"), await due_run(store, "lost")
    slots = RecordingSlots(free=2)
    claimer = _claimer(store, slots)
    await claimer.run_once()
    slots.started = [r for r in slots.started if r.id == held]  # `lost`'s reply never came
    claimer.uncertain = True
    assert await claimer.run_once() == ClaimPass(0.0, recovered=True)  # claim again at once
    assert (await claimer.run_once()).claimed == 1
    # Given back unstarted, then claimed again under a new lease.
    [again] = [r for r in slots.started if r.id == lost]
    assert again.attempts == 2
    assert await outcome(store, lost, 1) == "interrupted"
    assert not claimer.uncertain


class PoisonSlots(RecordingSlots):
    """An executor that cannot start one particular run."""

    def __init__(self, free: int, poison: int) -> None:
        super().__init__(free)
        self.poison = poison

    def start(self, row: Claim, claimed_at: float) -> None:
        if row.id == self.poison:
            raise RuntimeError("cannot start this one")
        super().start(row, claimed_at)


async def test_claimer_a_run_that_cannot_start_does_not_stop_the_others(store: Store) -> None:
    ids = [await due_run(store, f"j{i}") for i in range(3)]
    slots = PoisonSlots(free=3, poison=ids[1])
    claimer = _claimer(store, slots)
    done = await claimer.run_once()  # does not raise
    assert (done.claimed, done.unstarted, claimer.unstarted) == (3, 1, 1)
    assert sorted(r.id for r in slots.started) == [ids[0], ids[2]]
    # Its lease lapses and the reaper takes it back, spending the attempt: a run that never
    # starts anywhere ends dead instead of circling.
    await age_lease(store, ids[1], -1)
    [reaped] = await store.reap_expired(10)
    assert (reaped.id, reaped.status, reaped.attempts) == (ids[1], "scheduled", 1)


class RecordingLeases:
    def __init__(self, leases: list[tuple[int, int]]) -> None:
        self._leases = leases
        self.answers: list[set[int]] = []

    def leases(self) -> list[tuple[int, int]]:
        return self._leases

    def renewed(self, leases: list[tuple[int, int]], ok: set[int], sent_at: float) -> None:
        self.answers.append(ok)

    def in_flight(self) -> int:
        return len(self._leases)


async def test_heartbeater_renews_its_leases_and_reports_the_missing(store: Store) -> None:
    kept, taken = await due_run(store, "kept"), await due_run(store, "taken")
    rows = {r.id: r for r in await store.claim_runs(["echo"], 10, "w1", TTL)}
    for run_id in (kept, taken):
        await age_lease(store, run_id, 1)
    # Someone else's now (cancelled and re-claimed, say): the token no longer matches.
    await set_run(store, taken, lease_token=rows[taken].lease_token + 1)
    holder = RecordingLeases([(i, rows[i].lease_token) for i in (kept, taken)])
    renewed: list[int] = []
    hb = Heartbeater(store, owner="w1", lease_ttl=TTL, holder=holder, on_renewed=renewed.append)
    done = await hb.run_once()
    assert (done.renewed, done.missing) == (1, 1)
    assert holder.answers == [{kept}] and renewed == [1]
    left = await seconds_until(store, "runs", "lease_expires_at", kept)
    assert TTL - 5 < left <= TTL
    # The next round is due an interval after this one was sent, not after it returned.
    assert done.next_in is not None and done.next_in <= hb.interval * (1 + hb.jitter)


def _executor(store: Store, argv: tuple[str, ...], ended: list[AttemptEnded]) -> Executor:
    registry = Registry()
    registry.add(Handler("echo", argv, source="test"))
    return build_executor(
        store,
        registry,
        owner="w1",
        concurrency=2,
        lease_ttl=TTL,
        kill_grace=0.5,
        output_limit=4096,
        on_ended=ended.append,
    )


async def _start_one(store: Store, executor: Executor, name: str) -> int:
    run_id = await due_run(store, name)
    [row] = await store.claim_runs(["echo"], 1, "w1", TTL)
    executor.start(row, time.monotonic())
    return run_id


@contextlib.asynccontextmanager
async def _running_executor(
    store: Store, argv: tuple[str, ...]
) -> AsyncIterator[tuple[Executor, list[AttemptEnded]]]:
    """An executor for handler `argv` with its completer running; what ended is listed."""
    ended: list[AttemptEnded] = []
    executor = _executor(store, argv, ended)
    service = asyncio.create_task(executor.completer.run())
    try:
        yield executor, ended
    finally:
        executor.completer.stop()
        await asyncio.wait_for(service, 10)


async def test_executor_records_a_childs_result(store: Store) -> None:
    async with _running_executor(store, ("sh", "-c", "cat; exit 3")) as (executor, ended):
        run_id = await _start_one(store, executor, "fails")
        await wait_for(lambda: executor.in_flight() == 0, 10, "the attempt to end")
    assert ended == [AttemptEnded("fails", "echo", "failed", ended[0].duration)]
    assert await status(store, run_id) == "failed"  # a retry is scheduled
    tail = (await attempts(store, run_id))[0]["stdout_tail"]
    assert tail == "{}"  # the payload arrived on stdin


async def test_executor_kills_a_child_whose_lease_a_renewal_did_not_find(store: Store) -> None:
    async with _running_executor(store, ("sleep", "60")) as (executor, ended):
        run_id = await _start_one(store, executor, "sleeps")
        entry = executor.inflight[run_id]
        await wait_for(lambda: entry.child is not None and entry.child.pid, 10, "the child")
        executor.renewed(executor.leases(), set(), time.monotonic())  # the run is not ours
        assert entry.phase is Phase.LOST
        await wait_for(lambda: executor.in_flight() == 0, 10, "the child to be killed")
    # Still our lease in the database (nothing else took it): recorded as lease_lost.
    [attempt] = await attempts(store, run_id)
    assert (attempt["outcome"], attempt["signal"]) == ("lease_lost", 9)
    assert [e.outcome for e in ended] == ["lease_lost"]


async def test_executor_ends_an_execution_whose_claim_the_database_lost(store: Store) -> None:
    # A failover on asynchronous replication can lose a claim: the new primary hands the
    # same run out again, here to the same host. The old execution must end before the new
    # one starts, and send no result of its own.
    async with _running_executor(store, ("sleep", "60")) as (executor, ended):
        run_id = await _start_one(store, executor, "lost-claim")
        old = executor.inflight[run_id]
        await wait_for(lambda: old.child is not None and old.child.pid, 10, "the first child")
        assert old.child is not None and old.child.pid is not None
        old_pid = old.child.pid
        # As if the claim had never reached the new primary (a one-off: the test's point).
        await sql(store, "DELETE FROM run_attempts WHERE run_id = $1", run_id)
        await set_run(
            store,
            run_id,
            status="scheduled",
            attempts=0,
            lease_owner=None,
            lease_expires_at=None,
            lease_token=old.lease_token - 1,
        )
        [again] = await store.claim_runs(["echo"], 1, "w1", TTL)
        assert again.lease_token == old.lease_token  # the same token, issued twice
        executor.start(again, time.monotonic())
        new = executor.inflight[run_id]
        await wait_for(lambda: new.child is not None and new.child.pid, 10, "the second child")
        assert old.phase is Phase.SUPERSEDED
        assert not _alive(old_pid), "the first execution ended before the second started"
        executor.renewed(executor.leases(), set(), time.monotonic())  # end the second one
        await wait_for(lambda: executor.in_flight() == 0, 10, "both to end")
    # One attempt, one result: the superseded execution sent none.
    assert [e.outcome for e in ended] == ["lease_lost"]
    rows = await attempts(store, run_id)
    assert [(r["attempt"], r["outcome"]) for r in rows] == [(1, "lease_lost")]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _stdout_tail(store: Store, run_id: int) -> str | None:
    rows = await attempts(store, run_id)
    return rows[-1]["stdout_tail"] if rows else None


async def test_live_tail_shows_a_long_childs_output_and_leaves_short_ones_alone(
    store: Store,
) -> None:
    # The child prints, waits on a file, prints again, then waits to be told to exit.
    script = (
        "echo first; while [ ! -e $0.go ]; do sleep 0.05; done; echo second;"
        " while :; do sleep 0.05; done"
    )
    flag = f"/tmp/pc-live-{time.time_ns()}"
    async with _running_executor(store, ("sh", "-c", script, flag)) as (executor, _):
        live = LiveTail(store, executor, every=0.2)
        run_id = await _start_one(store, executor, "long")
        token = executor.inflight[run_id].lease_token
        # Younger than `every`: not written even though it has printed.
        assert (await live.run_once()).written == 0
        await wait_for(lambda: executor.live_output(0.2), 10, "the child to be old enough")
        await wait_for(lambda: _written(live), 10, "a write")
        assert await _stdout_tail(store, run_id) == "first\n"
        assert (await live.run_once()).written == 0, "nothing new: nothing written"
        open(flag + ".go", "w").close()
        await wait_for(
            lambda: _tail_is(store, live, run_id, "first\nsecond\n"), 10, "the second line"
        )
        # Fenced: a write under another lease token changes nothing.
        await store.write_live_tails([(run_id, 1, token + 1, "forged", "")])
        assert await _stdout_tail(store, run_id) == "first\nsecond\n"
        executor.renewed(executor.leases(), set(), time.monotonic())  # lease lost: killed
        await wait_for(lambda: executor.in_flight() == 0, 10, "the attempt to end")
    os.unlink(flag + ".go")
    # An ended attempt keeps its completion's tails: a late live write does not land.
    await store.write_live_tails([(run_id, 1, token, "late", "")])
    assert await _stdout_tail(store, run_id) != "late"


async def _written(live: LiveTail) -> bool:
    return (await live.run_once()).written == 1


async def _tail_is(store: Store, live: LiveTail, run_id: int, text: str) -> bool:
    await live.run_once()
    return await _stdout_tail(store, run_id) == text
