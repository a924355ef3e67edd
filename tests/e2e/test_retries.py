"""A handler that always fails: retried with growing, jittered waits, then dead."""

from __future__ import annotations

import itertools

from supervisor.core.store import Store

from ..helpers import wait_for
from .procs import Cluster
from .scenario import attempts, create_runs, runs, status_is

BASE, CAP, MAX_ATTEMPTS = 0.2, 5.0, 5
PROMPT = 1.0  # a due retry is claimed within this (NOTIFY + timed wake-up; generous for CI)


async def test_failing_run_backs_off_with_jitter_and_ends_dead(
    cluster: Cluster, store: Store
) -> None:
    sup = await cluster.start_ready("a", ["fail"], poll_interval=5.0)
    [run_id] = await create_runs(
        store,
        "fail",
        1,
        {},
        max_attempts=MAX_ATTEMPTS,
        retry_base_seconds=BASE,
        retry_cap_seconds=CAP,
    )
    await wait_for(lambda: status_is(store, run_id, "dead"), 30, "the run to end dead")

    history = await attempts(store, run_id)
    assert [(a["attempt"], a["outcome"]) for a in history] == [
        (n, "failed") for n in range(1, MAX_ATTEMPTS + 1)
    ]
    assert all(a["exit_code"] == 1 for a in history)
    assert "failing on purpose" in history[-1]["error"]
    row = (await runs(store, [run_id]))[run_id]
    assert row["attempts"] == MAX_ATTEMPTS and row["finished_at"] is not None
    await sup.wait_event("run_dead", 5, run_id=run_id)  # logged just after the commit

    # The waits the supervisor drew, attempt by attempt (logged with each retry).
    drawn = {e["attempt"]: e["retry_in"] for e in sup.events("run_retry_scheduled")}
    assert sorted(drawn) == list(range(1, MAX_ATTEMPTS))
    waits = [drawn[n] for n in range(1, MAX_ATTEMPTS)]
    nominal = [min(CAP, BASE * 2 ** (n - 1)) for n in range(1, MAX_ATTEMPTS)]
    # Equal jitter (DESIGN.md, Retries): each wait is drawn from [b/2, b]...
    for wait, b in zip(waits, nominal, strict=True):
        assert b / 2 <= wait <= b, (waits, nominal)
    # ...and not the deterministic b (nor b/2, nor any fixed fraction of b): four
    # continuous draws landing on one fraction is practically impossible.
    fractions = [w / b for w, b in zip(waits, nominal, strict=True)]
    assert max(fractions) - min(fractions) > 1e-3, fractions

    # The database held each retry back for its wait (both times from its clock), and the
    # retry then started promptly (claimed ahead, it starts at run_after exactly: timestamps
    # keep microseconds, the logged wait more digits).
    for before, after, wait in zip(history, history[1:], waits, strict=False):
        held_back = (after["started_at"] - before["finished_at"]).total_seconds()
        assert wait - 1e-6 <= held_back <= wait + PROMPT, (held_back, wait)
    # So the gaps between attempt starts grow: the wait ranges double, so each gap beats
    # the one two attempts earlier outright, and the last is more than twice the first.
    starts = [a["started_at"] for a in history]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert all(gaps[i + 2] > gaps[i] for i in range(len(gaps) - 2)), gaps
    assert gaps[-1] > 2 * gaps[0], gaps
    assert sup.stop() == 0, sup.tail()
