"""punchclock_queue_delay_seconds (issue 63): an attempt is late from when it became due, so
a backfill of last week's instants, a retry after its backoff or a requeue of an old dead
run is not counted as hours late; a first attempt is late from its instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

from supervisor.core.model import Trigger
from supervisor.core.records import Claim

AT = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
LATER = AT + timedelta(days=6)


def claim(attempts: int, trigger: Trigger, run_after: datetime) -> Any:
    return cast(Any, SimpleNamespace(scheduled_at=AT, run_after=run_after, attempts=attempts,
                                     trigger=trigger))  # fmt: skip


def _due_at(row: Any) -> datetime:
    return cast(datetime, Claim.due_at.fget(row))  # type: ignore[attr-defined]


def test_due_time_of_each_kind_of_attempt() -> None:
    assert _due_at(claim(1, Trigger.SCHEDULE, AT)) == AT  # late from its instant
    assert _due_at(claim(1, Trigger.SCHEDULE, LATER)) == AT  # held back: still late
    assert _due_at(claim(1, Trigger.MANUAL, AT)) == AT
    assert _due_at(claim(1, Trigger.BACKFILL, LATER)) == LATER  # created days after it
    assert _due_at(claim(2, Trigger.SCHEDULE, LATER)) == LATER  # a retry or a requeue
    assert _due_at(claim(3, Trigger.BACKFILL, AT - timedelta(hours=1))) == AT
