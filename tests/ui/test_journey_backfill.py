"""Journey: backfill a window with holes in a real Chromium against a real `punchclock api`:
the count comes first, then exactly the holes get runs."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core.store import Store

from ..api_support import ADMIN, TOKENS, api_process
from .journeys import Watched
from .test_backfill import backfilled, hourly_with_holes
from .test_journey_jobs import login


async def test_backfill_fills_exactly_the_holes(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    job_id, start, end, holes = await hourly_with_holes(store)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/jobs/{job_id}")
        await expect(
            tab.get_by_role("heading", name="Last 7 days and next 24 hours")
        ).to_be_visible()
        await w.shot("job-timeline")
        form = tab.locator("#backfill")
        await form.get_by_label("Instants from (UTC)").fill(start.strftime("%Y-%m-%dT%H:%M:%S"))
        await form.get_by_label("until, before (UTC)").fill(end.strftime("%Y-%m-%dT%H:%M:%S"))
        await form.get_by_role("button", name="Count runs to backfill").click()
        await expect(tab.locator("#backfill-count")).to_contain_text("6 instants")
        await expect(tab.locator("#backfill-count")).to_contain_text("3 have no run")
        assert await backfilled(store, job_id) == []  # counted, nothing created yet
        await w.shot("job-backfill-count")
        await tab.get_by_role("button", name="Create 3 runs").click()
        await expect(tab.get_by_role("status")).to_have_text("Backfilled: created 3 runs, due now.")
        assert await backfilled(store, job_id) == holes
        runs = tab.locator("#runs tbody tr").filter(has_text="backfill")
        await expect(runs).to_have_count(3)
        w.no_errors()
