"""Graceful shutdown: children get the drain timeout, the rest are killed and their runs
given back without consuming an attempt; another supervisor completes them."""

from __future__ import annotations

import signal
from pathlib import Path

from supervisor.core.store import Store

from ..helpers import wait_for
from .procs import Cluster, read_pids, wait_gone, watch
from .scenario import all_attempts, all_in, attempts, create_runs, read_lines, runs


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
