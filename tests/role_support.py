"""Shared by the role tests: one token per role, a world with one of everything (job with a
secret payload, a run of it, a channel, a group), and a fingerprint of every table a write
could touch, to assert that a refused request changed nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from api.app import create_app
from api.observe import observability_routes
from supervisor.core.config import Config
from supervisor.core.metrics import Metrics
from supervisor.core.store import Store

from .factory import finish_run, raw, sql_value

ROOT = "root-token-0123456789abcdef"
OPS = "ops-token-0123456789abcdef"
VIEWER = "viewer-token-0123456789abcdef"
ROLE_TOKENS = (f"admin:root:{ROOT}", f"operator:ops:{OPS}", f"read:viewer:{VIEWER}")
BEARER = {"admin": ROOT, "operator": OPS, "read": VIEWER}
NAMES = {"admin": "root", "operator": "ops", "read": "viewer"}
ROLES = ("read", "operator", "admin")
SECRET = "hunter2"
TABLES = ("jobs", "runs", "run_attempts", "channels", "job_subscriptions", "outbox",
          "concurrency_groups")  # fmt: skip


@asynccontextmanager
async def role_client(store: Store, **cfg: Any) -> AsyncIterator[TestClient[Any, Any]]:
    """The app as `punchclock api` serves it (with /metrics and the health routes), with a
    token of each role and no default Authorization header."""
    health = observability_routes(raw(store), 60.0, Metrics("api"), ROLE_TOKENS)  # type: ignore[arg-type]
    config = replace(Config(), api_tokens=ROLE_TOKENS, **cfg)
    app = create_app(config, store, extra_routes=health)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client


@dataclass
class World:
    job: int
    run: int
    channel: int
    group: str

    def path(self, pattern: str) -> str:
        """A concrete path for a route pattern of permissions.TABLE."""
        kind = "run" if "/runs/" in pattern else "channel" if "/channels/" in pattern else "job"
        ident = {"job": self.job, "run": self.run, "channel": self.channel}[kind]
        return (
            pattern.replace("{id}", str(ident))
            .replace("{name}", self.group)
            .replace("{action}", "pause")
        )


async def make_world(api: Any) -> World:
    """Made through the API with the admin token; the run is dead (requeueable)."""
    h = {"Authorization": f"Bearer {ROOT}"}
    r = await api.post("/v1/concurrency-groups", json={"name": "g1", "max_running": 2}, headers=h)
    assert r.status == 201, await r.text()
    r = await api.post(
        "/v1/channels",
        json={
            "name": "c1",
            "url": "https://hooks.example.com/x",
            "format": "punchclock",
            "secret": "whsec_a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s=",
        },
        headers=h,
    )
    assert r.status == 201, await r.text()
    channel = (await r.json())["id"]
    job = {"name": "j1", "type": "echo", "cron": "* * * * *", "payload": {"password": SECRET}}
    r = await api.post("/v1/jobs", json=job, headers=h)
    assert r.status == 201, await r.text()
    job_id = (await r.json())["id"]
    r = await api.post(
        f"/v1/jobs/{job_id}/trigger", json={"payload": {"password": SECRET}}, headers=h
    )
    assert r.status == 201, await r.text()
    run_id = (await r.json())["id"]
    return World(job_id, run_id, channel, "g1")


async def kill_run(store: Store, run_id: int) -> None:
    await finish_run(store, run_id, "dead")


async def fingerprint(store: Store) -> dict[str, str]:
    """Every row of every table a write could touch, hashed per table."""
    out = {}
    for table in TABLES:
        out[table] = await sql_value(
            store,
            f"SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM {table} t",
        )
    return out
