"""/readyz tells anyone a status and a one-word reason, token holders the details, and a
flood of it costs the database one computation a second (issue 62, item 7)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import asyncpg
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from api.observe import observability_routes
from supervisor.core.health import SharedReadiness, beat_readiness, readiness
from supervisor.core.metrics import Metrics
from supervisor.core.store import Store

from ..api_support import READER, TOKENS
from ..factory import due_run, set_run
from ..helpers import wait_for

SECRET_USER = "readyz_secret_user"


@asynccontextmanager
async def served(
    pool: Any, ready: SharedReadiness | None = None
) -> AsyncIterator[TestClient[Any, Any]]:
    app = web.Application()
    app.add_routes(observability_routes(pool, 60.0, Metrics("api"), TOKENS, ready=ready))
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client


async def _get(client: TestClient[Any, Any], token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with client.get("/readyz", headers=headers) as resp:
        return resp.status, await resp.text()


async def test_a_late_run_is_503_without_its_job_to_anonymous_callers(
    store: Store, pool: asyncpg.Pool
) -> None:
    run_id = await due_run(store, "payroll-export-secret", type="billing_secret_type")
    await set_run(store, run_id, run_after=await store.now() - timedelta(minutes=2))
    async with served(pool) as client:
        status, text = await _get(client)
        assert status == 503
        assert json.loads(text) == {"status": "unready", "reason": "late_runs"}
        for secret in ("payroll-export-secret", "billing_secret_type", str(run_id)):
            assert secret not in text
        status, text = await _get(client, READER)  # any valid token sees the details
        assert status == 503
        [late] = json.loads(text)["late_runs"]
        assert (late["job_name"], late["type"]) == ("payroll-export-secret", "billing_secret_type")
        status, text = await _get(client, "not-a-configured-token-at-all")
        assert status == 401 and "payroll" not in text


async def test_a_database_that_refuses_names_no_host_port_or_user(
    dsn: str, unused_tcp_port: int
) -> None:
    # Nothing listens on this port; and on the real server, a role that does not exist.
    refused = f"postgresql://{SECRET_USER}@127.0.0.1:{unused_tcp_port}/punchclock"
    unknown_role = dsn.replace("postgresql://postgres@", f"postgresql://{SECRET_USER}@")
    assert unknown_role != dsn
    for url in (refused, unknown_role):
        pool = await asyncpg.create_pool(url, min_size=0, max_size=1)
        try:
            async with served(pool) as client:
                status, text = await _get(client)
                assert status == 503
                assert json.loads(text) == {"status": "unready", "reason": "database"}
                status, detailed = await _get(client, READER)
        finally:
            await pool.close()
        host, port = "127.0.0.1", url.rsplit(":", 1)[1].split("/")[0]
        for secret in (SECRET_USER, host, port):
            assert secret not in text
            assert secret not in detailed, "token holders get the kind, the log the text"
        assert json.loads(detailed)["reason"] == "database"


async def test_a_flood_of_readyz_computes_it_at_most_twice(pool: asyncpg.Pool) -> None:
    ready = SharedReadiness(lambda: readiness(pool, 60.0), ttl=3600.0)
    async with served(pool, ready) as client:
        answers = await asyncio.gather(*(_get(client) for _ in range(50)))
    assert {a for a in answers} == {(200, '{"status": "ready"}\n')}
    assert ready.computed <= 2, f"{ready.computed} computations for 50 requests"


async def test_one_computation_in_flight_is_shared_and_the_next_comes_after_the_ttl() -> None:
    gate, calls = asyncio.Event(), []

    async def compute() -> tuple[bool, dict[str, Any]]:
        calls.append(1)
        await gate.wait()
        return True, {"status": "ready"}

    now = [0.0]
    ready = SharedReadiness(compute, ttl=1.0, clock=lambda: now[0])
    waiting = [asyncio.ensure_future(ready.get()) for _ in range(20)]
    await wait_for(lambda: len(calls) == 1, 5, "the first computation to start")
    gate.set()
    results = await asyncio.gather(*waiting)
    assert all(r == (True, {"status": "ready"}) for r in results) and len(calls) == 1
    now[0] = 0.5
    await ready.get()
    assert len(calls) == 1, "within the ttl: the cached answer"
    now[0] = 1.5
    await ready.get()
    assert len(calls) == 2


def test_the_side_door_answers_from_the_last_beat() -> None:
    assert beat_readiness(None, 30.0)[1]["reason"] == "starting"
    assert beat_readiness(1.0, 30.0) == (True, {"status": "ready", "last_beat_seconds": 1.0})
    ok, body = beat_readiness(31.0, 30.0)
    assert not ok and body["reason"] == "database"
