"""Observability: metrics equal what happened, /readyz notices late runs, one log line per event."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from api.observe import observability_routes
from supervisor.core.metrics import Metrics
from supervisor.core.store import Store

from ..api_support import READER, TOKENS
from ..factory import count, run_row, set_run
from ..helpers import wait_for
from .procs import Cluster, free_port
from .scenario import all_in, create_runs, status_is


async def scrape(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        return await resp.text()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample whose labels include `labels` (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture
async def api_url(pool: asyncpg.Pool) -> AsyncIterator[str]:
    """The API's observability routes, served in-process on a free port."""
    app = web.Application()
    app.add_routes(observability_routes(pool, 1.0, Metrics("api"), TOKENS))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_metrics_and_logs_equal_what_happened(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    port = free_port()
    sup = await cluster.start_ready(
        "obs",
        {"append": "append", "fail": "fail", "sleeper": "sleeper"},
        concurrency=8,
        extra_args=["--metrics-listen", f"127.0.0.1:{port}"],
    )
    out = tmp_path / "out.csv"
    ok = await create_runs(store, "append", 3, {"out": str(out)}, prefix="ok")
    dead = await create_runs(
        store,
        "fail",
        1,
        {},
        prefix="bad",
        max_attempts=2,
        retry_base_seconds=0.1,
        retry_cap_seconds=0.2,
    )
    sleep = {"dir": str(tmp_path), "seconds": 30}
    slow = await create_runs(
        store, "sleeper", 1, sleep, prefix="slow", timeout_seconds=1, max_attempts=1
    )
    await wait_for(lambda: all_in(store, ok, "succeeded"), 30, "successes")
    await wait_for(lambda: all_in(store, dead, "dead"), 30, "the dead run")
    await wait_for(lambda: all_in(store, slow, "dead"), 30, "the timeout")

    # A late result: revoke a running run's lease behind the supervisor's back.
    # max_attempts=1: when its orphaned lease expires the reaper makes it dead, not a rerun.
    late = await create_runs(store, "sleeper", 1, sleep, prefix="late", max_attempts=1)
    await wait_for(lambda: status_is(store, late[0], "running"), 30, "the late run to start")
    row = await run_row(store, late[0])
    assert row is not None
    await set_run(store, late[0], lease_token=row["lease_token"] + 100)
    await sup.wait_event("run_late_result_rejected", timeout=20, run_id=late[0])

    text = await scrape(f"http://127.0.0.1:{port}/metrics")
    assert sample(text, "punchclock_attempts_total", outcome="succeeded") == 3
    assert sample(text, "punchclock_attempts_total", outcome="failed") == 2
    assert sample(text, "punchclock_attempts_total", outcome="timed_out") == 1
    assert sample(text, "punchclock_attempts_total", outcome="rejected_late") == 1
    assert sample(text, "punchclock_runs_dead_total", job="bad-0") == 1
    assert sample(text, "punchclock_runs_dead_total", job="slow-0") == 1
    started = 3 + 2 + 1 + 1
    assert sample(text, "punchclock_queue_delay_seconds_count") == started
    assert sample(text, "punchclock_run_duration_seconds_count", type="append") == 3
    assert sample(text, "punchclock_lease_renewals_total") >= 1
    assert sample(text, "punchclock_claim_latency_seconds_count") >= 1
    assert sample(text, "punchclock_db_errors_total", service="claimer") == 0
    assert sample(text, "punchclock_running_children") <= 1
    # Per-process instruments only: database-wide gauges come from the API.
    assert "punchclock_runs{" not in text and "punchclock_due_runs_waiting" not in text

    # One structured line per event, with the fields an operator needs.
    for rec in sup.events("run_succeeded"):
        for key in ("run_id", "job_name", "worker_id", "attempt", "duration"):
            assert key in rec, rec
    starts = sup.events("run_started")
    assert len(starts) == started
    assert all("scheduled_at" in r and "queue_delay" in r and "pid" in r for r in starts)
    assert not sup.events("run_claimed"), "claims are logged at debug level only"
    assert len(sup.events("run_failed")) == 2
    assert len(sup.events("run_timed_out")) == 1
    assert len(sup.events("run_dead", run_id=dead[0])) == 1
    assert "stderr_tail" in sup.events("run_dead", run_id=dead[0])[0]
    assert sup.log_text().count('"payload"') == 0, "payloads are never logged"
    assert sup.stop() == 0


async def test_readyz_names_late_runs_until_a_supervisor_catches_up(
    cluster: Cluster, store: Store, api_url: str, tmp_path: Path
) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{api_url}/readyz") as resp:
            assert resp.status == 200
        ids = await create_runs(store, "append", 2, {"out": str(tmp_path / "o")}, prefix="late")
        # Age the due runs through data: they have waited two minutes with no supervisor.
        two_minutes_ago = await store.now() - timedelta(minutes=2)
        for run_id in ids:
            await set_run(store, run_id, run_after=two_minutes_ago)
        auth = {"Authorization": f"Bearer {READER}"}  # the details need a token

        async def unready() -> bool:  # readiness is cached for a second
            async with http.get(f"{api_url}/readyz", headers=auth) as resp:
                body.update(await resp.json())
                return resp.status == 503

        body: dict[str, Any] = {}
        await wait_for(unready, 10, "/readyz to turn 503")
        assert body["reason"] == "late_runs"
        late = {r["run_id"]: r for r in body["late_runs"]}
        assert set(late) == set(ids)
        assert all(
            r["late_seconds"] >= 119 and not r["type_offered_by_live_worker"] for r in late.values()
        )
        assert {r["job_name"] for r in late.values()} == {"late-0", "late-1"}

        await cluster.start_ready("catcher", ["append"])
        await wait_for(lambda: all_in(store, ids, "succeeded"), 30, "the supervisor to catch up")

        async def ready() -> bool:
            async with http.get(f"{api_url}/readyz") as r:
                return r.status == 200

        await wait_for(ready, 10, "/readyz to turn 200")


async def test_database_gauges_are_not_multiplied(
    cluster: Cluster, store: Store, api_url: str, tmp_path: Path
) -> None:
    ports = [free_port(), free_port()]
    for i, port in enumerate(ports):
        await cluster.start_ready(
            f"g{i}", ["append"], extra_args=["--metrics-listen", f"127.0.0.1:{port}"]
        )
    ids = await create_runs(store, "append", 4, {"out": str(tmp_path / "o")})
    await wait_for(lambda: all_in(store, ids, "succeeded"), 30, "runs to succeed")
    api_text = await scrape(f"{api_url}/metrics")
    succeeded = await count(store, "runs", "status = 'succeeded'")
    assert sample(api_text, "punchclock_runs", status="succeeded") == succeeded == 4
    assert sample(api_text, "punchclock_live_workers") == 2
    assert sample(api_text, "punchclock_unserved_jobs") == 0
    for port in ports:
        text = await scrape(f"http://127.0.0.1:{port}/metrics")
        assert sample(text, "punchclock_runs", status="succeeded") == 0
        assert "punchclock_live_workers" not in text
    # Per-process counters add up across supervisors to what happened, once each.
    total = 0.0
    for port in ports:
        text = await scrape(f"http://127.0.0.1:{port}/metrics")
        total += sample(text, "punchclock_attempts_total", outcome="succeeded")
    assert total == 4
