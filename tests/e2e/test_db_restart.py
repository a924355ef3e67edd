"""PostgreSQL restarted (`pg_ctl restart -m fast`, `-m immediate`) and stopped for longer
than the lease, under two supervisors running children, on a throwaway cluster of the
test's own (never the shared server).

Judged against the handlers' own stamps and a pid monitor, not the code under test: every
run ends succeeded, no two executions of a run overlap, no completed execution is recorded
as anything but succeeded or lease_lost, the supervisors survive (same process, started
once) and their /readyz is ready again once the database is back.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from supervisor.core.db import DB_ERRORS, create_pool
from supervisor.core.store import Store

from ..helpers import wait_for
from .procs import (
    Cluster,
    PidMonitor,
    Supervisor,
    ThrowawayPostgres,
    free_port,
    readyz,
    scrape,
)
from .scenario import all_attempts, all_in, create_runs, execution_problems, statuses, tolerant

LEASE_TTL = 2.5
OUTAGE = 10.0  # seconds the database stays stopped: 4 leases, and every retry reaches its cap
RUNS = 24  # three rounds of the eight slots, so a backlog waits through the fault
WORK = 1.2  # each handler's seconds: children end during the outage, before any fence

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("fault", ["fast", "immediate", "outage"])
async def test_database_restart_loses_doubles_and_misrecords_nothing(
    fault: str, pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path, pg.dsn)
    pool = await create_pool(pg.dsn, min_size=1, max_size=4)
    store = Store(pool)
    work = tmp_path / "work"
    work.mkdir()
    monitor = PidMonitor(work / "stamps.csv")
    try:
        await _scenario(fault, pg, cluster, store, monitor, work)
    finally:
        cluster.stop_all()
        await monitor.stop()
        pool.terminate()


async def _scenario(
    fault: str,
    pg: ThrowawayPostgres,
    cluster: Cluster,
    store: Store,
    monitor: PidMonitor,
    work: Path,
) -> None:
    ports = {w: free_port() for w in ("a", "b")}
    sups = [
        cluster.start(w, ["stamp"], concurrency=4, lease_ttl=LEASE_TTL, metrics_port=p)
        for w, p in ports.items()
    ]
    for s in sups:
        await s.wait_event("supervisor_started", timeout=20)
    pids = [s.pid for s in sups]
    await _wait_ready(ports.values(), 20, "/readyz before the fault")
    monitor.start()
    payload = {"dir": str(work), "sleep": WORK}
    ids = await create_runs(store, "stamp", RUNS, payload, max_attempts=10)
    await wait_for(lambda: len(monitor.alive()) >= 6, 20, "children running on both hosts")
    in_flight = {e.key for e in monitor.alive()}

    if fault == "outage":
        await asyncio.to_thread(pg.stop, "fast")
        stopped_ns, stopped = time.time_ns(), time.monotonic()
        await wait_for(
            lambda: _all_unready(ports.values()), 10, "/readyz to say unready while it is down"
        )
        # The outage lasts OUTAGE seconds (the fault), and must outlast every child that
        # was running when it began: each ends by itself or is fenced, never lingers.
        await wait_for(
            lambda: (
                time.monotonic() - stopped >= OUTAGE
                and not in_flight & {e.key for e in monitor.alive()}
            ),
            OUTAGE + 10,
            f"the outage to pass and its children to end: {monitor.alive()}",
        )
        # Come back right after every heartbeat's retry failed: the reap duty lapsed with
        # the beats, so a reaper reaches the database only after its host's next beat takes
        # it back; meanwhile completers and claimers do, the window in which a lost-reply
        # recovery could misfile a run whose late result was just rejected, before a reaper
        # records it as lease_lost.
        failed = {s.worker_id: len(_beat_errors(s)) for s in sups}
        await wait_for(
            lambda: all(len(_beat_errors(s)) > failed[s.worker_id] for s in sups),
            15,
            "every heartbeat to fail a retry",
        )
        await asyncio.to_thread(pg.start_again)
        back_ns = time.time_ns()
    else:
        await asyncio.to_thread(pg.restart, fault)

    await wait_for(lambda: _tolerant(all_in(store, ids, "succeeded")), 60, "every run to succeed")
    await _wait_ready(ports.values(), 30, "/readyz after the database is back")
    await monitor.stop()
    history = await tolerant(lambda: all_attempts(store, ids), 20)
    logs = "\n".join(f"--- {s.worker_id}\n{s.tail(15)}" for s in sups)
    problems = execution_problems(list(monitor.executions.values()), history, monitor.alive_until)
    assert not problems, "\n".join(problems) + f"\nattempts: {_summary(history)}\n{logs}"
    assert await statuses(store, ids) == {"succeeded": RUNS}
    succeeded = Counter(a["run_id"] for a in history if a["outcome"] == "succeeded")
    assert succeeded == Counter(ids), "one recorded success per run"
    assert all(s.running for s in sups), logs
    assert [s.pid for s in sups] == pids
    for s in sups:
        assert len(s.events("supervisor_started")) == 1, f"{s.worker_id} started once"
        seen = s.events("listener_lost") + s.events("db_error")
        assert seen, f"{s.worker_id} saw the fault:\n{s.tail()}"

    if fault == "outage":
        # The case that matters: a handler that completed while the database was down,
        # after its lease could still be renewed. Its result comes back late (the lease
        # expired on the database clock): lease_lost, never "given back unstarted".
        ended = [e for e in monitor.executions.values() if stopped_ns < (e.end_ns or 0) < back_ns]
        assert ended, "some handler completed during the outage"
        outcome = {(a["run_id"], a["attempt"]): a["outcome"] for a in history}
        assert {outcome[e.run_id, e.attempt] for e in ended} == {"lease_lost"}, _summary(history)
        rejected = [r for s in sups for r in s.events("run_late_result_rejected")]
        assert len(rejected) >= len(ended), logs
        # Those results met a dead database first: each failed write is a completer
        # db_error line and counts in punchclock_db_errors, as every service's errors do.
        logged = {s.worker_id: len(s.events("db_error", service="completer")) for s in sups}
        assert sum(logged.values()) >= 1, logs
        for s in sups:
            metrics = await asyncio.to_thread(scrape, ports[s.worker_id])
            [counted] = [
                v
                for k, v in metrics.items()
                if k.startswith("punchclock_db_errors_total{") and 'service="completer"' in k
            ]
            assert counted >= logged[s.worker_id], (s.worker_id, counted, logged)

    for s in sups:
        assert s.stop() == 0, s.tail()


def _beat_errors(s: Supervisor) -> list[dict[str, Any]]:
    return s.events("db_error", service="heartbeater")


def _summary(history: list[asyncpg.Record]) -> str:
    return str(Counter((a["outcome"], a["error"]) for a in history))


async def _tolerant(check: Awaitable[bool]) -> bool:
    """A check through a pool whose connections the fault may have killed: False, not raise."""
    try:
        return await check
    except DB_ERRORS:
        return False


async def _status(port: int) -> int:
    return await asyncio.to_thread(readyz, port)


async def _all_unready(ports: Iterable[int]) -> bool:
    return all([await _status(p) != 200 for p in ports])


async def _wait_ready(ports: Iterable[int], timeout: float, what: str) -> None:
    async def ready() -> bool:
        return all([await _status(p) == 200 for p in ports])

    await wait_for(ready, timeout, what)
