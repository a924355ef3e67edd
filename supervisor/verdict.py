"""What a finished child means for its run: how the attempt ended (attempt_outcome, one
vocabulary for the database, the logs and the metrics), what the run becomes under the job's
exit-code policy (exitpolicy.py), and when it is tried again. Pure: no I/O, no clock but
what it is given.
"""

from __future__ import annotations

import random

from supervisor.core.exitpolicy import DEFAULT_POLICY, OOM_KILLED, SIGNAL, TIMEOUT, ExitPolicy
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.runpath import Completion
from supervisor.proc.child import ChildEnd, ChildResult

ERROR_STDERR_CHARS = 2000
KEEPER_KILLED = "killed by the keeper: the lease was not renewed in time"


def retry_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with equal jitter: uniform(b/2, b), b = min(cap, base*2^(attempt-1)).

    Half fixed, half random: spread like full jitter, but never an instant retry and the
    wait never shrinks from one attempt to the next (DESIGN.md, Retries).
    """
    b = min(cap, base * 2 ** (attempt - 1))
    return (rng or random).uniform(b / 2, b)


# How a child's end reads as an attempt outcome, when the lease held throughout.
ATTEMPT_OUTCOME = {
    ChildEnd.SUCCEEDED: Outcome.SUCCEEDED,
    ChildEnd.FAILED: Outcome.FAILED,
    ChildEnd.TIMED_OUT: Outcome.TIMED_OUT,
    ChildEnd.OOM_KILLED: Outcome.OOM_KILLED,
    ChildEnd.KILLED: Outcome.FAILED,
    ChildEnd.SPAWN_FAILED: Outcome.FAILED,
}


def not_run(error: str) -> ChildResult:
    """The result of a child that was never started (no handler here, lease gone first)."""
    return ChildResult.not_started(error)


def _ending(result: ChildResult, code: int | None) -> str | None:
    """The policy's name for how the handler itself ended; None when we ended it."""
    if result.outcome is ChildEnd.TIMED_OUT:
        return TIMEOUT
    if result.outcome is ChildEnd.OOM_KILLED:
        return OOM_KILLED
    if result.outcome is ChildEnd.FAILED:
        return str(code) if code is not None else SIGNAL if result.signal else None
    return None


def verdict(
    run_id: int,
    lease_token: int,
    result: ChildResult,
    *,
    lease_gone: bool,
    keeper_killed: bool,
    attempts: int,
    max_attempts: int,
    retry_base: float,
    retry_cap: float,
    policy: ExitPolicy = DEFAULT_POLICY,
) -> Completion:
    """The fenced completion for `result`. `lease_gone`: lost or self-fenced while it ran;
    `keeper_killed`: SIGKILLed after the keeper's kill-by deadline (our loop stood still)."""
    outcome, error = ATTEMPT_OUTCOME[result.outcome], result.error
    code = result.exit_code if result.outcome in (ChildEnd.SUCCEEDED, ChildEnd.FAILED) else None
    if code is not None and code in policy.success_exit_codes:
        outcome, error = Outcome.SUCCEEDED, None
    elif outcome is Outcome.SUCCEEDED:  # exit 0, which this job does not count as success
        outcome, error = Outcome.FAILED, f"exited with status {code}: not a success exit code"
    ending = _ending(result, code)
    if keeper_killed:
        outcome, error = Outcome.LEASE_LOST, KEEPER_KILLED
    if lease_gone or keeper_killed:
        outcome, ending = Outcome.LEASE_LOST, None  # ours, not the handler's: retried
    if error and result.stderr_tail:
        error = f"{error}\nstderr: {result.stderr_tail[-ERROR_STDERR_CHARS:]}"
    retry_in = 0.0
    if outcome == Outcome.SUCCEEDED:
        status = RunStatus.SUCCEEDED
    elif (ending is not None and not policy.retries(ending)) or attempts >= max_attempts:
        status = RunStatus.DEAD
    else:
        status = RunStatus.FAILED
        retry_in = retry_delay(attempts, retry_base, retry_cap)
    return Completion(
        run_id=run_id,
        lease_token=lease_token,
        status=status,
        retry_in=retry_in,
        outcome=outcome,
        error=error,
        exit_code=result.exit_code,
        signal=result.signal,
        stdout_tail=result.stdout_tail,
        stderr_tail=result.stderr_tail,
        cpu_seconds=result.cpu_seconds,
        peak_rss_bytes=result.peak_rss_bytes,
        stdout_replaced=result.stdout_replaced,
        stderr_replaced=result.stderr_replaced,
    )
