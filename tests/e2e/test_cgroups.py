"""Real supervisors running handlers in a cgroup per run: an OOM kill is the attempt's
outcome (and the supervisor and a concurrent run carry on), a timeout and the supervisor's
SIGKILL take down a daemon that escaped by setsid, a double fork and an empty environment."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from supervisor.core import runs
from supervisor.core.store import Store
from supervisor.proc import cgroups
from supervisor.proc.cglimits import Limits
from supervisor.registry import describe_isolation

from ..helpers import wait_for
from .procs import Cluster, read_pids, wait_gone, watch
from .scenario import attempts, create_runs, status_is

HOST = cgroups.probe()
pytestmark = pytest.mark.skipif(
    not HOST.usable or HOST.limit_problem(Limits(memory_max=1 << 26)) is not None,
    reason=f"no cgroup per run with a memory limit here: {describe_isolation(HOST)}",
)


async def test_oom_kill_is_an_outcome_and_the_supervisor_carries_on(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    a = await cluster.start_ready(
        "a", ["hog", "sleeper"], settings={"hog": 'memory_max = "64M"'}, concurrency=2
    )
    [slow] = await create_runs(store, "sleeper", 1, {"dir": str(work), "seconds": 2})
    await wait_for((work / f"{slow}-1.pids").exists, 15, "the concurrent run to start")
    [hog] = await create_runs(store, "hog", 1, {"mb": 512}, max_attempts=1)
    await wait_for(lambda: status_is(store, hog, "dead"), 20, "the hog to be OOM-killed")
    [attempt] = await attempts(store, hog)
    assert attempt["outcome"] == "oom_killed"
    assert attempt["error"].startswith("killed by the kernel: memory limit 64 MiB reached (peak ")
    assert attempt["peak_rss_bytes"] >= 60 << 20
    [started] = a.events("run_started", run_id=hog)
    assert "/pc-" in started["cgroup"]  # where to look while it runs
    # The supervisor survives, and the run beside it finishes normally.
    await wait_for(lambda: status_is(store, slow, "succeeded"), 20, "the concurrent run")
    assert a.running
    await a.wait_event("run_oom_killed", 5, run_id=hog)
    assert a.stop() == 0, a.tail()


async def test_timeout_and_supervisor_sigkill_take_down_an_escaped_daemon(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    settings = {"hostile": "cgroup = true\ntimeout_seconds = 1.5"}
    a = await cluster.start_ready("a", ["hostile"], settings=settings)
    payload = {"mode": "daemon", "dir": str(work), "linger": 60}
    [timed] = await create_runs(store, "hostile", 1, payload, max_attempts=1)
    await wait_for((work / f"{timed}.daemon").exists, 15, "the daemon to be in place")
    daemon = watch(read_pids(work / f"{timed}.daemon"))
    await wait_for(lambda: status_is(store, timed, "dead"), 20, "the timeout")
    assert (await attempts(store, timed))[0]["outcome"] == "timed_out"
    await wait_gone(daemon, 5, "the escaped daemon of the timed-out run")

    [killed] = await create_runs(store, "hostile", 1, payload, prefix="again")
    await wait_for((work / f"{killed}.daemon").exists, 15, "the second daemon to be in place")
    daemon = watch(read_pids(work / f"{killed}.daemon"))
    a.send(signal.SIGKILL)
    assert a.wait(5) == -signal.SIGKILL
    # The keeper kills the run's cgroup: the daemon has no marker and left the session.
    await wait_gone(daemon, 5, "the escaped daemon of the SIGKILLed supervisor")


async def _daemon_in_place(cluster: Cluster, store: Store, tmp_path: Path) -> tuple[Any, int, Any]:
    """A supervisor with a cgroup per run, and a run whose handler left a daemon behind
    (setsid, no marker, SIGTERM ignored): (the supervisor, the run, the daemon's watch)."""
    work = tmp_path / "work"
    work.mkdir()
    a = await cluster.start_ready("a", ["hostile"], settings={"hostile": "cgroup = true"})
    payload = {"mode": "daemon", "dir": str(work), "linger": 60}
    [run_id] = await create_runs(store, "hostile", 1, payload)
    await wait_for((work / f"{run_id}.daemon").exists, 15, "the daemon to be in place")
    return a, run_id, watch(read_pids(work / f"{run_id}.daemon"))


async def test_a_frozen_supervisors_keeper_kills_the_cgroup_when_the_lease_is_lost(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    a, _, daemon = await _daemon_in_place(cluster, store, tmp_path)
    a.send(signal.SIGSTOP)  # no renewals: the keeper's kill-by deadline (about the lease)
    await wait_gone(daemon, 10, "the escaped daemon once the lease was lost")
    assert a.frozen()
    a.send(signal.SIGCONT)


async def test_cancel_of_a_running_run_kills_its_escaped_daemon(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    a, run_id, daemon = await _daemon_in_place(cluster, store, tmp_path)
    await runs.cancel_run(store, run_id)  # what POST /v1/runs/{id}/cancel does
    # The supervisor's next renewal fails; it kills the run's cgroup.
    await wait_gone(daemon, 10, "the escaped daemon of the cancelled run")
    assert await status_is(store, run_id, "cancelled")
    assert a.stop() == 0, a.tail()
