"""Journey: create a job in a real Chromium against a real `punchclock api`: a bad cron
shows its error at the field, the preview follows the typing, the saved job is listed."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core.store import Store

from ..api_support import ADMIN, TOKENS, api_process
from .journeys import Watched
from .test_journey_jobs import login


async def test_create_a_job_watching_the_preview(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/jobs")
        await tab.get_by_role("link", name="New job").click()
        preview = tab.locator("#preview")
        await tab.get_by_label("Name", exact=True).fill("berlin-backup")
        await tab.locator("#type").fill("shell")
        cron = tab.locator("#cron")
        await cron.fill("61 2 * * *")  # the preview says what is wrong as you type
        await expect(preview.locator("#preview-error")).to_contain_text("cron:")
        w.expected.add(422)
        await tab.get_by_role("button", name="Create job").click()
        await expect(tab.locator("#cron-error")).to_contain_text("cron:")
        await expect(cron).to_have_attribute("aria-invalid", "true")
        await w.shot("job-form-error")
        await cron.fill("30 2 * * *")
        await expect(preview.locator("tbody tr")).to_have_count(10)
        await expect(preview).to_contain_text("02:30:00Z")  # UTC: one column
        zone = tab.locator("#timezone")
        await zone.fill("Europe/Berlin")
        await expect(preview).to_contain_text("02:30:00+01:00")  # now in Berlin's wall clock
        await cron.fill("30 2 1 1 *")  # once a year: every row a New Year's night
        await expect(preview.locator("tbody tr").last).to_contain_text("-01-01T02:30:00+01:00")
        await expect(preview.locator("tbody tr").first).to_contain_text("-01-01T02:30:00+01:00")
        await w.shot("job-form-preview")
        await tab.get_by_role("button", name="Create job").click()
        await expect(tab.get_by_role("status")).to_have_text("Created berlin-backup.")
        row = tab.get_by_role("row").filter(has_text="berlin-backup")
        await expect(row).to_contain_text("30 2 1 1 *")
        await expect(row).to_contain_text("Europe/Berlin")
        job = await store.get_job_by_name("berlin-backup")
        assert job is not None and job.spec.type == "shell"
        w.no_errors()
