"""A supervisor SIGKILLed mid-run: its child dies with it, another host re-runs the run
after the lease expired, and the two executions never overlap."""

from __future__ import annotations

import signal
import time
from datetime import datetime
from pathlib import Path

from supervisor.core.store import Store

from ..helpers import wait_for
from .procs import Cluster, read_pids, wait_gone, watch
from .scenario import attempts, create_runs, read_lines, runs, status_is


def _ns(ts: datetime) -> int:
    return int(ts.timestamp() * 1e9)


async def test_sigkill_kills_the_child_and_another_supervisor_reruns_it(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    a = await cluster.start_ready("a", ["sleeper"])
    work = tmp_path / "work"
    work.mkdir()
    # Attempt 1 would run for a minute; attempt 2 finishes quickly.
    payload = {"dir": str(work), "seconds": {"1": 60, "2": 0.3}, "grandchild": True}
    [run_id] = await create_runs(store, "sleeper", 1, payload)
    pids_file = work / f"{run_id}-1.pids"
    await wait_for(pids_file.exists, 15, "attempt 1 to start")
    first = watch(read_pids(pids_file))  # the handler and its grandchild (same group)
    assert len(first) == 2

    a.send(signal.SIGKILL)
    killed_ns = time.time_ns()
    assert a.wait(5) == -signal.SIGKILL
    # The keeper notices its pipe closing and kills the group: no lease expiry involved.
    dead_ns = await wait_gone(first, 3, "the orphaned handler and grandchild")
    assert dead_ns - killed_ns < 3e9
    last_tick = int((work / f"{run_id}-1.tick").read_text())
    row = (await runs(store, [run_id]))[run_id]
    assert row["status"] == "running" and row["lease_owner"] == "a"
    lease_expired_at = row["lease_expires_at"]

    b = await cluster.start_ready("b", ["sleeper"])
    await wait_for(
        lambda: status_is(store, run_id, "succeeded"), 20, "another supervisor to finish the run"
    )

    history = await attempts(store, run_id)
    assert [(h["attempt"], h["worker_id"], h["outcome"]) for h in history] == [
        (1, "a", "lease_lost"),
        (2, "b", "succeeded"),
    ]
    # B claimed it only once the lease had expired on the database clock.
    assert history[1]["started_at"] >= lease_expired_at
    [done] = read_lines(work / "done.csv")
    assert (done["run_id"], done["attempt"]) == (run_id, 2)
    # No overlap: attempt 1 was dead (seen gone, last tick) before attempt 2 began.
    assert last_tick <= dead_ns < done["start_ns"]
    assert _ns(history[1]["started_at"]) > dead_ns
    assert b.events("run_reaped", run_id=run_id, lost_by="a"), b.tail()
    assert b.stop() == 0, b.tail()
