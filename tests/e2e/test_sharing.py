"""Five supervisor processes share 200 due runs: each run executes exactly once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from supervisor.core.store import Store

from ..helpers import wait_for
from .procs import Cluster
from .scenario import all_attempts, all_in, create_runs, read_lines, statuses

WORKERS = [f"s{i}" for i in range(1, 6)]


async def test_five_supervisors_run_200_runs_exactly_once(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    sups = [cluster.start(w, ["append"], concurrency=4) for w in WORKERS]
    for s in sups:
        await s.wait_event("supervisor_started", timeout=20)
    out = tmp_path / "out.csv"
    ids = await create_runs(store, "append", 200, {"out": str(out)})

    await wait_for(lambda: all_in(store, ids, "succeeded"), 60, "200 runs to succeed")

    lines = read_lines(out)
    executed = Counter(line["run_id"] for line in lines)
    assert sorted(executed) == sorted(ids), "every run executed"
    assert [r for r, n in executed.items() if n > 1] == [], "no run executed twice"
    assert await statuses(store, ids) == {"succeeded": 200}
    history = await all_attempts(store, ids)
    assert [(a["attempt"], a["outcome"]) for a in history] == [(1, "succeeded")] * 200
    # The handler saw the lease token its attempt row recorded: one claim, one execution.
    tokens = {a["run_id"]: a["lease_token"] for a in history}
    assert all(line["lease_token"] == tokens[line["run_id"]] for line in lines)
    per_worker = Counter(a["worker_id"] for a in history)
    assert set(per_worker) == set(WORKERS), f"every supervisor took some: {per_worker}"
    for s in sups:
        assert s.running, s.tail()
        # A healthy run neither loses nor fences a lease, and no result arrives late.
        for bad in ("run_lease_lost", "run_self_fenced", "run_late_result_rejected"):
            assert s.events(bad) == [], f"{s.worker_id}: {bad}\n{s.tail()}"
    for s in sups:
        assert s.stop() == 0, s.tail()
