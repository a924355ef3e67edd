"""A webhook receiver for the notification tests: an aiohttp server on loopback that verifies
every request's Standard Webhooks signature, records it, and can be told to answer 500 (or
any `status` with `answer_headers`), to hold requests (time out) until released, to stream
an endless body, or be down. GETs under /ping/ are outbound pings: their paths are recorded
in `pings`. It listens on 127.0.0.1, a refused destination by default: notifiers that
deliver to it are made with allow_private=True (supervisors: ALLOW_PRIVATE_ENV)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

# What a supervisor delivering to a Receiver needs in its environment (loopback is refused).
ALLOW_PRIVATE_ENV = {"PUNCHCLOCK_NOTIFY_ALLOW_PRIVATE": "true"}
SECRET = "whsec_" + base64.b64encode(b"punchclock-test-secret-32-bytes!").decode()


def verify(secret: str, headers: Any, body: bytes, tolerance: int = 300) -> bool:
    """docs/notifications.md's verification example, verbatim in spirit: what a receiver does."""
    msg_id, ts = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(time.time() - int(ts)) > tolerance:
        return False  # too old (or from the future): a replay
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{ts}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        hmac.compare_digest(f"v1,{expected}", sig) for sig in headers["webhook-signature"].split()
    )


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    verified: bool

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self, secret: str | None = SECRET) -> None:
        self.secret = secret
        self.received: list[Received] = []
        self.pings: list[str] = []  # paths of the GETs under /ping/, in arrival order
        self.mode = "ok"  # ok | fail (500) | hold (answer once released) | redirect | status
        # | endless
        self.status = 204  # mode "status": answer this, with these headers
        self.answer_headers: dict[str, str] = {}
        self.streamed = 0  # mode "endless": body bytes written before the client hung up
        self.hung_up = asyncio.Event()
        self.release = asyncio.Event()
        self.arrived = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        ok = self.secret is not None and "webhook-signature" in headers
        self.received.append(
            Received(headers, body, ok and verify(self.secret or "", headers, body))
        )
        self.arrived.set()
        if self.mode == "fail":
            return web.Response(status=500, text="boom")
        if self.mode == "redirect":
            raise web.HTTPFound("/elsewhere")
        if self.mode == "hold":
            await self.release.wait()
        if self.mode == "status":
            return web.Response(status=self.status, headers=self.answer_headers)
        if self.mode == "endless":
            return await self._endless(request)
        return web.Response(status=204)

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        """200 and a body that never ends, written until the client hangs up."""
        resp = web.StreamResponse(status=200)
        await resp.prepare(request)
        chunk = b"x" * 65536
        try:
            while True:
                await resp.write(chunk)
                self.streamed += len(chunk)
        except (ConnectionError, RuntimeError):
            self.hung_up.set()
        return resp

    @property
    def ping_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ping/check-1"

    async def _ping(self, request: web.Request) -> web.StreamResponse:
        self.pings.append(request.path)
        if self.mode == "status":
            return web.Response(status=self.status, headers=self.answer_headers)
        if self.mode == "endless":
            return await self._endless(request)
        return web.Response(status=500 if self.mode == "fail" else 200, text="OK")

    async def _elsewhere(self, request: web.Request) -> web.Response:
        raise AssertionError("a redirect was followed")

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        app.router.add_get("/ping/{tail:.*}", self._ping)
        app.router.add_route("*", "/elsewhere", self._elsewhere)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port or self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def ids(self) -> list[str]:
        return [r.id for r in self.received]

    def events(self) -> list[str]:
        return [r.json["type"] for r in self.received]


# Issue 62, item 4: inward destinations refused as channels and as ping URLs.
ISSUE_CHANNEL_URLS = [
    "http://127.0.0.1:5432/",
    "http://[::1]:8080/",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/",
    "http://0.0.0.0:22/",
    "http://2130706433/",
    "http://[::ffff:127.0.0.1]/",
]
ISSUE_PING_URLS = ["http://127.0.0.1:9/", "http://169.254.169.254/"]
