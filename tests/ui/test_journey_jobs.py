"""Journeys on the jobs page in a real Chromium against a real `punchclock api`: an admin
pauses a job with a reason and resumes it; a read session sees no buttons, and a POST it
makes by hand (with a valid CSRF token) is refused with 403."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, READER, TOKENS, api_process
from ..helpers import job
from .journeys import Watched


async def login(tab: Page, url: str, token: str) -> None:
    await tab.goto(f"{url}/ui/login")
    await tab.get_by_label("API token").fill(token)
    await tab.get_by_role("button", name="Log in").click()
    await expect(tab.get_by_role("heading", name="Overview")).to_be_visible()


async def test_pause_with_reason_and_resume(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    for name, cron in (("billing-export", "0 2 * * *"), ("ping", "*/10 * * * * *")):
        await jobs.create_job(store, job(name, cron=cron, timezone="Europe/Berlin"), factory.LIMITS)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        await tab.get_by_role("link", name="Jobs").click()
        await tab.get_by_label("Name contains").fill("bill")
        row = tab.get_by_role("row").filter(has_text="billing-export")
        await expect(tab.get_by_role("row").filter(has_text="ping")).to_have_count(0)
        await expect(tab).to_have_url(f"{url}/ui/jobs?q=bill&type=&paused=&last=&sort=name")
        await w.shot("jobs")
        await row.get_by_role("link", name="Pause…").click()
        await tab.get_by_label("Reason").fill("warehouse migration, back Monday")
        await tab.get_by_role("button", name="Pause job").click()
        await expect(tab.get_by_role("status")).to_have_text("Paused billing-export.")
        await expect(row).to_contain_text("warehouse migration, back Monday")
        await w.shot("jobs-paused")
        await row.get_by_role("button", name="Resume").click()
        await expect(tab.get_by_role("status")).to_have_text("Resumed billing-export.")
        await expect(row).not_to_contain_text("warehouse migration")
        await expect(row).to_contain_text("active")
        await row.get_by_role("link", name="billing-export").click()
        await expect(tab.get_by_role("heading", name="Next 20 instants")).to_be_visible()
        await w.shot("job")
        w.no_errors()


async def test_read_session_has_no_buttons_and_its_posts_are_refused(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    created = await jobs.create_job(store, job("watched"), factory.LIMITS)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[1]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, READER)
        await tab.goto(f"{url}/ui/jobs")
        await expect(tab.get_by_role("link", name="watched")).to_be_visible()
        await expect(tab.get_by_role("button")).to_have_text(["Log out", "Filter"])
        await w.shot("jobs-read")
        csrf = await tab.locator("input[name=csrf]").first.input_value()
        w.expected.add(403)
        status = await tab.evaluate(
            """async ([path, csrf]) => (await fetch(path, {method: "POST",
                 body: new URLSearchParams({csrf})})).status""",
            [f"/ui/jobs/{created.id}/pause", csrf],
        )
        assert status == 403
        row = await factory.job_row(store, created.id)
        assert row is not None and not row["paused"]
        await tab.get_by_role("link", name="Workers").click()
        await expect(tab.get_by_role("heading", name="Workers")).to_be_visible()
        await w.shot("workers")
        await tab.get_by_role("link", name="Deliveries").click()
        await expect(tab.get_by_role("heading", name="Deliveries")).to_be_visible()
        await w.shot("deliveries")
        w.no_errors()
