"""A supervisor frozen (SIGSTOP) past its lease: its keeper kills the child before the lease
can expire, another host takes the run over without overlap, and when the frozen one wakes
its result is rejected as late."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from supervisor.core.store import Store

from ..helpers import wait_for
from .procs import LEASE_TTL, Cluster, free_port, read_pids, scrape, wait_gone, watch
from .scenario import attempts, create_runs, read_lines, runs, status_is


async def test_frozen_supervisor_result_is_rejected_after_takeover(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    port = free_port()
    a = await cluster.start_ready("a", ["sleeper"], metrics_port=port)
    work = tmp_path / "work"
    work.mkdir()
    payload = {"dir": str(work), "seconds": {"1": 60, "2": 0.3}}
    [run_id] = await create_runs(store, "sleeper", 1, payload)
    pids_file = work / f"{run_id}-1.pids"
    await wait_for(pids_file.exists, 15, "attempt 1 to start")
    [first] = watch(read_pids(pids_file))

    a.send(signal.SIGSTOP)
    b = await cluster.start_ready("b", ["sleeper"])
    # Frozen, `a` can neither renew nor fence: its keeper kills the child at the kill-by
    # deadline (before the lease can expire), with `a` still frozen.
    await wait_gone([first], LEASE_TTL * 3, "the frozen supervisor's child")
    assert a.frozen(), "the keeper, not a woken supervisor, ended the child"
    await wait_for(lambda: status_is(store, run_id, "succeeded"), 20, "b to take the run over")
    # No overlap, by the handlers' own clocks: the first child's last sign of life comes
    # before the second execution started.
    last_alive_ns = int((work / f"{run_id}-1.tick").read_text())
    [second] = read_lines(work / "done.csv")
    assert (second["run_id"], second["attempt"]) == (run_id, 2)
    assert last_alive_ns < second["start_ns"], (last_alive_ns, second["start_ns"])

    a.send(signal.SIGCONT)
    rejected = await a.wait_event("run_late_result_rejected", 10, run_id=run_id, attempt=1)
    assert rejected["outcome"] == "lease_lost"
    metrics = await asyncio.to_thread(scrape, port)
    late = [
        v
        for k, v in metrics.items()
        if k.startswith("punchclock_attempts_total{") and 'outcome="rejected_late"' in k
    ]
    assert late == [1.0], metrics

    row = (await runs(store, [run_id]))[run_id]
    assert row["status"] == "succeeded" and row["last_error"] is None
    history = await attempts(store, run_id)
    assert [(h["attempt"], h["worker_id"], h["outcome"]) for h in history] == [
        (1, "a", "lease_lost"),
        (2, "b", "succeeded"),
    ]
    assert history[1]["error"] is None and history[1]["exit_code"] == 0
    # Only b's execution finished; a's was killed before writing its line.
    assert [(d["run_id"], d["attempt"]) for d in read_lines(work / "done.csv")] == [(run_id, 2)]
    assert a.running, "waking up late is not a reason to exit"
    assert a.stop() == 0, a.tail()
    assert b.stop() == 0, b.tail()
