"""What a finished child means for its run: one table of cases for the pure verdict()."""

from __future__ import annotations

import random

import pytest

from supervisor.child import ChildResult
from supervisor.verdict import EXIT_PERMANENT, KEEPER_KILLED, retry_delay, verdict


def _result(outcome: str, exit_code: int | None = None, sig: int | None = None) -> ChildResult:
    error = None if outcome == "succeeded" else f"{outcome}!"
    return ChildResult(outcome, exit_code, sig, error, "out", "err", 0.1, None, 1.0)


@pytest.mark.parametrize(
    ("result", "gone", "keeper", "attempts", "expected"),
    [
        (_result("succeeded", 0), False, False, 1, ("succeeded", "succeeded")),
        (_result("failed", 1), False, False, 1, ("failed", "failed")),
        (_result("failed", 1), False, False, 3, ("failed", "dead")),  # out of attempts
        (_result("failed", EXIT_PERMANENT), False, False, 1, ("failed", "dead")),
        (_result("timed_out"), False, False, 1, ("timed_out", "failed")),
        (_result("killed", sig=15), False, False, 1, ("failed", "failed")),
        (_result("spawn_failed"), False, False, 1, ("failed", "failed")),
        (_result("killed", sig=9), True, False, 1, ("lease_lost", "failed")),
        (_result("succeeded", 0), True, False, 1, ("lease_lost", "failed")),
        (_result("failed", sig=9), False, True, 1, ("lease_lost", "failed")),
    ],
)
def test_verdict(
    result: ChildResult, gone: bool, keeper: bool, attempts: int, expected: tuple[str, str]
) -> None:
    c = verdict(
        7,
        3,
        result,
        lease_gone=gone,
        keeper_killed=keeper,
        attempts=attempts,
        max_attempts=3,
        retry_base=10,
        retry_cap=60,
    )
    assert (c.outcome, c.status) == expected
    assert (c.run_id, c.lease_token, c.stdout_tail) == (7, 3, "out")
    if c.status == "failed":
        assert 5 <= c.retry_in <= 10  # equal jitter of the first backoff step
    else:
        assert c.retry_in == 0
    if result.error:
        assert c.error is not None and c.error.endswith("\nstderr: err")
    if keeper:
        assert c.error == f"{KEEPER_KILLED}\nstderr: err"


def test_retry_delay_never_shrinks_and_is_capped() -> None:
    rng = random.Random(1)
    for attempt in range(1, 12):
        b = min(300, 5 * 2 ** (attempt - 1))
        assert b / 2 <= retry_delay(attempt, 5, 300, rng) <= b
