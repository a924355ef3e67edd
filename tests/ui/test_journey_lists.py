"""Journeys over the runs list in a real Chromium against a real `punchclock api` (issue 63):
an ended run names the worker of its last attempt (page, run page and the API's JSON, which
`punchclock runs list` prints); the job filter takes a substring in any case, as the jobs
list's does, with LIKE's wildcards as plain characters."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, TOKENS, api_process, http
from ..helpers import job
from .journeys import Watched
from .seeded import WORKER, seed
from .test_journey_jobs import login


async def test_ended_runs_name_their_last_worker(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    s = await seed(store)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/runs?job=etl-hourly")
        rows = tab.locator("tbody tr")
        await expect(rows).to_have_count(12)
        for i in range(12):
            await expect(rows.nth(i).locator("td").nth(7)).to_have_text(WORKER)
        await w.shot("runs-workers")
        await tab.goto(f"{url}/ui/runs/{s.run_id}")
        await expect(tab.locator("#run-live dl").first).to_contain_text(f"{WORKER} (last attempt)")
        w.no_errors()
        status, _, body = http(f"{url}/v1/runs?job_name=etl-hourly", "GET", ADMIN)
        assert status == 200, body
        assert {r["worker_id"] for r in json.loads(body)["runs"]} == {WORKER}
        status, _, body = http(f"{url}/v1/runs/{s.run_id}", "GET", ADMIN)
        assert json.loads(body)["worker_id"] == WORKER


async def test_job_filter_is_a_substring_in_any_case(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    names = ("etl-hourly", "ETL_Nightly", "etlxnightly", "billing")
    for name in names:
        created = await jobs.create_job(store, job(name, cron="0 0 1 1 *"), factory.LIMITS)
        await factory.insert_runs(store, created.id, 2)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        job_cells = tab.locator("tbody td.name")
        await tab.goto(f"{url}/ui/runs?job=eTl")  # a link or a bookmark: the same rule
        await expect(job_cells).to_have_count(6)

        async def filter_by(text: str, *shown: str) -> None:
            await tab.get_by_label("Job name contains").fill(text)
            await tab.get_by_role("button", name="Filter").click()
            await expect(job_cells).to_have_count(2 * len(shown))
            assert sorted(set(await job_cells.all_inner_texts())) == sorted(shown)

        await filter_by("etl", "etl-hourly", "ETL_Nightly", "etlxnightly")
        await w.shot("runs-filter-etl")
        await filter_by("L_n", "ETL_Nightly")  # `_` is a character, not LIKE's any-one
        await filter_by("%", *())
        await expect(tab.get_by_text("No run due by now matches.")).to_be_visible()
        await tab.goto(f"{url}/ui/jobs")
        await tab.get_by_label("Name contains").fill("L_n")
        await expect(tab.locator("tbody td.name a")).to_have_text(["ETL_Nightly"])
        w.no_errors()
