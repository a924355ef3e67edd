"""A run that times out: the whole process tree dies, even parts that ignore SIGTERM or
left the handler's process group, and nothing is left behind."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from supervisor.core.store import Store

from ..helpers import wait_for
from .procs import Cluster, read_pids, wait_gone, watch
from .scenario import attempts, create_runs, status_is


async def test_timeout_kills_the_whole_tree(cluster: Cluster, store: Store, tmp_path: Path) -> None:
    sup = await cluster.start_ready("a", ["tree"], kill_grace=0.5)
    work = tmp_path / "work"
    work.mkdir()
    [run_id] = await create_runs(
        store, "tree", 1, {"dir": str(work)}, timeout_seconds=1, max_attempts=1
    )
    pids_file = work / f"{run_id}.pids"
    await wait_for(pids_file.exists, 15, "the handler and its grandchildren to start")
    handler, in_group, escaped = read_pids(pids_file)
    tree = watch([handler, in_group, escaped])
    assert os.getpgid(in_group) == handler, "one grandchild shares the handler's group"
    assert os.getpgid(escaped) == escaped, "the other left it (setsid)"
    # The runner marks every child's environment; forks inherit it. Nothing may keep it.
    marker = psutil.Process(handler).environ()["PUNCHCLOCK_CHILD_ID"]

    # Timeout 1 s, then SIGTERM (ignored by all three), 0.5 s grace, SIGKILL to the group
    # and to the descendant that escaped it.
    await wait_gone(tree, 10, "the handler, its grandchild and the escaped grandchild")
    await wait_for(lambda: status_is(store, run_id, "dead"), 10, "the run to end dead")
    [attempt] = await attempts(store, run_id)
    assert attempt["outcome"] == "timed_out"
    assert attempt["error"].startswith("timed out after 1s"), attempt["error"]
    # Logged once the result is recorded, so just after the status the test saw.
    await sup.wait_event("run_timed_out", 5, run_id=run_id)
    assert sup.running
    assert [p for p in psutil.process_iter() if _marked(p, marker)] == []
    assert sup.stop() == 0, sup.tail()


def _marked(proc: psutil.Process, marker: str) -> bool:
    try:
        alive = proc.status() != psutil.STATUS_ZOMBIE
        return alive and proc.environ().get("PUNCHCLOCK_CHILD_ID") == marker
    except psutil.Error:
        return False
