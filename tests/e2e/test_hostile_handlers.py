"""Hostile handlers against a real supervisor: binary output, a flood of it, daemons left
behind at exit and at timeout, and a handler that closes its output early and works on.
The supervisor must survive each, record the true outcome, and leave no process behind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from supervisor.core.store import Store

from ..helpers import wait_for
from .procs import Cluster, free_port, scrape, watch
from .scenario import all_in, attempts, create_runs, runs

HOSTILE = {"hostile": "hostile"}


async def test_binary_output_is_stored_with_replacements_flagged(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    sup = await cluster.start_ready("a", HOSTILE, concurrency=4)
    ids = await create_runs(store, "hostile", 4, {"mode": "binary"})
    # One batch of completions, every one carrying NUL: none may take the others down.
    await wait_for(lambda: all_in(store, ids, "succeeded"), 20, "binary runs to succeed")
    for run_id in ids:
        [a] = await attempts(store, run_id)
        assert a["stdout_tail"] == "gz\x1f\ufffd\ufffd\ufffd\ufffd\ufffd tail\ufffdend"
        assert a["stderr_tail"] == "err\ufffd\ufffd( progress\r\ufffd"
        assert (a["stdout_replaced"], a["stderr_replaced"]) == (True, True)
    assert sup.running, sup.tail()
    assert sup.events("completion_refused") == []
    assert sup.stop() == 0, sup.tail()


async def test_a_hundred_megabytes_of_output_keeps_only_the_tail(
    cluster: Cluster, store: Store
) -> None:
    sup = await cluster.start_ready("a", HOSTILE)
    [run_id] = await create_runs(store, "hostile", 1, {"mode": "flood", "mb": 100})
    await wait_for(lambda: all_in(store, [run_id], "succeeded"), 60, "the flood to end")
    [a] = await attempts(store, run_id)
    assert a["stdout_tail"].endswith("\nTHE END\n") and len(a["stdout_tail"]) <= 65536
    assert a["stdout_replaced"] and not a["stderr_replaced"]
    assert sup.running and sup.stop() == 0, sup.tail()


async def test_a_daemon_left_at_normal_exit_is_killed(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    port = free_port()
    sup = await cluster.start_ready("a", HOSTILE, metrics_port=port)
    [run_id] = await create_runs(store, "hostile", 1, {"mode": "daemon", "dir": str(tmp_path)})
    await wait_for(lambda: all_in(store, [run_id], "succeeded"), 20, "the handler to exit 0")
    daemon = watch([int((tmp_path / f"{run_id}.daemon").read_text())])
    # It left the group and the session and cleared its environment: only the supervisor
    # being its subreaper brings it back to be killed.
    await wait_for(daemon[0].gone, 5, "the daemon to be killed")
    event = await sup.wait_event("orphan_killed", 5)
    assert event["pid"] == daemon[0].pid
    metrics = await asyncio.to_thread(scrape, port)
    assert metrics.get("punchclock_orphans_killed_total") == 1.0, metrics
    assert sup.stop() == 0, sup.tail()


async def test_a_daemon_left_by_a_timed_out_handler_is_killed(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    sup = await cluster.start_ready("a", HOSTILE)
    payload = {"mode": "daemon", "dir": str(tmp_path), "linger": 60}
    [run_id] = await create_runs(store, "hostile", 1, payload, timeout_seconds=2, max_attempts=1)
    await wait_for((tmp_path / f"{run_id}.daemon").exists, 20, "the daemon to start")
    daemon = watch([int((tmp_path / f"{run_id}.daemon").read_text())])
    await wait_for(lambda: all_in(store, [run_id], "dead"), 20, "the timeout to end the run")
    [a] = await attempts(store, run_id)
    assert a["outcome"] == "timed_out"
    await wait_for(daemon[0].gone, 5, "the daemon to be killed")
    assert sup.stop() == 0, sup.tail()


async def test_a_handler_that_closes_its_output_early_is_waited_for(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    sup = await cluster.start_ready("a", HOSTILE)
    payload = {"mode": "close_stdout", "dir": str(tmp_path), "seconds": 1.5}
    [run_id] = await create_runs(store, "hostile", 1, payload)
    await wait_for(lambda: all_in(store, [run_id], "succeeded"), 20, "the handler to finish")
    end_ns = int((tmp_path / f"{run_id}.end").read_text())
    row = (await runs(store, [run_id]))[run_id]
    # Closed pipes are not an exit: the run ends when the process does, not before.
    assert row["finished_at"].timestamp() * 1e9 >= end_ns - 5e6  # clocks: same host, 5 ms
    [a] = await attempts(store, run_id)
    assert (a["outcome"], a["exit_code"]) == ("succeeded", 0)
    assert time.time_ns() >= end_ns
    assert sup.stop() == 0, sup.tail()
