"""Authentication and exposure: the role matrix in-process, and `punchclock api` as a real
process (start-up log, never a token in it, clean stop). Without api_tokens, see
test_api_tokenfile.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.auth import Tokens, check_exposure
from supervisor.core.config import ConfigError
from supervisor.core.store import Store

from ..api_support import ADMIN, READER, TOKENS, api_client, api_process, http
from ..factory import count

JOB = {"name": "n1", "type": "echo", "cron": "* * * * *"}


@pytest.mark.parametrize(
    ("method", "path", "token", "status"),
    [
        ("GET", "/v1/jobs", None, 401),
        ("GET", "/v1/jobs", "wrong-token-0123456789", 401),
        ("GET", "/v1/jobs", READER + "x", 401),
        ("GET", "/v1/jobs", READER, 200),
        ("GET", "/v1/jobs", ADMIN, 200),
        ("GET", "/v1/runs", READER, 200),
        ("GET", "/v1/workers", READER, 200),
        ("POST", "/v1/jobs", None, 401),
        ("POST", "/v1/jobs", READER, 403),
        ("POST", "/v1/jobs", ADMIN, 201),
        ("POST", "/v1/runs/requeue", READER, 403),
        ("POST", "/v1/runs/requeue", ADMIN, 200),
        ("GET", "/openapi.json", None, 200),
    ],
)
async def test_role_matrix(
    store: Store, method: str, path: str, token: str | None, status: int
) -> None:
    async with api_client(store, api_tokens=TOKENS) as api:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        body = JOB if path == "/v1/jobs" and method == "POST" else None
        resp = await api.request(method, path, json=body, headers=headers)
        assert resp.status == status, await resp.text()
        if status == 401:
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
            assert resp.content_type == "application/problem+json"
        if status == 403:
            assert "admin" in (await resp.json(content_type=None))["detail"]


async def test_other_schemes_and_malformed_headers_are_401(store: Store) -> None:
    async with api_client(store, api_tokens=TOKENS) as api:
        for header in (f"Basic {ADMIN}", "Bearer", "Bearer ", ADMIN, f"Token {ADMIN}"):
            resp = await api.get("/v1/jobs", headers={"Authorization": header})
            assert resp.status == 401, header
        # The scheme is case-insensitive (RFC 9110).
        resp = await api.get("/v1/jobs", headers={"Authorization": f"bearer {READER}"})
        assert resp.status == 200
    # Nothing was written by the refused requests.
    assert await count(store, "jobs") == 0


async def test_loopback_is_no_trust_boundary(store: Store) -> None:
    # The old tokenless mode made this caller admin; an X-Forwarded-For claim changes nothing.
    async with api_client(store, api_tokens=TOKENS) as api:
        for headers in ({}, {"X-Forwarded-For": "127.0.0.1"}, {"Forwarded": "for=127.0.0.1"}):
            resp = await api.post("/v1/jobs", json=JOB, headers=headers)
            assert resp.status == 401, headers
    assert await count(store, "jobs") == 0


def test_exposure_rules() -> None:
    with pytest.raises(ConfigError, match="api_tokens: at least one token is required"):
        check_exposure(Tokens.parse(()))
    check_exposure(Tokens.parse(TOKENS))
    tokens = Tokens.parse(TOKENS)
    assert tokens.role_of(ADMIN) == "admin" and tokens.role_of(READER) == "read"
    assert tokens.role_of("") is None and tokens.role_of(ADMIN[:-1]) is None
    with pytest.raises(ConfigError):
        Tokens.parse(["root:abcdefabcdefabcdef"])


def _call(
    url: str, method: str = "GET", token: str | None = None, body: Any = None
) -> tuple[int, Any]:
    status, _, raw = http(url, method, token, body)
    return status, json.loads(raw)


def test_api_process_serves_with_tokens_and_never_logs_them(dsn: str) -> None:
    secret_payload = "payload-marker-7f3a"
    with api_process(
        dsn,
        "--listen",
        "127.0.0.1:0",
        "--api-token",
        f"admin:{ADMIN}",
        "--api-token",
        f"read:{READER}",
    ) as proc:
        url = proc.url()
        assert url.startswith("http://127.0.0.1:")
        body = {**JOB, "payload": {"secret": secret_payload}}
        status, created = _call(url + "/v1/jobs", "POST", ADMIN, body)
        assert status == 201, created
        assert _call(url + "/v1/jobs", "POST", READER, body)[0] == 403
        assert _call(url + "/v1/jobs")[0] == 401
        status, page = _call(url + "/v1/jobs", token=READER)
        assert status == 200 and [j["name"] for j in page["jobs"]] == ["n1"]
        proc.wait_for_line(lambda e: e.get("event") == "http_request" and e.get("status") == 401)
        assert proc.stop() == 0
    log = "".join(proc.lines)
    assert ADMIN not in log and READER not in log and secret_payload not in log
    assert '"event": "api_stopping"' in log
