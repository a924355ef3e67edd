"""api/gate.py against the attacks of issue 62 (items 1 and 2): a web page posting to the API
as a form or text/plain, a rebound DNS name, cross-site requests, forged forwarding headers,
token guessing. Each refused request is sent as the attacker would (no token) and once more
with the admin token, to show the gate alone stops it; the tables stay unchanged."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from api.app import create_app
from api.gate import THROTTLE_LIMIT, HostPolicy, Throttle, config_warnings, host_name
from supervisor.core.config import ConfigError, load
from supervisor.core.store import Store

from ..api_support import ADMIN, TOKENS, api_client, config
from ..factory import count

JOB = {"name": "evil", "type": "echo", "cron": "* * * * *", "payload": {"x": 1}}
CHANNEL = {"name": "exfil", "kind": "webhook", "url": "https://attacker.example/hook"}
AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}
BOTH = [pytest.param({}, id="no-token"), pytest.param(AS_ADMIN, id="admin-token")]


async def _unchanged(store: Store) -> None:
    assert await count(store, "jobs") == 0
    assert await count(store, "channels") == 0


async def _problem(resp: Any) -> str:
    assert resp.content_type == "application/problem+json"
    return str((await resp.json(content_type=None))["detail"])


@pytest.mark.parametrize("auth", BOTH)
@pytest.mark.parametrize(("path", "body"), [("/v1/jobs", JOB), ("/v1/channels", CHANNEL)])
async def test_text_plain_json_bodies_are_415(
    store: Store, auth: dict[str, str], path: str, body: dict[str, Any]
) -> None:
    async with api_client(store, api_tokens=TOKENS) as api:
        headers = {"Content-Type": "text/plain", **auth}
        resp = await api.post(path, data=json.dumps(body), headers=headers)
        assert resp.status == 415
        assert "Content-Type" in await _problem(resp)
    await _unchanged(store)


@pytest.mark.parametrize("auth", BOTH)
async def test_a_cross_site_form_post_is_415(store: Store, auth: dict[str, str]) -> None:
    async with api_client(store, api_tokens=TOKENS) as api:
        form = {"name": "evil", "type": "echo", "cron": "* * * * *"}
        resp = await api.post("/v1/jobs", data=form, headers=auth)  # urlencoded, as a <form>
        assert resp.status == 415
        assert "application/x-www-form-urlencoded" in await _problem(resp)
    await _unchanged(store)


async def test_json_with_a_charset_is_accepted(store: Store) -> None:
    async with api_client(store) as api:
        headers = {"Content-Type": "application/json; charset=utf-8"}
        resp = await api.post("/v1/jobs", data=json.dumps(JOB), headers=headers)
        assert resp.status == 201, await resp.text()
        assert (await api.post("/v1/jobs/1/pause")).status == 200  # no body: no type needed


@asynccontextmanager
async def _app(store: Store, **cfg: Any) -> AsyncIterator[TestClient[Any, Any]]:
    """create_app with a stand-in /healthz (the real one needs a pool)."""
    health = web.RouteTableDef()

    @health.get("/healthz")
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = create_app(config(api_tokens=TOKENS, **cfg), store, extra_routes=list(health))
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client


@pytest.mark.parametrize("auth", BOTH)
async def test_a_rebound_host_name_is_421(store: Store, auth: dict[str, str]) -> None:
    async with _app(store) as api:
        rebound = {"Host": "attacker.example:8080", **auth}
        for path in ("/v1/jobs", "/ui/", "/metrics"):
            resp = await api.get(path, headers=rebound, allow_redirects=False)
            assert resp.status == 421, path
            assert "Host" in await _problem(resp)
        resp = await api.post("/v1/jobs", json=JOB, headers=rebound)
        assert resp.status == 421
        # Probes keep working whatever name they use.
        assert (await api.get("/healthz", headers=rebound)).status == 200
    await _unchanged(store)


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("127.0.0.1:8080", 200),
        ("localhost", 200),
        ("LOCALHOST:1", 200),
        ("[::1]:8080", 200),
        ("127.0.0.2", 200),
        ("punch.example:443", 200),
        ("a.internal.example", 200),
        ("internal.example", 200),
        ("punch.example.attacker.example", 421),
        ("attacker.example", 421),
        ("localhost.attacker.example", 421),
        ("127.0.0.1.nip.io", 421),
        ("[::1", 421),
        ("localhost:http", 421),
    ],
)
async def test_host_names(store: Store, host: str, status: int) -> None:
    allowed = ("punch.example", ".internal.example")
    async with _app(store, api_allowed_hosts=allowed) as api:
        resp = await api.get("/v1/jobs", headers={"Host": host, **AS_ADMIN})
        assert resp.status == status, await resp.text()


async def test_the_api_listen_host_is_allowed_and_a_wildcard_allows_any(store: Store) -> None:
    async with _app(store, api_listen="192.0.2.10:8080") as api:
        assert (await api.get("/v1/jobs", headers={"Host": "192.0.2.10:8080", **AS_ADMIN})).ok
        resp = await api.get("/v1/jobs", headers={"Host": "attacker.example", **AS_ADMIN})
        assert resp.status == 421
    async with _app(store, api_listen="0.0.0.0:8080") as api:
        assert (await api.get("/v1/jobs", headers={"Host": "any.example", **AS_ADMIN})).ok
    async with _app(store, api_listen="0.0.0.0:8080", api_allowed_hosts=("punch.example",)) as api:
        resp = await api.get("/v1/jobs", headers={"Host": "any.example", **AS_ADMIN})
        assert resp.status == 421
    warned = config_warnings(config(api_listen="0.0.0.0:8080"))
    assert len(warned) == 1 and "api_allowed_hosts" in warned[0]
    assert config_warnings(config(api_listen="[::]:8080", api_allowed_hosts=("a.example",))) == []
    assert config_warnings(config()) == []
    assert HostPolicy(config(api_listen=":8080")).names == frozenset({"127.0.0.1"})


def test_host_name_parsing() -> None:
    assert host_name("Example.COM.:80") == "example.com"
    assert host_name("[::1]:8080") == "::1" and host_name("[::1]") == "::1"
    assert host_name("[::1]x") is None and host_name("a:b") is None and host_name("") is None


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
async def test_sec_fetch_site_cross_and_same_site_are_403(store: Store, site: str) -> None:
    async with api_client(store) as api:  # with the admin token
        for method, path in (("POST", "/v1/jobs"), ("GET", "/v1/jobs")):
            body = JOB if method == "POST" else None
            resp = await api.request(method, path, json=body, headers={"Sec-Fetch-Site": site})
            assert resp.status == 403
            assert "Sec-Fetch-Site" in await _problem(resp)
        ok = await api.post("/v1/jobs", json=JOB, headers={"Sec-Fetch-Site": "same-origin"})
        assert ok.status == 201
        assert (await api.get("/v1/jobs", headers={"Sec-Fetch-Site": "none"})).status == 200
    assert await count(store, "jobs") == 1


async def test_a_foreign_origin_is_403(store: Store) -> None:
    async with api_client(store) as api:
        for origin in ("http://attacker.example", "null", "http://127.0.0.1:1"):
            resp = await api.post("/v1/jobs", json=JOB, headers={"Origin": origin})
            assert resp.status == 403, origin
            assert "Origin" in await _problem(resp)
        assert await count(store, "jobs") == 0
        own = f"http://{api.server.host}:{api.server.port}"
        assert (await api.post("/v1/jobs", json=JOB, headers={"Origin": own})).status == 201


async def test_forwarding_headers_carry_no_authority(store: Store) -> None:
    async with api_client(store, api_tokens=TOKENS) as api:
        for header in ("X-Forwarded-For", "X-Real-IP"):
            resp = await api.post("/v1/jobs", json=JOB, headers={header: "127.0.0.1"})
            assert resp.status == 401, header
        resp = await api.get("/v1/jobs", headers={"X-Forwarded-For": "127.0.0.1"})
        assert resp.status == 401
    await _unchanged(store)


async def test_token_guessing_is_throttled_and_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "punchclock.api")
    guess = "guess-0123456789abcdef"
    async with api_client(store, api_tokens=TOKENS) as api:
        for _ in range(3):  # no Authorization header at all: forgetful, not guessing
            assert (await api.get("/v1/jobs")).status == 401
        for _ in range(THROTTLE_LIMIT):
            resp = await api.post(
                "/v1/jobs", json=JOB, headers={"Authorization": f"Bearer {guess}"}
            )
            assert resp.status == 401
        resp = await api.get("/v1/jobs", headers={"Authorization": f"Bearer {guess}"})
        assert resp.status == 429
        assert 1 <= int(resp.headers["Retry-After"]) <= 60
        # Even the right token waits: otherwise the throttle would still answer the guesses.
        resp = await api.post("/v1/jobs", json=JOB, headers=AS_ADMIN)
        assert resp.status == 429
    await _unchanged(store)
    refused = [r for r in caplog.records if r.getMessage() == "api_refused"]
    fields = [r.__dict__["punchclock_fields"] for r in refused]
    assert {f["status"] for f in fields} == {401, 429}
    assert all(f["remote"] == "127.0.0.1" and f["path"] == "/v1/jobs" for f in fields)
    assert guess not in caplog.text and ADMIN not in caplog.text


def test_throttle_window_and_bound() -> None:
    now = [0.0]
    t = Throttle(limit=3, window=60.0, max_clients=2, clock=lambda: now[0])
    for _ in range(3):
        assert t.retry_after("a") is None
        t.failed("a")
    assert t.retry_after("a") == 60
    now[0] = 59.5
    assert t.retry_after("a") == 1
    now[0] = 60.0  # the first failure left the window
    assert t.retry_after("a") is None
    t.failed("b")
    t.failed("c")  # a third address: the least recently failed one ("a") is forgotten
    assert set(t._failures) == {"b", "c"}


async def test_the_throttle_can_be_set_or_turned_off(store: Store) -> None:
    wrong = {"Authorization": "Bearer guess-0123456789abcdef"}
    async with api_client(store, api_tokens=TOKENS, api_auth_throttle=0) as api:
        for _ in range(THROTTLE_LIMIT + 2):
            assert (await api.get("/v1/jobs", headers=wrong)).status == 401
    async with api_client(store, api_tokens=TOKENS, api_auth_throttle=2) as api:
        for status in (401, 401, 429):
            assert (await api.get("/v1/jobs", headers=wrong)).status == status
    with pytest.raises(ConfigError, match="api_auth_throttle: must not be negative"):
        load(config_file=None, environ={"PUNCHCLOCK_API_AUTH_THROTTLE": "-1"})
