"""Dashboard sessions end: at logout (the cookie captured before it is refused after), after
session_idle_timeout unused (each use extends it), and with another signing secret; over TLS
the cookie is `__Secure-` and Secure."""

from __future__ import annotations

import time
from typing import Any

import pytest

from api.ui import session as session_module
from supervisor.core.store import Store

from ..role_support import BEARER, fingerprint, kill_run, make_world, role_client
from .conftest import Ui

COOKIE = "punchclock_session"


def _cookie(ui: Ui) -> str:
    found = [c.value for c in ui.client.session.cookie_jar if c.key == COOKIE]
    assert len(found) == 1
    return found[0]


async def _replay(ui: Ui, cookie: str, path: str) -> Any:
    """A request carrying only `cookie` (as a thief who copied it would send it)."""
    ui.client.session.cookie_jar.clear()
    return await ui.client.get(
        path, headers={"Cookie": f"{COOKIE}={cookie}"}, allow_redirects=False
    )


async def test_a_cookie_captured_before_logout_is_refused_after(store: Store) -> None:
    async with role_client(store) as client:
        world = await make_world(client)
        ui = Ui(client)
        await ui.login(BEARER["admin"])
        stolen, csrf = _cookie(ui), ui.csrf
        assert (await _replay(ui, stolen, "/ui/jobs")).status == 200  # valid before
        ui.client.session.cookie_jar.update_cookies({COOKIE: stolen})
        r = await ui.post("/ui/logout")
        assert r.status == 303
        r = await _replay(ui, stolen, "/ui/jobs")
        assert r.status == 303 and r.headers["Location"].startswith("/ui/login")
        # Its form, replayed with its own CSRF token, writes nothing.
        await kill_run(store, world.run)
        before = await fingerprint(store)
        ui.client.session.cookie_jar.clear()
        r = await ui.client.post(
            f"/ui/runs/{world.run}/requeue",
            data={"csrf": csrf},
            headers={"Cookie": f"{COOKIE}={stolen}", "Origin": ui.origin},
            allow_redirects=False,
        )
        assert r.status == 403
        assert await fingerprint(store) == before


async def test_an_idle_session_expires_and_use_extends_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle = 600.0
    async with role_client(store, session_idle_timeout=idle) as client:
        ui = Ui(client)
        await ui.login(BEARER["read"])
        first = _cookie(ui)
        start = time.time()
        monkeypatch.setattr(session_module, "_now", lambda: start + idle * 0.75)
        status, _ = await ui.get("/ui/jobs")  # used: a fresh cookie, seen now
        assert status == 200 and _cookie(ui) != first
        monkeypatch.setattr(session_module, "_now", lambda: start + idle * 1.5)
        assert (await ui.get("/ui/jobs"))[0] == 200  # still alive: it was used
        # The first cookie, unused since login, is idle-expired at that instant.
        r = await _replay(ui, first, "/ui/jobs")
        assert r.status == 303 and r.headers["Location"].startswith("/ui/login")
        # And the live one too, once unused for longer than the timeout.
        ui.client.session.cookie_jar.clear()
        await ui.login(BEARER["read"])
        later = _cookie(ui)
        monkeypatch.setattr(session_module, "_now", lambda: start + idle * 1.5 + idle + 1)
        r = await _replay(ui, later, "/ui/jobs")
        assert r.status == 303 and r.headers["Location"].startswith("/ui/login")


async def test_session_secret_is_what_signs(store: Store) -> None:
    secret = "s" * 40
    async with role_client(store, session_secret=secret) as one:
        ui = Ui(one)
        await ui.login(BEARER["read"])
        cookie = _cookie(ui)
    async with role_client(store, session_secret=secret) as two:  # another process, same key
        r = await two.get(
            "/ui/jobs", headers={"Cookie": f"{COOKIE}={cookie}"}, allow_redirects=False
        )
        assert r.status == 200
    async with role_client(store) as three:  # no secret: its own random key
        r = await three.get(
            "/ui/jobs", headers={"Cookie": f"{COOKIE}={cookie}"}, allow_redirects=False
        )
        assert r.status == 303


async def test_over_tls_the_cookie_is_secure_prefixed(store: Store) -> None:
    async with role_client(store) as client:  # a client's X-Forwarded-Proto is not believed
        r = await client.get("/ui/login", headers={"X-Forwarded-Proto": "https"})
        assert r.headers["Set-Cookie"].startswith(f"{COOKIE}=")
    async with role_client(store, behind_proxy=True) as client:  # the proxy's is
        r = await client.get("/ui/login", headers={"X-Forwarded-Proto": "https"})
        assert r.status == 200, await r.text()
        header = r.headers["Set-Cookie"]
        assert header.startswith(f"__Secure-{COOKIE}=") and "Secure" in header
        r = await client.get("/ui/login")
        assert r.headers["Set-Cookie"].startswith(f"{COOKIE}=")
