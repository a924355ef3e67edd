"""The claimer's pacing on its own (supervisor/claimpace.py): the refill gate, the claim
cursors and the catch-up pass's pace, driven through their monotonic `now`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from supervisor import claimpace
from supervisor.claimpace import CatchUpPace, Cursors, Refill

T0 = datetime(2026, 12, 8, tzinfo=UTC)


@dataclass(frozen=True)
class _Placed:
    id: int
    type: str
    run_after: datetime


def _claim(run_id: int, type_: str = "a", after: float = 0.0) -> _Placed:
    return _Placed(run_id, type_, T0 + timedelta(seconds=after))


def test_without_a_backlog_a_freed_slot_is_claimed_at_once() -> None:
    refill = Refill(batch=4, wait=0.05)
    assert refill.hold(free=1, now=10.0) is None
    assert refill.wakes(free=1)


def test_behind_a_backlog_freed_slots_wait_for_the_batch_or_the_wait() -> None:
    refill = Refill(batch=4, wait=0.05)
    assert refill.claimed(n=4, free=4)  # full after one that was not: a backlog begins
    assert not refill.claimed(n=4, free=4)  # still full: it began before
    assert refill.hold(free=1, now=10.0) == pytest.approx(0.05)  # the first starts the wait
    assert not refill.wakes(free=2)  # the ones between wake nobody
    assert refill.wakes(free=4)  # the batch is complete
    assert refill.hold(free=2, now=10.03) == pytest.approx(0.02)
    assert refill.hold(free=2, now=10.06) is None  # waited long enough: claim what is free
    assert refill.wakes(free=1)  # the wait is over: the next freed slot wakes again
    assert refill.hold(free=4, now=10.07) is None  # a full batch never waits
    refill.claimed(n=2, free=4)  # short: the backlog is gone
    assert refill.hold(free=1, now=10.08) is None


def test_a_cursor_follows_full_claims_and_is_dropped_by_a_short_one() -> None:
    cursors = Cursors()
    assert cursors.for_claim(now=1.0) == {}
    cursors.moved(["a", "b"], 3, [_claim(1), _claim(3, after=2), _claim(2, "b", after=1)], 1.0)
    assert cursors.for_claim(now=1.5) == {"a": (T0 + timedelta(seconds=2), 3),
                                          "b": (T0 + timedelta(seconds=1), 2)}  # fmt: skip
    cursors.moved(["a"], 2, [_claim(4, after=3)], 1.6)  # short: a reads from the start
    assert set(cursors.for_claim(now=1.7)) == {"b"}
    assert cursors.for_claim(now=1.7, fresh=True) == {}  # after an uncertain claim


def test_cursors_live_cursor_every_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claimpace, "CURSOR_EVERY", 1.0)
    cursors = Cursors()
    cursors.moved(["a"], 1, [_claim(1)], now=5.0)
    cursors.moved(["a"], 1, [_claim(2, after=1)], now=5.9)  # moving keeps the first expiry
    assert cursors.for_claim(now=5.99) == {"a": (T0 + timedelta(seconds=1), 2)}
    assert cursors.for_claim(now=6.0) == {}


def test_the_catch_up_pass_reads_old_runs_once_a_second_and_reads_on() -> None:
    pace = CatchUpPace()
    assert pace.due(now=0.0) and pace.after is None
    pace.judged((T0, 7), now=100.0)
    assert not pace.due(now=100.5) and pace.after == (T0, 7)
    assert pace.due(now=100.0 + claimpace.CATCHUP_OLD_EVERY)
    pace.judged(None, now=102.0)  # the scan reached the end: the next from the oldest
    assert pace.after is None
