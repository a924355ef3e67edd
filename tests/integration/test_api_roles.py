"""The permission table through real requests: every /v1 route (and /metrics) with a token of
each role is allowed exactly when permissions.TABLE says so; a refused write is a 403 that
names the role needed and changes nothing. Read tokens never receive a payload."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from api.app import create_app
from api.permissions import PUBLIC, TABLE, rank
from supervisor.core.config import Config
from supervisor.core.store import Store

from ..role_support import (
    BEARER,
    NAMES,
    ROLE_TOKENS,
    ROLES,
    SECRET,
    fingerprint,
    kill_run,
    make_world,
    role_client,
)

API_ROUTES = sorted(
    (m, r) for (m, r), least in TABLE.items() if not r.startswith("/ui/") and least != PUBLIC
)
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/jobs"): {"name": "j2", "type": "echo", "cron": "* * * * *"},
    ("PATCH", "/v1/jobs/{id}"): {"max_attempts": 5},
    ("POST", "/v1/jobs/{id}/pause"): {"reason": "r"},
    ("POST", "/v1/jobs/{id}/trigger"): {"payload": {"x": 1}},
    ("POST", "/v1/jobs/{id}/backfill"): {
        "from": "2024-01-01T00:00:00Z",
        "to": "2024-01-01T00:05:00Z",
    },
    ("POST", "/v1/channels"): {
        "name": "c2",
        "url": "https://hooks.example.com/y",
        "format": "punchclock",
        "secret": "whsec_a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s=",
    },
    ("PATCH", "/v1/channels/{id}"): {"include_payload": True},
    ("POST", "/v1/concurrency-groups"): {"name": "g2", "max_running": 1},
    ("PATCH", "/v1/concurrency-groups/{name}"): {"max_running": 3},
}
QUERIES = {
    ("POST", "/v1/runs/requeue"): "?status=dead",
    ("GET", "/v1/schedule/preview"): "?cron=0+*+*+*+*",
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("method", "route"), API_ROUTES)
async def test_route_by_role(
    store: Store, method: str, route: str, role: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with role_client(store) as api:
        world = await make_world(api)
        await kill_run(store, world.run)
        before = await fingerprint(store)
        allowed = rank(role) >= rank(TABLE[(method, route)])
        path = world.path(route) + QUERIES.get((method, route), "")
        headers = {"Authorization": f"Bearer {BEARER[role]}"}
        caplog.set_level(logging.INFO, logger="punchclock.api")
        resp = await api.request(method, path, json=BODIES.get((method, route)), headers=headers)
        text = await resp.text()
        if allowed:
            assert resp.status not in (401, 403), text
            assert resp.status < 300 or resp.status == 409, text  # 409: the run's state
        else:
            assert resp.status == 403, text
            detail = json.loads(text)["detail"]
            assert (
                TABLE[(method, route)] in detail
                and f"'{NAMES[role]}' has the {role} role" in detail
            )
            assert await fingerprint(store) == before  # a refused write wrote nothing
        # Every request's log line names the token that made it.
        lines = [
            r
            for r in caplog.records
            if getattr(r, "punchclock_fields", {}).get("path") == path.partition("?")[0]
        ]
        assert lines and lines[-1].punchclock_fields["actor"] == NAMES[role]


async def test_unknown_route_needs_a_token_then_is_404(store: Store) -> None:
    async with role_client(store) as api:
        assert (await api.get("/v1/nothing")).status == 401
        r = await api.get("/v1/nothing", headers={"Authorization": f"Bearer {BEARER['read']}"})
        assert r.status == 404


PAYLOAD_READS = ("/v1/jobs", "/v1/jobs/{job}", "/v1/runs/{run}", "/v1/runs")


@pytest.mark.parametrize("role", ROLES)
async def test_read_tokens_never_receive_payloads(store: Store, role: str) -> None:
    async with role_client(store) as api:
        world = await make_world(api)
        headers = {"Authorization": f"Bearer {BEARER[role]}"}
        bodies = {}
        for pattern in PAYLOAD_READS:
            path = pattern.format(job=world.job, run=world.run)
            r = await api.get(path, headers=headers)
            assert r.status == 200, await r.text()
            bodies[pattern] = await r.text()
        job = json.loads(bodies["/v1/jobs/{job}"])
        run = json.loads(bodies["/v1/runs/{run}"])
        listed = json.loads(bodies["/v1/jobs"])["jobs"][0]
        if role == "read":
            for pattern, text in bodies.items():
                assert SECRET not in text, pattern
            for view in (job, run, listed):
                assert view["payload"] is None and view["payload_withheld"] is True
        else:
            assert job["payload"] == run["payload"] == listed["payload"] == {"password": SECRET}
            assert job["payload_withheld"] is False and run["payload_withheld"] is False


async def test_a_route_missing_from_the_table_is_refused_to_every_role(store: Store) -> None:
    called = []

    async def handler(request: web.Request) -> web.Response:
        called.append(request.method)
        return web.json_response({})

    extra = [web.post("/v1/unlisted", handler), web.get("/unlisted", handler)]
    app = create_app(replace(Config(), api_tokens=ROLE_TOKENS), store, extra_routes=extra)
    async with TestClient(TestServer(app, host="127.0.0.1")) as api:
        for path in ("/v1/unlisted", "/unlisted"):
            method = "POST" if path.startswith("/v1/") else "GET"
            r = await api.request(
                method, path, headers={"Authorization": f"Bearer {BEARER['admin']}"}
            )
            assert r.status == 403, await r.text()
            assert "is not open to any role" in (await r.json())["detail"]
    assert called == []
