"""The dashboard's gate, without a browser: login and sessions, cookie flags, CSRF and
Origin checks, the read role's 403, the CSP, and escaping."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from api.app import create_app
from api.auth import Tokens
from api.ui.session import Sessions
from supervisor.core.config import ConfigError
from supervisor.core.store import Store

from ..api_support import ADMIN, READER, TOKENS, api_client, config
from .conftest import Ui


def cookie_header(r: object) -> str:
    return "; ".join(r.headers.getall("Set-Cookie", []))  # type: ignore[attr-defined]


async def test_pages_need_a_login_and_keep_where_you_were_going(ui_anon: Ui) -> None:
    r = await ui_anon.client.get("/ui/jobs?type=x", allow_redirects=False)
    assert r.status == 303
    assert r.headers["Location"] == "/ui/login?next=%2Fui%2Fjobs%3Ftype%3Dx"
    status, html = await ui_anon.get("/ui/login?next=/ui/jobs")
    assert status == 200 and 'name="token"' in html and 'value="/ui/jobs"' in html


async def test_wrong_token_is_refused_and_right_one_opens_a_session(ui_anon: Ui) -> None:
    await ui_anon.get("/ui/login")
    r = await ui_anon.post("/ui/login", {"token": "not-a-token-at-all-0000", "next": "/ui/"})
    assert r.status == 401
    assert "That token is not valid." in await r.text()
    r = await ui_anon.post("/ui/login", {"token": ADMIN, "next": "/ui/workers"})
    assert r.status == 303 and r.headers["Location"] == "/ui/workers"
    flags = cookie_header(r)
    assert "punchclock_session=" in flags
    assert "HttpOnly" in flags and "SameSite=Strict" in flags and "Path=/ui/" in flags
    assert "Secure" not in flags  # plain HTTP: a Secure cookie would never come back
    status, html = await ui_anon.get("/ui/")
    assert status == 200 and "role-admin" in html and "Log out" in html


async def test_login_never_redirects_to_another_site(ui_anon: Ui) -> None:
    await ui_anon.get("/ui/login")
    for target in ("https://evil.example/", "//evil.example/ui/", "/v1/jobs", "/ui/\\evil"):
        r = await ui_anon.post("/ui/login", {"token": ADMIN, "next": target})
        assert r.headers["Location"] == "/ui/", target
        await ui_anon.get("/ui/")  # the new session's CSRF token


async def test_cookie_is_secure_behind_tls_proxy(store: Store) -> None:
    # Over TLS the cookie is __Secure-punchclock_session (tests/ui/test_ui_sessions.py): a
    # client only sends it back over https, so this plain-http client checks the header.
    async with api_client(store, api_tokens=TOKENS, behind_proxy=True) as client:
        r = await client.get("/ui/login", headers={"X-Forwarded-Proto": "https"})
        assert r.status == 200 and "Secure" in cookie_header(r)


async def test_logout_ends_the_session(ui_admin: Ui) -> None:
    r = await ui_admin.post("/ui/logout")
    assert r.status == 303 and r.headers["Location"] == "/ui/login"
    r = await ui_admin.client.get("/ui/", allow_redirects=False)
    assert r.status == 303


async def test_post_without_csrf_or_from_another_origin_is_refused(ui_admin: Ui) -> None:
    r = await ui_admin.post("/ui/logout", csrf=False)
    assert r.status == 403 and "expired" in await r.text()
    r = await ui_admin.post("/ui/logout", {"csrf": "forged-token-value"}, csrf=False)
    assert r.status == 403
    r = await ui_admin.post("/ui/logout", headers={"Origin": "https://evil.example"})
    assert r.status == 403 and "own pages" in await r.text()
    r = await ui_admin.client.post(
        "/ui/logout", data={"csrf": ui_admin.csrf}, allow_redirects=False
    )  # neither Origin nor Referer
    assert r.status == 403
    status, _ = await ui_admin.get("/ui/")  # still logged in: nothing was done
    assert status == 200


async def test_read_session_cannot_post_actions(ui_reader: Ui) -> None:
    status, html = await ui_reader.get("/ui/")
    assert status == 200 and "role-read" in html
    r = await ui_reader.post("/ui/jobs/1/pause")
    assert r.status == 403 and "read role" in await r.text()
    r = await ui_reader.post("/ui/logout")  # leaving is not a change
    assert r.status == 303


async def test_every_response_forbids_inline_scripts(ui_anon: Ui) -> None:
    for path in ("/ui/login", "/ui/static/app.css", "/ui/no-such-page"):
        r = await ui_anon.client.get(path, allow_redirects=False)
        csp = r.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert r.headers["X-Frame-Options"] == "DENY"
    _, html = await ui_anon.get("/ui/login")
    assert re.findall(r"<script(?![^>]*\bsrc=)", html) == []  # no inline script element
    assert "style=" not in html and "<style" not in html


async def test_user_data_is_escaped(ui_anon: Ui) -> None:
    status, html = await ui_anon.get("/ui/login?next=/ui/%22%3E%3Cscript%3Ealert(1)%3C/script%3E")
    assert status == 200
    assert "<script>alert(1)" not in html
    assert "&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html


async def test_loopback_gets_the_login_page_not_admin(ui_anon: Ui, store: Store) -> None:
    # Once a tokenless app made every loopback caller admin; now there is no such app, and a
    # loopback caller without a session (whatever X-Forwarded-For says) must log in.
    with pytest.raises(ConfigError, match="api_tokens"):
        create_app(config(), store)
    r = await ui_anon.client.get(
        "/ui/", headers={"X-Forwarded-For": "127.0.0.1"}, allow_redirects=False
    )
    assert r.status == 303 and r.headers["Location"].startswith("/ui/login")


async def test_sessions_are_stateless_across_processes() -> None:
    a = Sessions(Tokens.parse(TOKENS), "a-session-secret-of-32-characters!")
    b = Sessions(Tokens.parse(TOKENS), "a-session-secret-of-32-characters!")  # another process
    s = a.login(ADMIN)
    assert s is not None
    cookie = a.encode(s)
    assert b.decode(cookie) == s and b.csrf(s) == a.csrf(s)
    assert b.decode(cookie[:-2] + "xx") is None  # tampered
    assert b.decode(a.encode(replace(s, expires=1))) is None  # expired
    assert b.decode(a.encode(replace(s, role="admin", token=a.fingerprint(READER)))) is None
    # The token it was opened with is no longer configured: the session is over.
    rotated = Sessions(
        Tokens.parse((TOKENS[1], "admin:another-admin-token-0000")),
        "a-session-secret-of-32-characters!",
    )
    assert rotated.decode(cookie) is None
