"""Database faults: connections killed under load, and a database that stays unreachable."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from supervisor.core.store import Store

from ..factory import count
from ..helpers import wait_for
from .procs import LEASE_TTL, Cluster, Supervisor, read_pids, wait_gone, watch
from .proxy import CuttableProxy
from .scenario import all_attempts, all_in, create_runs, read_lines, runs, statuses


async def _terminate_all(admin: asyncpg.Connection, dbname: str) -> int:
    killed = await admin.fetchval(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = $1 AND pid <> pg_backend_pid()",
        dbname,
    )
    return int(killed)


async def test_terminated_connections_lose_and_double_nothing(
    cluster: Cluster, store: Store, tmp_path: Path, admin_dsn: str, dsn: str
) -> None:
    # What is under test is lost replies (claims, completions, renewals) and reconnection,
    # not an outage: the storm is shorter than a lease, so even a host too starved to get a
    # renewal through until the storm ends keeps its leases. With a 2 s lease a slow CI
    # host lost leases mid-storm and a run that had finished ran again, as designed for an
    # outage longer than a lease (test_unreachable_database_fences_children_...).
    storm = 4.0
    sups = [
        cluster.start(w, ["append"], concurrency=10, lease_ttl=2 * storm)
        for w in ("s1", "s2", "s3")
    ]
    for s in sups:
        await s.wait_event("supervisor_started", timeout=20)
    out = tmp_path / "out.csv"
    ids = await create_runs(store, "append", 100, {"out": str(out), "sleep": 0.8})
    await wait_for(lambda: _running(store), 10, "runs in flight")

    dbname = urlsplit(dsn).path.lstrip("/")
    admin = await asyncpg.connect(admin_dsn)
    rounds: list[int] = []
    try:
        storm_end = time.monotonic() + storm
        while time.monotonic() < storm_end:
            rounds.append(await _terminate_all(admin, dbname))
            await asyncio.sleep(0.3)  # the storm's cadence, not a synchronisation
    finally:
        await admin.close()
    assert sum(rounds) > len(rounds), f"the storm hit the supervisors: {rounds}"

    # Our own pool lost its connections too; asyncpg replaces them on acquire.
    await wait_for(lambda: all_in(store, ids, "succeeded"), 40, "all 100 runs to succeed")
    lines = read_lines(out)
    executed = Counter(line["run_id"] for line in lines)
    assert sorted(executed) == sorted(ids)
    history = await all_attempts(store, ids)
    doubled = [r for r, n in executed.items() if n > 1]
    assert doubled == [], _explain(doubled, lines, history, sups)
    assert await statuses(store, ids) == {"succeeded": 100}
    succeeded = Counter(a["run_id"] for a in history if a["outcome"] == "succeeded")
    assert succeeded == Counter(ids), "one recorded success per run"
    # No lease ran out: a claim whose reply was lost gives its runs back unstarted
    # ("interrupted", not charged) instead of leaving them to the reaper ("lease_lost").
    assert {a["outcome"] for a in history} <= {"succeeded", "interrupted"}
    for s in sups:
        assert s.running, f"{s.worker_id} exited:\n{s.tail()}"
        # A completion whose reply was lost is retried and recognised, not called late.
        assert s.events("run_late_result_rejected") == [], s.worker_id
    # Reconnected, not just alive: a fresh batch still gets done.
    more = await create_runs(store, "append", 10, {"out": str(out)}, prefix="after")
    await wait_for(lambda: all_in(store, more, "succeeded"), 20, "runs after the storm")
    for s in sups:
        assert s.stop() == 0, s.tail()


def _explain(
    doubled: list[int], lines: list[dict[str, int]], history: list[Any], sups: list[Supervisor]
) -> str:
    """What a failure needs: each doubled run's executions, attempts and supervisors' events."""
    events = {s.worker_id: s.events() for s in sups}  # each log parsed once
    out = [f"runs executed twice: {doubled}"]
    for r in doubled[:3]:
        out.append(f"run {r} executions: {[x for x in lines if x['run_id'] == r]}")
        out.append(f"run {r} attempts: {[dict(a) for a in history if a['run_id'] == r]}")
        for worker, evs in events.items():
            out += [f"  {worker}: {e}" for e in evs if e.get("run_id") == r]
    for worker, evs in events.items():
        out.append(f"{worker} events: {dict(Counter(str(e.get('event')) for e in evs))}")
    return "\n".join(out)


async def _running(store: Store) -> bool:
    return await count(store, "runs", "status = 'running'") >= 20


async def test_unreachable_database_fences_children_before_their_leases_expire(
    cluster: Cluster, store: Store, tmp_path: Path, dsn: str
) -> None:
    parts = urlsplit(dsn)
    proxy = CuttableProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    port = proxy.start()
    try:
        await _fence_while_partitioned(cluster, store, tmp_path, dsn, port, proxy)
    finally:
        proxy.close()


async def _fence_while_partitioned(
    cluster: Cluster, store: Store, tmp_path: Path, dsn: str, port: int, proxy: CuttableProxy
) -> None:
    parts = urlsplit(dsn)
    # Keep the credentials: a local throwaway cluster has a password.
    userinfo = parts.netloc.rpartition("@")[0]
    via_proxy = urlunsplit(parts._replace(netloc=f"{userinfo}@127.0.0.1:{port}"))
    a = await cluster.start_ready("a", ["sleeper"], dsn=via_proxy)
    work = tmp_path / "work"
    work.mkdir()
    # The children ignore SIGTERM: only the SIGKILL at the end of the fence's grace ends them.
    payload = {"dir": str(work), "seconds": {"1": 60, "2": 0.3}, "ignore_term": True}
    ids = await create_runs(store, "sleeper", 2, payload)
    ready = [work / f"{r}-1.pids" for r in ids]
    await wait_for(lambda: all(p.exists() for p in ready), 15, "both children to start")
    children = watch(pid for p in ready for pid in read_pids(p))

    proxy.cut()
    cut_at = time.monotonic()
    dead_ns = await wait_gone(children, 2 * LEASE_TTL, "children of the cut-off supervisor")
    # The test reaches the database directly: the leases it holds are the last ones a
    # renewal got through, and they must still be running when the children are dead.
    leases = await runs(store, ids)
    for run_id in ids:
        row = leases[run_id]
        assert (row["status"], row["lease_owner"]) == ("running", "a")
        margin = row["lease_expires_at"].timestamp() - dead_ns / 1e9
        assert margin > 0, f"run {run_id}: child outlived its lease by {-margin:.3f}s"
        assert a.events("run_self_fenced", run_id=run_id), a.tail()
    assert a.running

    # Stay unreachable well past the leases' expiry (database clock), then heal.
    latest = max(r["lease_expires_at"] for r in leases.values())
    await wait_for(
        lambda: _db_past(store, latest, 0.5), 10, "the leases to expire on the database clock"
    )
    assert time.monotonic() - cut_at > LEASE_TTL
    proxy.restore()

    # The same supervisor reconnects, reaps its own expired runs and runs them again.
    await wait_for(lambda: all_in(store, ids, "succeeded"), 30, "a to recover and rerun")
    history = await all_attempts(store, ids)
    assert [(h["attempt"], h["worker_id"], h["outcome"]) for h in history] == [
        (1, "a", "lease_lost"),
        (2, "a", "succeeded"),
    ] * 2
    for run_id in ids:
        # The fenced attempt's own result reached the database only after the lease was gone.
        assert a.events("run_late_result_rejected", run_id=run_id, attempt=1), a.tail()
    assert a.running
    a.send(signal.SIGTERM)
    # Polling, not blocking: the proxy thread and this loop keep serving meanwhile.
    assert await a.wait_exit(15) == 0, a.tail()


async def _db_past(store: Store, ts: datetime, seconds: float) -> bool:
    return await store.now() > ts + timedelta(seconds=seconds)
