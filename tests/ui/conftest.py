"""Dashboard fixtures: the API in-process (with and without tokens), a logged-in client, and
the real browser for the journeys (Debian's chromium-headless-shell, never a download)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from playwright.async_api import Browser, Page, async_playwright

from supervisor.core.store import Store

from ..api_support import ADMIN, READER, TOKENS, api_client

CHROMIUM = "/usr/lib/chromium/chromium-headless-shell"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "the page has no CSRF field"
    return found.group(1)


class Ui:
    """A test client with the dashboard's manners: same-origin POSTs carrying the CSRF
    token of the last page it read."""

    def __init__(self, client: TestClient[Any, Any]) -> None:
        self.client = client
        self.csrf = ""

    @property
    def origin(self) -> str:
        return str(self.client.make_url("/")).rstrip("/")

    async def get(self, path: str, **kw: Any) -> tuple[int, str]:
        r = await self.client.get(path, allow_redirects=False, **kw)
        text = await r.text()
        if 'name="csrf"' in text:
            self.csrf = csrf_of(text)
        return r.status, text

    async def post(
        self, path: str, data: dict[str, str] | None = None, *, csrf: bool = True, **kw: Any
    ) -> Any:
        headers = {"Origin": self.origin, **kw.pop("headers", {})}
        body = {**({"csrf": self.csrf} if csrf else {}), **(data or {})}
        return await self.client.post(path, data=body, headers=headers, allow_redirects=False, **kw)

    async def login(self, token: str) -> Any:
        await self.get("/ui/login")
        r = await self.post("/ui/login", {"token": token, "next": "/ui/"})
        assert r.status == 303, await r.text()
        # A page with the session's CSRF token; not the overview, whose 24 h figures would
        # then be a snapshot taken before the test made its rows.
        await self.get("/ui/workers")
        return r


@pytest.fixture
async def ui_open(store: Store) -> AsyncIterator[Ui]:
    """Admin on both surfaces: the API through the admin bearer token (api_client's default),
    the dashboard logged in with it. (No tokenless mode exists any more.)"""
    async with api_client(store) as client:
        ui = Ui(client)
        await ui.login(ADMIN)
        yield ui


@pytest.fixture
async def ui_anon(store: Store) -> AsyncIterator[Ui]:
    """Tokens configured, not logged in."""
    async with api_client(store, api_tokens=TOKENS) as client:
        yield Ui(client)


@pytest.fixture
async def ui_admin(ui_anon: Ui) -> Ui:
    await ui_anon.login(ADMIN)
    return ui_anon


@pytest.fixture
async def ui_reader(ui_anon: Ui) -> Ui:
    await ui_anon.login(READER)
    return ui_anon


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    """Debian's headless shell through Playwright's async API, one per journey (closed,
    renderers and all, before tests/conftest.py looks for stray children). The async API
    because the sync one marks the event loop as running, which the asyncio fixtures of this
    suite cannot share a thread with."""
    if not Path(CHROMIUM).exists():  # loudly: a journey never skips for want of a browser
        raise RuntimeError(
            f"{CHROMIUM} is missing: apt-get install -y --no-install-recommends "
            "chromium-headless-shell (never `playwright install`)"
        )
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def tab(chromium: Browser) -> AsyncIterator[Page]:
    context = await chromium.new_context(viewport={"width": 1280, "height": 800})
    try:
        yield await context.new_page()
    finally:
        await context.close()
