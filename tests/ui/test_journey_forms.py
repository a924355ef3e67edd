"""Journeys through the dashboard's forms in a real Chromium against a real `punchclock api`:
every form with JavaScript off (full pages, never a CSRF token in a URL), a confirmation
after each job action, the trigger page telling what a paused job does, the one-off
preview, and the small helps of the job form."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, Request, expect

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, TOKENS, api_process
from ..helpers import job
from .journeys import Watched
from .test_backfill import hourly_with_holes
from .test_journey_jobs import login


@pytest.fixture
async def no_js(chromium: Browser) -> AsyncIterator[Page]:
    context = await chromium.new_context(
        java_script_enabled=False, viewport={"width": 1280, "height": 800}
    )
    try:
        yield await context.new_page()
    finally:
        await context.close()


class Pages:
    """Every request a tab makes, and a check that each form led to a whole page."""

    def __init__(self, tab: Page) -> None:
        self.tab = tab
        self.urls: list[str] = []
        tab.on("request", self._request)

    def _request(self, request: Request) -> None:
        self.urls.append(request.url)

    async def whole(self, heading: str | re.Pattern[str]) -> None:
        await expect(self.tab.get_by_role("navigation", name="main")).to_be_visible()
        await expect(self.tab.get_by_role("heading", level=1)).to_have_text(heading)

    async def status(self, text: str | re.Pattern[str]) -> None:
        await expect(self.tab.get_by_role("status")).to_have_text(text)

    def no_token_in_urls(self) -> None:
        leaked = [u for u in self.urls if "csrf" in u.lower()]
        assert leaked == [], f"CSRF token in a URL: {leaked}"


async def test_every_form_works_without_javascript(
    no_js: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    hourly, start, end, _ = await hourly_with_holes(store)
    dead = await factory.insert_runs(store, hourly, 3, status="dead", start_s=30)
    tab = no_js
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w, p = Watched(tab, tmp_path), Pages(tab)
        await login(tab, url, ADMIN)  # the login form
        await tab.get_by_role("link", name="Jobs").click()
        await tab.get_by_label("Name contains").fill("hour")  # the jobs filter: a GET
        await tab.get_by_role("button", name="Filter").click()
        await expect(tab).to_have_url(re.compile(r"/ui/jobs\?q=hour&"))
        await p.whole("Jobs")

        # The job form's "Preview only": the whole form again, with what was typed, unsaved.
        await tab.get_by_role("link", name="New job").click()
        await tab.get_by_label("Name", exact=True).fill("nightly-report")
        await tab.locator("#type").fill("echo")
        await tab.locator("#cron").fill("30 2 * * *")
        await tab.get_by_role("button", name="Preview only").click()
        await p.whole("New job")
        await expect(tab).to_have_url(f"{url}/ui/jobs/new#preview")
        await expect(tab.get_by_label("Name", exact=True)).to_have_value("nightly-report")
        preview = tab.locator("#preview")
        await expect(preview.locator("tbody tr")).to_have_count(10)
        await expect(preview.locator("thead th")).to_have_text(["UTC"])  # not "UTC | UTC"
        await expect(preview.locator("tbody tr").first).to_contain_text("T02:30:00Z")
        assert await store.get_job_by_name("nightly-report") is None
        await w.shot("no-js-preview-cron")

        # Once, at run_at: the cron field goes (CSS, no script), the preview is that instant.
        cron = tab.locator("#cron")
        await tab.get_by_label("once, at run_at").check()
        await expect(cron).to_be_hidden()
        await tab.get_by_label("Run at").fill("2031-06-01T08:00")
        await tab.locator("#timezone").fill("Europe/Berlin")
        await tab.get_by_role("button", name="Preview only").click()
        await expect(preview.get_by_role("heading")).to_have_text("Runs once")
        await expect(preview.locator("tbody tr")).to_have_count(1)
        await expect(preview.locator("tbody tr")).to_contain_text("2031-06-01T06:00:00Z")
        await expect(preview.locator("tbody tr")).to_contain_text("2031-06-01T08:00:00+02:00")
        await expect(cron).to_be_hidden()
        await expect(tab.get_by_label("once, at run_at")).to_be_checked()
        await w.shot("no-js-preview-once")

        await tab.get_by_label("cron", exact=True).check()
        await expect(cron).to_be_visible()
        await tab.get_by_role("button", name="Create job").click()
        await p.status("Created nightly-report.")
        made = await store.get_job_by_name("nightly-report")
        assert made is not None and made.spec.cron == "30 2 * * *"

        # The job's actions, each confirmed on the page it returns to.
        await tab.goto(f"{url}/ui/jobs/{made.id}")
        await tab.get_by_role("link", name="Pause…").click()
        await tab.get_by_label("Reason").fill("checking the export")
        await tab.get_by_role("button", name="Pause job").click()
        await p.whole(re.compile(r"^nightly-report"))
        await p.status("Paused nightly-report.")
        await tab.get_by_role("link", name="Run with payload…").click()
        await expect(tab.locator("#paused-trigger")).to_contain_text("still starts at once")
        await tab.get_by_label("Payload").fill('{"n": 2}')
        await tab.get_by_role("button", name="Run now").click()
        await p.status(re.compile(r"^Triggered nightly-report: run #\d+ is due now\.$"))
        run_id = int(re.findall(r"#(\d+)", await tab.get_by_role("status").inner_text())[0])
        # As the page said: claim_runs takes a paused job's manual run now; it stays paused.
        claimed = await store.claim_runs(["echo"], 10, "probe", 30.0)
        assert [c.id for c in claimed] == [run_id]
        paused = await store.get_job(made.id)
        assert paused is not None and paused.spec.paused
        await tab.get_by_role("button", name="Resume").click()
        await p.status("Resumed nightly-report.")
        await tab.get_by_role("link", name="Edit").click()
        await tab.get_by_label("Max attempts").fill("4")
        await tab.get_by_role("button", name="Save").click()
        await p.status("Saved nightly-report.")

        # Run now from the jobs list; from the job's page, then cancel it from the run's page.
        await tab.goto(f"{url}/ui/jobs?q=nightly")
        row = tab.get_by_role("row").filter(has_text="nightly-report")
        await row.get_by_role("button", name="Run now").click()
        await p.status(re.compile(r"^Triggered nightly-report: run #\d+ is due now\.$"))
        await tab.goto(f"{url}/ui/jobs/{made.id}")
        await tab.get_by_role("button", name="Run now").click()
        await p.status(re.compile(r"^Triggered run #\d+"))
        await tab.get_by_role("button", name="Cancel run").click()
        await p.status(re.compile(r"^Cancelled run #\d+"))

        # Backfill: the count (a GET) and the creation (a POST).
        await tab.goto(f"{url}/ui/jobs/{hourly}")
        form = tab.locator("#backfill")
        await form.get_by_label("Instants from").fill(start.strftime("%Y-%m-%d %H:%M"))
        await form.get_by_label("until, before").fill(end.strftime("%Y-%m-%d %H:%M:%S"))
        await form.get_by_role("button", name="Count runs to backfill").click()
        await p.whole("Backfill hourly")
        await expect(tab.locator("#backfill-count")).to_contain_text("3 have no run")
        await tab.get_by_role("button", name="Create 3 runs").click()
        await p.status("Backfilled: created 3 runs, due now.")

        # Runs: one requeued from its page, the filter, the bulk requeue; deliveries.
        await tab.goto(f"{url}/ui/runs/{dead[0]}")
        await tab.get_by_role("button", name="Requeue").click()
        await p.status(f"Requeued run #{dead[0]}: it is due now.")
        await tab.get_by_role("navigation", name="main").get_by_role("link", name="Runs").click()
        await tab.locator("#job").fill("hourly")
        await tab.get_by_role("button", name="Filter").click()
        await p.whole("Runs")
        await tab.get_by_role("link", name="Requeue dead runs matching this filter…").click()
        await tab.get_by_role("button", name="Requeue 2 runs").click()
        await p.status(re.compile(r"^Requeued 2 runs"))
        await tab.get_by_role("link", name="Deliveries").click()
        await tab.get_by_role("button", name="Filter").click()
        await p.whole("Deliveries")

        # Delete, then log out.
        await tab.goto(f"{url}/ui/jobs/{made.id}")
        await tab.get_by_role("link", name="Delete…").click()
        await tab.get_by_role("button", name="Delete job").click()
        await p.status(re.compile(r"^Deleted nightly-report"))
        await tab.get_by_role("button", name="Log out").click()
        await expect(tab.get_by_role("heading", name="Log in")).to_be_visible()
        p.no_token_in_urls()
        w.no_errors()


async def test_job_actions_are_confirmed_and_a_paused_job_runs_a_manual_run(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    created = await jobs.create_job(store, job("billing", cron="0 2 * * *"), factory.LIMITS)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w, p = Watched(tab, tmp_path), Pages(tab)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/jobs/{created.id}")
        await tab.get_by_role("link", name="Pause…").click()
        await tab.get_by_role("button", name="Pause job").click()
        await p.status("Paused billing.")
        await w.shot("job-paused-confirmed")
        await tab.get_by_role("link", name="Run with payload…").click()
        note = tab.locator("#paused-trigger")
        await expect(note).to_contain_text("the manual run still starts at once")
        await expect(tab.get_by_text("waits for the resume")).to_have_count(0)
        await w.shot("trigger-paused")
        await tab.get_by_label("Payload").fill('{"month": 11}')
        await tab.get_by_role("button", name="Run now").click()
        await p.status(re.compile(r"^Triggered billing: run #\d+ is due now\.$"))
        run_id = int(re.findall(r"#(\d+)", await tab.get_by_role("status").inner_text())[0])
        claimed = await store.claim_runs(["echo"], 10, "probe", 30.0)  # what the page said
        assert [c.id for c in claimed] == [run_id] and json.loads(claimed[0].payload) == {
            "month": 11
        }
        await tab.get_by_role("button", name="Resume").click()
        await p.status("Resumed billing.")
        w.no_errors()
