"""Results that ride on a claim (claim_and_complete_runs): a busy host's finished runs are
recorded by its next claim's statement, fenced exactly as a completion of their own, and a
claim that fails sends them on their own: none lost, none recorded twice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from supervisor.claimer import Claimer
from supervisor.completer import COALESCE, Completer
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.records import Claim
from supervisor.core.runpath import Completion
from supervisor.core.store import Store

from ..factory import all_attempts, due_run, sql, statuses
from .test_services import RecordingSlots

TTL = 30.0


def _success(c: Claim, **kw: str) -> Completion:
    return Completion(c.id, c.lease_token, RunStatus.SUCCEEDED, 0.0, Outcome.SUCCEEDED, **kw)


def _failure(c: Claim) -> Completion:
    return Completion(c.id, c.lease_token, RunStatus.FAILED, 5.0, Outcome.FAILED, "exit 1", 1)


class Told:
    def __init__(self) -> None:
        self.said: dict[int, bool | None] = {}

    def __call__(self, run_id: int) -> Callable[[bool | None], None]:
        def told(recorded: bool | None) -> None:
            self.said[run_id] = recorded

        return told


def _claimer(store: Store, slots: RecordingSlots, completer: Completer) -> Claimer:
    return Claimer(
        store, owner="w1", types=["echo"], slots=slots, lease_ttl=TTL, misfire_grace=3600,
        poll_interval=5, riders=completer,
    )  # fmt: skip


async def _running(store: Store, n: int, waiting: int = 0) -> list[Claim]:
    """`n` runs claimed by w1 (running), and `waiting` more due behind them."""
    for i in range(n + waiting):
        await due_run(store, f"r{i}")
    return await store.claim_runs(["echo"], n, "w1", TTL)


async def test_a_claim_records_the_plain_successes_that_ride_on_it(store: Store) -> None:
    ok, failed, wakes = await _running(store, 3, waiting=2)
    completer = Completer(store, owner="w1", lease_ttl=TTL)
    told = Told()
    completer.enqueue(_success(ok, stdout_tail="fine"), False, told(ok.id))
    completer.enqueue(_failure(failed), False, told(failed.id))
    completer.enqueue(_success(wakes), True, told(wakes.id))
    slots = RecordingSlots(free=5)

    done = await _claimer(store, slots, completer).run_once()

    assert done.claimed == 2 and done.rode == 1 and completer.ridden == 1
    assert told.said == {ok.id: True}  # the others wait for the completer, with their NOTIFY
    by_id = {r["run_id"]: r for r in await all_attempts(store)}
    assert (by_id[ok.id]["outcome"], by_id[ok.id]["stdout_tail"]) == ("succeeded", "fine")
    assert await statuses(store, [ok.id, failed.id, wakes.id]) == {
        "succeeded": 1,
        "running": 2,
    }
    completer.stop()  # records what is left, then returns
    async with asyncio.timeout(10):
        await completer.run()
    assert told.said == {ok.id: True, failed.id: True, wakes.id: True}
    assert await statuses(store, [ok.id, failed.id, wakes.id]) == {"succeeded": 2, "failed": 1}


async def test_a_rider_whose_lease_is_gone_is_late_and_changes_nothing(store: Store) -> None:
    (gone,) = await _running(store, 1, waiting=1)
    await sql(store, "UPDATE runs SET lease_expires_at = now() - interval '1 s' WHERE id = $1",
              gone.id)  # fmt: skip
    completer = Completer(store, owner="w1", lease_ttl=TTL)
    told = Told()
    completer.enqueue(_success(gone), False, told(gone.id))

    done = await _claimer(store, RecordingSlots(free=1), completer).run_once()

    assert (done.claimed, done.rode, told.said) == (1, 0, {gone.id: False})
    assert await statuses(store, [gone.id]) == {"running": 1}  # the reaper's to end
    attempt = next(a for a in await all_attempts(store) if a["run_id"] == gone.id)
    assert attempt["outcome"] == "running"


async def test_a_claim_that_fails_sends_its_riders_on_their_own(store: Store) -> None:
    good, bad = await _running(store, 2, waiting=1)
    completer = Completer(store, owner="w1", lease_ttl=TTL)
    told = Told()
    completer.enqueue(_success(good, stdout_tail="ok"), False, told(good.id))
    # PostgreSQL text cannot hold NUL: the whole statement is refused, the claim with it.
    completer.enqueue(_success(bad, stdout_tail="a\x00b"), False, told(bad.id))
    slots = RecordingSlots(free=1)
    claimer = _claimer(store, slots, completer)

    with pytest.raises(Exception, match="0x00"):
        await claimer.run_once()

    assert told.said == {} and not slots.started  # nothing was written, nothing is lost
    assert await statuses(store, [good.id, bad.id]) == {"running": 2}
    again = await claimer.run_once()  # the claim alone now: they ride no more
    assert (again.claimed, again.rode) == (1, 0)
    completer.stop()
    async with asyncio.timeout(10):
        await completer.run()  # one by one: the refused tail is dropped, the run recorded
    assert told.said == {good.id: True, bad.id: True} and completer.refused == 1
    assert await statuses(store, [good.id, bad.id]) == {"succeeded": 2}


async def test_the_statement_records_without_a_claim_and_again_when_retried(
    store: Store,
) -> None:
    (c,) = await _running(store, 1)
    claimed, recorded = await store.claim_and_complete_runs([_success(c)], ["echo"], 4, "w1", TTL)
    assert (claimed, recorded) == ([], {c.id})
    # A retry after a lost reply: the attempt is ended exactly so, reported recorded again.
    assert await store.claim_and_complete_runs([_success(c)], ["echo"], 4, "w1", TTL) == (
        [],
        {c.id},
    )
    with pytest.raises(ValueError, match="successes only"):
        await store.claim_and_complete_runs([_failure(c)], ["echo"], 4, "w1", TTL)


async def test_results_ride_on_the_last_claim_before_their_batch_would_leave(
    store: Store,
) -> None:
    """A host that claims every few ms lets its results gather for the completer's batch
    and sends them with the claim that comes last before the batch would leave; a host
    whose claims are further apart than the batch's wait sends them with the next claim."""
    (c,) = await _running(store, 1)
    completer = Completer(store, owner="w1", lease_ttl=TTL)
    completer.enqueue(_success(c), False, Told()(c.id))
    assert completer.take_riders(within=COALESCE / 10) == []  # a claim comes sooner
    assert [r.completion.run_id for r in completer.take_riders(within=COALESCE)] == [c.id]
    assert completer.take_riders(within=1.0) == []  # taken: the queue is empty
