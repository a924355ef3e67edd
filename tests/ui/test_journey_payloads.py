"""Journey in a real Chromium against a real `punchclock api` process: a job whose payload
holds a password, and a run triggered with it. A read session sees neither payload on any
page (jobs list, job, runs list, run); an operator logs in and sees both; the header names
each session's token. The API side is tests/integration/test_api_roles.py."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.async_api import Page, expect

from ..api_support import api_process, http
from ..role_support import BEARER, ROLE_TOKENS, SECRET
from .journeys import Watched


async def _log_in(tab: Page, url: str, token: str) -> None:
    await tab.goto(f"{url}/ui/login")
    await tab.get_by_label("API token").fill(token)
    await tab.get_by_role("button", name="Log in").click()
    await expect(tab.get_by_role("heading", name="Overview")).to_be_visible()


async def test_read_sessions_never_see_payloads(tab: Page, dsn: str, tmp_path: Path) -> None:
    args = [arg for spec in ROLE_TOKENS for arg in ("--api-token", spec)]
    with api_process(dsn, "--listen", "127.0.0.1:0", *args) as api:
        url = api.url()
        job = {"name": "vault", "type": "echo", "cron": "0 3 * * *",
               "payload": {"password": SECRET}}  # fmt: skip
        status, _, body = http(f"{url}/v1/jobs", "POST", BEARER["admin"], job)
        assert status == 201, body
        job_id = json.loads(body)["id"]
        trigger = {"payload": {"password": SECRET}}
        status, _, body = http(f"{url}/v1/jobs/{job_id}/trigger", "POST", BEARER["admin"], trigger)
        assert status == 201, body
        run_id = json.loads(body)["id"]
        pages = [f"{url}/ui/jobs", f"{url}/ui/jobs/{job_id}", f"{url}/ui/runs",
                 f"{url}/ui/runs?upcoming=false", f"{url}/ui/runs/{run_id}", f"{url}/ui/"]  # fmt: skip
        w = Watched(tab, tmp_path)

        await _log_in(tab, url, BEARER["read"])
        await expect(tab.locator(".who")).to_contain_text("viewer")
        for page in pages:
            await tab.goto(page)
            assert SECRET not in await tab.content(), page
        await tab.goto(f"{url}/ui/runs/{run_id}")
        await expect(tab.get_by_text("withheld from read sessions")).to_be_visible()
        await w.shot("read-run")
        await tab.get_by_role("button", name="Log out").click()

        await _log_in(tab, url, BEARER["operator"])
        await expect(tab.locator(".who")).to_contain_text("ops")
        await tab.goto(f"{url}/ui/jobs/{job_id}")
        await expect(tab.locator("pre.payload")).to_contain_text(SECRET)
        await tab.goto(f"{url}/ui/runs/{run_id}")
        await expect(tab.locator("pre.payload")).to_contain_text(SECRET)
        await w.shot("operator-run")
        w.no_errors()
    # Each page view's log line names the session's token.
    views = [json.loads(line) for line in api.lines if '"http_request"' in line]
    actors = {v.get("actor") for v in views if v.get("path") == f"/ui/runs/{run_id}"}
    assert actors == {"viewer", "ops"}
