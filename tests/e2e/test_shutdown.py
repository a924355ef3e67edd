"""Graceful shutdown: children get the drain timeout, the rest are killed and their runs
given back without consuming an attempt; another supervisor completes them."""

from __future__ import annotations

import signal
from pathlib import Path

from supervisor.core.store import Store

from ..factory import sql, sql_value
from ..helpers import wait_for
from .procs import Cluster, read_pids, wait_gone, watch
from .scenario import all_attempts, all_in, attempts, create_runs, read_lines, runs, status_is


async def test_sigterm_drains_then_releases_unfinished_runs(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    a = await cluster.start_ready("a", ["sleeper"], concurrency=3, drain_timeout=1.5)
    work = tmp_path / "work"
    work.mkdir()
    # Two runs outlast the drain on their first attempt; one finishes within it.
    long_ids = await create_runs(
        store, "sleeper", 2, {"dir": str(work), "seconds": {"1": 60, "2": 0.2}}, prefix="long"
    )
    [short_id] = await create_runs(
        store, "sleeper", 1, {"dir": str(work), "seconds": 1.0}, prefix="short"
    )
    ready = [work / f"{r}-1.pids" for r in [*long_ids, short_id]]
    await wait_for(lambda: all(p.exists() for p in ready), 15, "all three children to start")
    children = watch(pid for p in ready for pid in read_pids(p))

    a.send(signal.SIGTERM)
    assert a.wait(10) == 0, a.tail()
    await wait_gone(children, 1, "a's children")  # a exited: they must be gone already

    [drained] = a.events("supervisor_drained")
    assert drained["clean"] is False and drained["released"] == 2, drained
    # The declared order, as it happened: leases are kept until nothing is left to keep.
    phases = [e["phase"] for e in a.events("shutdown_phase")]
    assert phases == ["stop_intake", "drain", "release", "flush_completions", "stop_upkeep"]
    row = (await runs(store, [short_id]))[short_id]
    assert row["status"] == "succeeded", "the drain let the short run finish"
    assert [(h["worker_id"], h["outcome"]) for h in await attempts(store, short_id)] == [
        ("a", "succeeded")
    ]
    released = await runs(store, long_ids)
    for run_id in long_ids:
        row = released[run_id]
        # Released, not failed: due again now, the attempt budget grew by one.
        assert (row["status"], row["attempts"], row["max_attempts"]) == ("scheduled", 1, 4)
        assert row["lease_owner"] is None
        [h] = await attempts(store, run_id)
        assert (h["worker_id"], h["outcome"]) == ("a", "interrupted")
    assert len(a.events("run_interrupted")) == 2

    b = await cluster.start_ready("b", ["sleeper"])
    await wait_for(lambda: all_in(store, long_ids, "succeeded"), 15, "b to complete them")
    history = await all_attempts(store, long_ids)
    assert [(h["attempt"], h["worker_id"], h["outcome"]) for h in history] == [
        (1, "a", "interrupted"),
        (2, "b", "succeeded"),
    ] * 2
    done = sorted((d["run_id"], d["attempt"]) for d in read_lines(work / "done.csv"))
    assert done == sorted([(short_id, 1)] + [(r, 2) for r in long_ids])
    assert b.stop() == 0, b.tail()


async def test_sigterm_gives_back_a_run_claimed_ahead_before_its_instant(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    [run_id] = await create_runs(
        store, "sleeper", 1, {"dir": str(work), "seconds": 0.1}, prefix="ahead"
    )
    move = """UPDATE runs SET scheduled_at = now() + make_interval(secs => $2),
                  run_after = now() + make_interval(secs => $2) WHERE id = $1"""
    await sql(store, move, run_id, 3600.0)
    a = await cluster.start_ready(
        "a", ["sleeper"], lease_ttl=10.0, extra_args=["--claim-ahead", "3"]
    )
    # Its instant lies 4 s out; `a` claims 3 s ahead, so it holds the run about 3 s early.
    await sql(store, move, run_id, 4.0)
    await sql(store, "SELECT pg_notify('punchclock_wake', '')")
    await wait_for(lambda: status_is(store, run_id, "running"), 10, "a to claim it ahead")
    row = (await runs(store, [run_id]))[run_id]
    assert row["lease_owner"] == "a"
    assert await sql_value(store, "SELECT now() < $1::timestamptz", row["scheduled_at"])

    a.send(signal.SIGTERM)
    assert a.wait(10) == 0, a.tail()
    [drained] = a.events("supervisor_drained")
    assert (drained["released_unstarted"], drained["clean"]) == (1, True), drained
    assert not (work / f"{run_id}-1.pids").exists(), "its child never started"
    row = (await runs(store, [run_id]))[run_id]
    assert (row["status"], row["lease_owner"], row["max_attempts"]) == ("scheduled", None, 4)
    [h] = await attempts(store, run_id)
    assert (h["worker_id"], h["outcome"]) == ("a", "interrupted")

    b = await cluster.start_ready("b", ["sleeper"])
    await wait_for(lambda: status_is(store, run_id, "succeeded"), 15, "b to run it")
    [done] = read_lines(work / "done.csv")
    assert (done["run_id"], done["attempt"]) == (run_id, 2)
    # b ran it at its instant, not before (the child's own clock against the schedule).
    assert done["start_ns"] >= row["scheduled_at"].timestamp() * 1e9
    assert b.stop() == 0, b.tail()
