"""Issue 63's leftovers in a real Chromium against a real `punchclock api`: a UTC job's page
lists its instants in one column; a confirmation takes the focus at load (no script) so a
screen reader announces it; a one-off saved with a run_at already past lands on a page with
the API's warning (jobs.past_run_at); the runs page's date filters are written as the
backfill's are, with errors naming the field."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, TOKENS, api_process
from ..helpers import job
from .journeys import Watched
from .test_journey_jobs import login

FOCUSED = "() => document.activeElement && document.activeElement.id"


async def test_a_utc_job_has_one_time_column_and_a_confirmation_takes_the_focus(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    utc = await jobs.create_job(store, job("utc-hourly", cron="0 * * * *"), factory.LIMITS)
    berlin = job("berlin-daily", cron="0 2 * * *", timezone="Europe/Berlin")
    zoned = await jobs.create_job(store, berlin, factory.LIMITS)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/jobs/{zoned.id}")
        instants = tab.locator("section").filter(has_text="Next 20 instants").locator("table")
        await expect(instants.locator("thead th")).to_have_text(["UTC", "Europe/Berlin"])
        await tab.goto(f"{url}/ui/jobs/{utc.id}")
        await expect(instants.locator("thead th")).to_have_text(["UTC"])
        await expect(instants.locator("tbody tr").first.locator("td")).to_have_count(1)
        await w.shot("job-utc-instants")

        await tab.get_by_role("link", name="Pause…").click()
        await tab.get_by_role("button", name="Pause job").click()
        notice = tab.get_by_role("status")
        await expect(notice).to_have_text("Paused utc-hourly.")
        await expect(notice).to_be_focused()
        assert await tab.evaluate(FOCUSED) == "notice"
        await w.shot("job-paused-focused")

        await tab.goto(f"{url}/ui/jobs")
        row = tab.get_by_role("row").filter(has_text="berlin-daily")
        await row.get_by_role("button", name="Run now").click()
        await expect(tab.get_by_role("status")).to_contain_text("Triggered berlin-daily")
        await expect(tab.get_by_role("status")).to_be_focused()
        assert await tab.evaluate(FOCUSED) == "notice"
        w.no_errors()


async def test_a_one_off_saved_with_a_past_run_at_lands_on_its_warning(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    now = await store.now()
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/jobs/new")
        await tab.get_by_label("Name", exact=True).fill("late-report")
        await tab.locator("#type").fill("echo")
        await tab.get_by_label("once, at run_at").check()
        await tab.get_by_label("Run at").fill(f"{now - timedelta(hours=2):%Y-%m-%dT%H:%M}")
        await tab.get_by_role("button", name="Create job").click()
        await expect(tab.locator("#notice")).to_have_text("Created late-report.")
        warning = tab.locator("#notice-warning")
        await expect(warning).to_contain_text("run_at: ")
        await expect(warning).to_contain_text("is already past")
        await expect(warning).to_contain_text("recorded as skipped (missed)")
        assert "run_at" in tab.url and "csrf" not in tab.url and "past" not in tab.url
        await w.shot("one-off-past-created")

        soon = job("soon", cron=None, run_at=now + timedelta(hours=2))
        made = await jobs.create_job(store, soon, factory.LIMITS)
        await tab.goto(f"{url}/ui/jobs/{made.id}/edit")
        await tab.get_by_label("Run at").fill(f"{now - timedelta(minutes=10):%Y-%m-%dT%H:%M}")
        await tab.get_by_role("button", name="Save", exact=True).click()
        await expect(tab.locator("#notice")).to_have_text("Saved soon.")
        await expect(tab.locator("#notice-warning")).to_contain_text("is already past")
        await tab.goto(f"{url}/ui/jobs/{made.id}/edit")  # saved again, run_at unchanged
        await tab.get_by_role("button", name="Save", exact=True).click()
        await expect(tab.locator("#notice")).to_have_text("Saved soon.")
        await expect(tab.locator("#notice-warning")).to_have_count(0)
        w.no_errors()


async def test_the_runs_date_filters_are_written_in_utc_with_errors_at_the_field(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        w.expected.add(422)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/runs")
        after = tab.get_by_label("Scheduled from (UTC)")
        await expect(after).to_have_attribute("type", "text")
        await expect(after).to_have_attribute("placeholder", "YYYY-MM-DD HH:MM:SS")
        await expect(tab.locator("#runs-format")).to_contain_text("UTC, written 2026-12-01 10:00")
        await after.fill("2026-12-01 10:00")
        await tab.get_by_label("Finished from (UTC)").fill("yesterday")
        await tab.get_by_role("button", name="Filter").click()
        error = tab.locator("#finished_after-error")
        await expect(error).to_have_text(
            "finished_after: must be a date and time, e.g. 2026-12-01T10:00"
        )
        await expect(tab.get_by_label("Finished from (UTC)")).to_have_attribute(
            "aria-invalid", "true"
        )
        await expect(after).to_have_value("2026-12-01 10:00")
        await expect(after).not_to_have_attribute("aria-invalid", "true")
        await w.shot("runs-filter-error")
        w.no_errors()
