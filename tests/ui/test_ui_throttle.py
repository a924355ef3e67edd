"""Failed dashboard logins are throttled per client address, sharing the API's counter of
failed bearer tokens (issue 62, Low): past the limit, 429 with Retry-After, even for the
right token, and the failure lines name the address and the path, never the token."""

from __future__ import annotations

import logging

import pytest

from api.gate import THROTTLE_LIMIT

from ..api_support import ADMIN
from .conftest import Ui


async def test_login_guessing_is_throttled(ui_anon: Ui, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    guess = "guess-0123456789abcdef"
    await ui_anon.get("/ui/login")
    for _ in range(THROTTLE_LIMIT - 1):
        r = await ui_anon.post("/ui/login", {"token": guess, "next": "/ui/"})
        assert r.status == 401
    # One more through the API's door: the same counter.
    r = await ui_anon.client.get("/v1/jobs", headers={"Authorization": f"Bearer {guess}"})
    assert r.status == 401
    r = await ui_anon.post("/ui/login", {"token": ADMIN, "next": "/ui/"})
    assert r.status == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
    assert "Too many failed logins" in await r.text()
    assert "Set-Cookie" not in r.headers or "punchclock_session" not in r.headers["Set-Cookie"]
    failed = [r for r in caplog.records if r.getMessage() == "ui_login_failed"]
    assert len(failed) == THROTTLE_LIMIT - 1
    assert all(r.__dict__["punchclock_fields"]["remote"] == "127.0.0.1" for r in failed)
    assert all(r.__dict__["punchclock_fields"]["path"] == "/ui/login" for r in failed)
    assert guess not in caplog.text and ADMIN not in caplog.text
