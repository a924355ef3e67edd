"""What a finished child means for its run: one table of cases for the pure verdict()."""

from __future__ import annotations

import random

import pytest

from supervisor.core.errors import InvalidSpec
from supervisor.core.exitpolicy import DEFAULT_POLICY, EXIT_PERMANENT, ExitPolicy, parse_policy
from supervisor.proc.child import ChildEnd, ChildResult
from supervisor.verdict import KEEPER_KILLED, retry_delay, verdict


def _result(outcome: str, exit_code: int | None = None, sig: int | None = None) -> ChildResult:
    error = None if outcome == "succeeded" else f"{outcome}!"
    return ChildResult(ChildEnd(outcome), exit_code, sig, error, "out", "err", 0.1, None, 1.0)


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


def _policy(**fields: object) -> ExitPolicy:
    errors: list[InvalidSpec] = []
    policy = parse_policy(errors, dict(fields), DEFAULT_POLICY)
    assert not errors, errors
    return policy


@pytest.mark.parametrize(
    ("policy", "result", "expected"),
    [
        # success_exit_codes: 3 succeeds, 0 then does not
        (_policy(success_exit_codes=[0, 3]), _result("failed", 3), ("succeeded", "succeeded")),
        (_policy(success_exit_codes=[3]), _result("succeeded", 0), ("failed", "failed")),
        # dead_on: an exit status, a signal, a timeout end the run at once
        (_policy(dead_on=[2]), _result("failed", 2), ("failed", "dead")),
        (_policy(dead_on=[2]), _result("failed", 65), ("failed", "failed")),  # 65 no longer
        (_policy(dead_on=["signal"]), _result("failed", sig=11), ("failed", "dead")),
        (_policy(dead_on=["timeout"]), _result("timed_out"), ("timed_out", "dead")),
        (_policy(), _result("timed_out"), ("timed_out", "failed")),
        # retry_on: only these are retried, anything else is dead at once
        (_policy(retry_on=[75, "timeout"]), _result("failed", 75), ("failed", "failed")),
        (_policy(retry_on=[75, "timeout"]), _result("timed_out"), ("timed_out", "failed")),
        (_policy(retry_on=[75, "timeout"]), _result("failed", 1), ("failed", "dead")),
        (_policy(retry_on=[75]), _result("failed", sig=9), ("failed", "dead")),
        # endings we caused are never the handler's: retried whatever the policy
        (_policy(retry_on=[75]), _result("killed", sig=15), ("failed", "failed")),
        (_policy(retry_on=[75]), _result("spawn_failed"), ("failed", "failed")),
        (_policy(dead_on=[1]), _result("failed", 1), ("failed", "dead")),
        # the kernel's OOM kill at the cgroup's memory_max: retried by default, like a failure
        (_policy(), _result("oom_killed", sig=9), ("oom_killed", "failed")),
        (_policy(dead_on=["oom_killed"]), _result("oom_killed", sig=9), ("oom_killed", "dead")),
        (_policy(retry_on=["timeout"]), _result("oom_killed", sig=9), ("oom_killed", "dead")),
        (_policy(dead_on=["signal"]), _result("oom_killed", sig=9), ("oom_killed", "failed")),
    ],
)
def test_exit_policy(policy: ExitPolicy, result: ChildResult, expected: tuple[str, str]) -> None:
    c = verdict(
        7,
        3,
        result,
        lease_gone=False,
        keeper_killed=False,
        attempts=1,
        max_attempts=3,
        retry_base=10,
        retry_cap=60,
        policy=policy,
    )
    assert (c.outcome, c.status) == expected


def test_exit_policy_never_applies_to_a_lost_lease() -> None:
    c = verdict(
        7, 3, _result("failed", 2), lease_gone=True, keeper_killed=False, attempts=1,
        max_attempts=3, retry_base=10, retry_cap=60, policy=_policy(dead_on=[2]),
    )  # fmt: skip
    assert (c.outcome, c.status) == ("lease_lost", "failed")


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ({"success_exit_codes": []}, "success_exit_codes", "non-empty"),
        ({"success_exit_codes": [0, 256]}, "success_exit_codes[1]", "0-255"),
        ({"dead_on": "65"}, "dead_on", "must be a list"),
        ({"dead_on": [65, "sigsegv"]}, "dead_on[1]", "one of signal, timeout, oom_killed"),
        ({"dead_on": [True]}, "dead_on[0]", "exit status"),
        ({"dead_on": [2, 2]}, "dead_on[1]", "twice"),
        ({"retry_on": [1], "dead_on": [1]}, "retry_on[0]", "also in dead_on"),
        ({"dead_on": [0]}, "dead_on[0]", "success exit code"),
    ],
)
def test_exit_policy_validation_names_the_entry(
    fields: dict[str, object], field: str, text: str
) -> None:
    errors: list[InvalidSpec] = []
    parse_policy(errors, fields, DEFAULT_POLICY)
    assert [e.field for e in errors] == [field], errors
    assert text in errors[0].message
