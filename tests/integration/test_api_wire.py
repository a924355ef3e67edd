"""Tokens never cross the network in clear (issue 62, item 6): the API serves HTTPS with
tls_cert/tls_key and refuses plain HTTP off loopback unless behind_proxy; the CLI's client
follows no redirect to another origin and sends no plain http to a remote host."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from api.client_http import ALLOW_HTTP_ENV, EXIT_USAGE, ApiClient, ClientError
from api.tls import check_wire, config_warnings, server_context
from supervisor.core.config import ConfigError, load
from supervisor.core.store import Store

from ..api_support import ADMIN, TOKENS, api_process, config
from ..factory import count


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "api.crt", tmp_path / "api.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    key.chmod(0o600)
    return cert, key


# ---------------------------------------------------------------- settings and serve()


@pytest.mark.parametrize(("given", "missing"), [("tls_cert", "tls_key"), ("tls_key", "tls_cert")])
def test_tls_cert_and_key_come_together(given: str, missing: str) -> None:
    with pytest.raises(ConfigError, match=f"{missing}: required with {given}"):
        load(config_file=Path("/dev/null"), environ={}, overrides={given: "/etc/x.pem"})


def test_a_non_loopback_listen_needs_tls_or_a_proxy(tmp_path: Path) -> None:
    for listen in ("0.0.0.0:8080", "[::]:8080", "192.0.2.10:8080"):
        with pytest.raises(ConfigError) as refused:
            check_wire(config(api_listen=listen))
        for name in ("api_listen", "tls_cert", "behind_proxy"):
            assert name in str(refused.value)
    check_wire(config(api_listen="127.0.0.1:8080"))
    check_wire(config(api_listen="[::1]:8080"))
    check_wire(config(api_listen="0.0.0.0:8080", behind_proxy=True))
    cert, key = self_signed(tmp_path)
    check_wire(config(api_listen="0.0.0.0:8443", tls_cert=str(cert), tls_key=str(key)))
    context = server_context(config(tls_cert=str(cert), tls_key=str(key)))
    assert context is not None and context.minimum_version >= ssl.TLSVersion.TLSv1_2
    with pytest.raises(ConfigError, match="tls_key: no such file"):
        server_context(config(tls_cert=str(cert), tls_key=str(tmp_path / "nope.key")))


def test_punchclock_api_refuses_plain_http_on_every_address(dsn: str) -> None:
    argv = [sys.executable, "-m", "supervisor", "api", "--database-url", dsn]
    argv += ["--listen", "0.0.0.0:0", "--api-token", TOKENS[0]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "api_listen" in done.stderr and "tls_cert" in done.stderr, done.stderr
    assert "behind_proxy" in done.stderr and "api_listening" not in done.stderr


async def test_punchclock_api_serves_https_with_tls_cert_and_key(
    dsn: str, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(tmp_path)
    env = {"PUNCHCLOCK_TLS_CERT": str(cert), "PUNCHCLOCK_TLS_KEY": str(key)}
    with api_process(dsn, "--listen", "0.0.0.0:0", "--api-token", TOKENS[0], env=env) as proc:
        url = proc.url()
        assert url.startswith("https://"), url
        port = url.rsplit(":", 1)[1]
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client verifies the certificate
        api = ApiClient(f"https://127.0.0.1:{port}", ADMIN)
        created = await asyncio.to_thread(
            api.call,
            "POST",
            "/v1/jobs",
            body={"name": "over-tls", "type": "echo", "cron": "@daily"},
        )
        assert created["name"] == "over-tls"
        # Plain HTTP to that port gets no API answer.
        with pytest.raises(OSError):
            await asyncio.to_thread(_plain_get, f"http://127.0.0.1:{port}/v1/jobs")
        # An unknown certificate is refused by the client.
        monkeypatch.delenv("SSL_CERT_FILE")
        with pytest.raises(ClientError, match="CERTIFICATE_VERIFY_FAILED"):
            await asyncio.to_thread(api.call, "GET", "/v1/jobs")
    assert await count(store, "jobs") == 1


def _plain_get(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())


# ---------------------------------------------------------------- the CLI's client


@asynccontextmanager
async def server(handler: Any) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_the_client_follows_no_redirect_to_another_origin() -> None:
    seen: list[dict[str, str]] = []

    async def elsewhere(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"jobs": [], "next_cursor": None})

    async with server(elsewhere) as other:

        async def redirecting(request: web.Request) -> web.Response:
            if request.path == "/v1/moved":  # within the origin: followed
                raise web.HTTPFound("/v1/jobs")
            if request.path == "/v1/jobs":
                return web.json_response({"here": True})
            raise web.HTTPFound(f"{other}/v1/jobs")

        async with server(redirecting) as api_url:
            api = ApiClient(api_url, "the-secret-token-0123456789")
            with pytest.raises(ClientError, match="redirect to another origin") as refused:
                await asyncio.to_thread(api.call, "GET", "/v1/jobs/1")
            assert other.split("//")[1] in str(refused.value)
            assert await asyncio.to_thread(api.call, "GET", "/v1/moved") == {"here": True}
    assert seen == [], "the other origin saw no request, so no Authorization header"


def test_the_client_refuses_plain_http_to_a_remote_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ALLOW_HTTP_ENV, raising=False)
    for url in ("http://api.example.com:8080", "http://10.0.0.5:8080", "http://[2001:db8::1]/"):
        with pytest.raises(ClientError, match="refusing plain http") as refused:
            ApiClient(url, "the-secret-token-0123456789")
        assert refused.value.code == EXIT_USAGE
    for url in ("http://127.0.0.1:8080", "http://localhost:8080", "https://api.example.com"):
        ApiClient(url, "the-secret-token-0123456789")
    monkeypatch.setenv(ALLOW_HTTP_ENV, "1")  # the operator says the path is private
    ApiClient("http://10.0.0.5:8080", "the-secret-token-0123456789")


def test_check_warns_of_plain_http_behind_a_proxy_and_an_unverified_database() -> None:
    warnings = config_warnings(
        config(
            api_listen="0.0.0.0:8080",
            behind_proxy=True,
            database_url="postgresql://pc:pw@db.internal:5432/pc",
        )
    )
    assert any(w.startswith("api_listen: plain HTTP on 0.0.0.0") for w in warnings)
    assert any(w.startswith("database_url:") and "verify-full" in w for w in warnings)
    assert (
        config_warnings(
            config(database_url="postgresql://pc:pw@db.internal/pc?sslmode=verify-full")
        )
        == []
    )
    assert config_warnings(config(database_url="postgresql://pc@127.0.0.1/pc")) == []
