"""A database failover: a primary and a streaming standby (throwaway clusters on loopback),
three supervisors and the API on the multi-host URL, the standby promoted mid-run.

The switch, as an unplanned failover goes: promote the standby while the old primary is still
up and reachable (the supervisors keep writing there), fence the old primary read-only
(25006 for its sessions), then stop it (57P01). With synchronous replication the old primary
cannot acknowledge a commit after the promotion, so no run is lost, doubled or overlapping.
PUNCHCLOCK_FAILOVER_ASYNC=1 runs the same switch on asynchronous replication and prints what
the old primary acknowledged that the new one never saw, and what punchclock then did
(deploy/README.md, High availability, records the figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from supervisor.core import jobs
from supervisor.core.db import connect, create_pool
from supervisor.core.migrator import migrate
from supervisor.core.store import Store
from supervisor.local.pgserver import SUPERUSER, LocalPostgres

from ..api_support import ADMIN
from ..factory import job_runs
from ..helpers import job, wait_for
from .procs import Cluster, Supervisor, free_port
from .scenario import LIMITS, all_attempts, all_in, create_runs, read_lines

ASYNC = os.environ.get("PUNCHCLOCK_FAILOVER_ASYNC") == "1"
# Long against the switch (a few seconds): no lease may run out while the database moves.
LEASE_TTL = 10.0
WORKERS = ("s1", "s2", "s3")
WINDOW = 2.0  # seconds the old primary stays up and reachable after the promotion
STANDBY = "standby"  # the standby's application_name (pgserver: its data dir's name)


@pytest.fixture
def servers(request: pytest.FixtureRequest) -> Iterator[tuple[LocalPostgres, LocalPostgres]]:
    """(primary, standby), both running; synchronous unless the test asks for "async"."""
    sync = getattr(request, "param", "sync") == "sync"
    # Short paths: each cluster keeps its unix socket in its data dir.
    tmp = tempfile.mkdtemp(prefix="pcf-", dir="/tmp")
    os.chmod(tmp, 0o755)  # the clusters may run as the `postgres` user (we may be root)
    settings = {"synchronous_commit": "on", "wal_sender_timeout": "5s"}
    primary = LocalPostgres(
        Path(tmp) / "primary",
        persistent=False,
        settings={**settings, "synchronous_standby_names": STANDBY if sync else ""},
    )
    standby: LocalPostgres | None = None
    try:
        primary.start()
        standby = primary.make_standby(Path(tmp) / STANDBY, settings=settings)
        standby.start()
        yield primary, standby
    finally:
        for server in (standby, primary):
            if server is not None:
                server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def multi_host(first: LocalPostgres, second: LocalPostgres) -> str:
    password = first.dsn.split(":")[2].split("@")[0]
    hosts = f"127.0.0.1:{first.port},127.0.0.1:{second.port}"
    return f"postgresql://{SUPERUSER}:{password}@{hosts}/punchclock?target_session_attrs=read-write"


async def test_failover_to_a_synchronous_standby_loses_and_doubles_nothing(
    servers: tuple[LocalPostgres, LocalPostgres], tmp_path: Path
) -> None:
    primary, standby = servers
    f = await _switch(primary, standby, tmp_path)
    print("FAILOVER_FIGURES sync", json.dumps(f.figures))
    # The old primary held back every commit after the promotion: nothing acknowledged there
    # is missing here.
    assert f.figures["sync_waiters_on_old_primary"] > 0
    assert (f.figures["claims_lost"], f.figures["completions_lost"]) == (0, 0)
    executed = Counter(line["run_id"] for line in f.lines)
    assert sorted(executed) == sorted(f.run_ids), "every run executed"
    assert [r for r, n in executed.items() if n > 1] == [], "no run executed twice"
    # One claim, one execution, one recorded success per run; no lease ran out.
    assert [(a["attempt"], a["outcome"]) for a in f.history] == [(1, "succeeded")] * len(f.run_ids)
    tokens = {a["run_id"]: a["lease_token"] for a in f.history}
    assert all(line["lease_token"] == tokens[line["run_id"]] for line in f.lines)
    assert f.figures["cron_instants_missing"] == 0
    assert f.figures["cron_runs_not_run_once"] == 0
    for s in f.supervisors:
        for bad in ("run_lease_lost", "run_self_fenced", "run_late_result_rejected"):
            assert s.events(bad) == [], f"{s.worker_id}: {bad}\n{s.tail()}"


@pytest.mark.skipif(not ASYNC, reason="a measurement: PUNCHCLOCK_FAILOVER_ASYNC=1")
@pytest.mark.parametrize("servers", ["async"], indirect=True)
async def test_failover_to_an_asynchronous_standby_reruns_what_it_lost(
    servers: tuple[LocalPostgres, LocalPostgres], tmp_path: Path
) -> None:
    primary, standby = servers
    f = await _switch(primary, standby, tmp_path)
    executed = Counter(line["run_id"] for line in f.lines)
    doubled = sorted(r for r, n in executed.items() if n > 1)
    f.figures.update(
        runs_executed_twice=len(doubled),
        overlapping_executions=_overlaps(f.lines)[0],
        longest_overlap_s=_overlaps(f.lines)[1],
        runs_with_a_second_attempt=len({a["run_id"] for a in f.history if a["attempt"] > 1}),
    )
    print("FAILOVER_FIGURES async", json.dumps(f.figures))
    # What was lost runs again: every run ends succeeded, exactly one success recorded.
    assert sorted(executed) == sorted(f.run_ids)
    assert Counter(a["run_id"] for a in f.history if a["outcome"] == "succeeded") == Counter(
        f.run_ids
    )


class Outcome:
    def __init__(self) -> None:
        self.figures: dict[str, Any] = {}
        self.run_ids: list[int] = []
        self.lines: list[dict[str, int]] = []
        self.history: list[asyncpg.Record] = []
        self.supervisors: list[Supervisor] = []


async def _switch(primary: LocalPostgres, standby: LocalPostgres, tmp_path: Path) -> Outcome:
    conn = await connect(primary.dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    url = multi_host(primary, standby)  # the old primary first, as users list it
    pool = await create_pool(url, min_size=1, max_size=4)  # the test's own, same code
    cluster = Cluster(tmp_path, url)
    try:
        return await _run(Store(pool), cluster, primary, standby, tmp_path)
    finally:
        cluster.stop_all()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pool.close(), 10)


async def _run(
    store: Store, cluster: Cluster, primary: LocalPostgres, standby: LocalPostgres, tmp: Path
) -> Outcome:
    f = Outcome()
    sups = [
        cluster.start(w, ["append"], concurrency=8, lease_ttl=LEASE_TTL, drain_timeout=10)
        for w in WORKERS
    ]
    api_port = free_port()
    api = cluster.start_api(api_port)
    for s in [*sups, api]:
        await s.wait_event("api_listening" if s is api else "supervisor_started", timeout=30)
    out, cron_out = tmp / "out.csv", tmp / "cron.csv"
    cron = await jobs.create_job(
        store, job("tick", "append", cron="* * * * * *", payload={"out": str(cron_out)}), LIMITS
    )
    ids = await create_runs(store, "append", 60, {"out": str(out), "sleep": 1.5})
    # Mid-run: some results recorded, many children running.
    await wait_for(lambda: len(read_lines(out)) >= 10, 30, "the first results")

    parked = await jobs.create_job(
        store,
        job("parked", "append", cron=None, run_at=datetime.now(UTC) + timedelta(days=1)),
        LIMITS,
    )
    probe_stop = asyncio.Event()
    probe = asyncio.create_task(_probe_api(f"http://127.0.0.1:{api_port}", parked.id, probe_stop))
    old = await asyncpg.connect(primary.dsn)  # the old primary, directly
    try:
        promoted_at = time.time()
        await asyncio.to_thread(standby.promote)
        # The supervisors still write to the old primary, for as long as a failure detector
        # might take. Synchronous: its commits wait for a standby that is gone. Asynchronous:
        # it acknowledges them, and the new primary never sees them.
        await asyncio.sleep(WINDOW)  # the fault's duration, not a synchronisation
        row = await old.fetchrow(
            "SELECT (SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep')::int,"
            " (SELECT count(*) FROM run_attempts WHERE finished_at > to_timestamp($1))::int",
            promoted_at,
        )
        assert row is not None
        f.figures["sync_waiters_on_old_primary"] = row[0]
        f.figures["old_primary_completions_after_promotion"] = row[1]
        # Fence it, as a switchover tool does: its sessions now get 25006.
        await old.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        await old.fetchval("SELECT pg_reload_conf()")
        fenced_at = time.time()

        def read_only_seen() -> bool:
            return any(s.events("db_read_only") for s in sups)

        await wait_for(read_only_seen, 15, "a supervisor to drop a read-only connection")
    finally:
        await old.close()
    await asyncio.to_thread(primary.stop)  # 57P01 for every session left there
    stopped_at = time.time()

    api_ids = await _create_via_api(f"http://127.0.0.1:{api_port}", out, 10)
    f.run_ids = ids + api_ids
    await wait_for(lambda: all_in(store, f.run_ids, "succeeded"), 60, "every run to succeed")
    cron_until = datetime.fromtimestamp(stopped_at + 3, UTC)
    await wait_for(lambda: _cron_done(store, cron.id, cron_until), 30, "cron to catch up")
    probe_stop.set()  # the probe ends after its request in flight (cancelling could cut it)
    api_statuses = await probe
    # The API serves reads and writes again on the new primary.
    assert [s for _, s in api_statuses[-10:]] == [200] * 10, api_statuses[-10:]

    # LISTEN re-armed on the new primary by every supervisor; all of them still serve.
    for s in sups:
        assert s.running, s.tail()
        assert s.events("listener_connected", port=standby.port), s.tail()
    assert api.running, api.tail()
    f.supervisors = sups
    f.lines = read_lines(out)
    f.history = list(await all_attempts(store, f.run_ids))
    everything = await all_attempts(store)  # the runs the cron job planned too
    f.figures.update(_lost(sups, everything))
    finished = sorted(a["finished_at"].timestamp() for a in f.history if a["finished_at"])
    f.figures.update(
        runs=len(f.run_ids),
        fence_to_first_completion_s=_first_after(finished, fenced_at),
        stop_to_first_completion_s=_first_after(finished, stopped_at),
        longest_completion_gap_s=round(max(b - a for a, b in itertools.pairwise(finished)), 3),
        api_non_2xx=dict(Counter(s for _, s in api_statuses if s >= 300 or s < 200)),
        api_longest_wait_s=_longest_wait(api_statuses),
        **await _cron_figures(store, cron.id, cron_out, cron_until),
    )
    return f


def _lost(sups: list[Supervisor], history: list[asyncpg.Record]) -> dict[str, int]:
    """Claims and completions the supervisors were told of (run_started, run_succeeded)
    that the new primary lacks: what the old primary acknowledged and took with it."""
    started = Counter(
        (e["run_id"], e["attempt"], e["worker_id"]) for s in sups for e in s.events("run_started")
    )
    succeeded = Counter(
        (e["run_id"], e["attempt"], e["worker_id"]) for s in sups for e in s.events("run_succeeded")
    )
    rows = Counter((a["run_id"], a["attempt"], a["worker_id"]) for a in history)
    done = Counter(
        (a["run_id"], a["attempt"], a["worker_id"]) for a in history if a["outcome"] == "succeeded"
    )
    return {
        "claims_lost": sum((started - rows).values()),
        "completions_lost": sum((succeeded - done).values()),
    }


async def _probe_api(base: str, job_id: int, stop: asyncio.Event) -> list[tuple[float, int]]:
    """A read (GET /v1/runs) and a write (PATCH a parked job) every 50 ms until `stop`:
    (time, status; 0 when no answer)."""
    seen: list[tuple[float, int]] = []
    timeout = aiohttp.ClientTimeout(total=5)
    auth = {"Authorization": f"Bearer {ADMIN}"}
    async with aiohttp.ClientSession(timeout=timeout, headers=auth) as http:
        for n in itertools.count():
            if stop.is_set():
                break
            try:
                if n % 2:
                    request = http.patch(f"{base}/v1/jobs/{job_id}", json={"payload": {"n": n}})
                else:
                    request = http.get(f"{base}/v1/runs?limit=1")
                async with request as resp:
                    await resp.read()
                    seen.append((time.time(), resp.status))
            except (aiohttp.ClientError, TimeoutError):
                seen.append((time.time(), 0))
            with contextlib.suppress(TimeoutError):  # the probe's cadence, or `stop`
                await asyncio.wait_for(stop.wait(), 0.05)
    return seen


async def _create_via_api(base: str, out: Path, n: int) -> list[int]:
    """n one-off jobs through the API, each retried until it answers (bounded)."""
    run_ids = []
    auth = {"Authorization": f"Bearer {ADMIN}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5), headers=auth) as http:
        for i in range(n):
            body = {
                "name": f"via-api-{i}",
                "type": "append",
                "run_at": (datetime.now(UTC) - timedelta(seconds=1)).isoformat(),
                "payload": {"out": str(out)},
            }

            async def created(body: dict[str, Any] = body) -> int | None:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.post(f"{base}/v1/jobs", json=body) as resp:
                        if resp.status == 201:
                            return int((await resp.json())["id"])
                return None

            job_id = await wait_for(created, 30, f"the API to create job {i}")
            async with http.get(f"{base}/v1/runs?job_id={job_id}") as resp:
                assert resp.status == 200, await resp.text()
                items = (await resp.json())["runs"]
            assert len(items) == 1, items
            run_ids.append(int(items[0]["id"]))
    return run_ids


async def _cron_done(store: Store, job_id: int, until: datetime) -> bool:
    rows = await job_runs(store, job_id, until)
    return bool(rows) and all(r["status"] == "succeeded" for r in rows)


async def _cron_figures(store: Store, job_id: int, out: Path, until: datetime) -> dict[str, int]:
    """Every planned second up to `until` is one run, and each ran exactly once."""
    rows = await job_runs(store, job_id, until)
    instants = [r["scheduled_at"] for r in rows]
    span = int((instants[-1] - instants[0]).total_seconds()) + 1
    executed = Counter(line["run_id"] for line in read_lines(out))
    return {
        "cron_instants": len(instants),
        "cron_instants_missing": span - len(set(instants)),
        "cron_runs_not_run_once": sum(1 for r in rows if executed[r["id"]] != 1),
    }


def _first_after(stamps: list[float], since: float) -> float | None:
    later = [t for t in stamps if t > since]
    return round(later[0] - since, 3) if later else None


def _longest_wait(statuses: list[tuple[float, int]]) -> float:
    """The longest time between two successive 2xx answers."""
    ok = [t for t, s in statuses if 200 <= s < 300]
    return round(max(b - a for a, b in itertools.pairwise(ok)), 3) if len(ok) > 1 else 0.0


def _overlaps(lines: list[dict[str, int]]) -> tuple[int, float]:
    """Pairs of completed executions of one run whose spans intersect, and the longest
    intersection (seconds)."""
    by_run: dict[int, list[tuple[int, int]]] = {}
    for line in lines:
        by_run.setdefault(line["run_id"], []).append((line["start_ns"], line["end_ns"]))
    overlaps = []
    for spans in by_run.values():
        spans.sort()
        overlaps += [min(a[1], b[1]) - b[0] for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    return len(overlaps), round(max(overlaps, default=0) / 1e9, 3)
