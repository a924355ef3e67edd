"""Journey in a real Chromium against a real `punchclock api` (issue 63, item 1): long names,
payload lines, errors, worker ids and types wrap inside their boxes on every page (none is
wider than the window); a 900 KB payload is shown cut, with a download of the whole that
an operator gets and a read session does not."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, READER, TOKENS, api_process
from ..helpers import job
from .journeys import Watched
from .seeded import seed
from .test_journey_jobs import login

WIDTH = 1280
LONG_NAME = ("nightly-warehouse-export-" * 8)[:200]
LINE = "x" * 300
BIG = {"blob": "z" * 900_000}


async def _long_values(store: Store) -> tuple[int, int, int]:
    """A job with a long name, payload line and error; one with a 900 KB payload."""
    long = await jobs.create_job(
        store, job(LONG_NAME, "t" * 90, cron="0 0 1 1 *", payload={"line": LINE}), factory.LIMITS
    )
    [run_id] = await factory.insert_runs(store, long.id, 1, status="dead")
    await factory.set_run(store, run_id, last_error="E" * 300, payload={"line": LINE})
    big = await jobs.create_job(store, job("big", cron="0 0 1 1 *", payload=BIG), factory.LIMITS)
    worker = "w" * 150
    await store.upsert_worker(worker, "h" * 120, 1, ["t" * 90, "echo"], 8, "1.0.0", 30.0)
    await factory.sql(store, "UPDATE outbox SET last_error = $1", "D" * 300)
    return long.id, run_id, big.id


async def _fits(w: Watched, url: str, name: str) -> None:
    await w.page.goto(url)
    width = await w.page.evaluate("document.documentElement.scrollWidth")
    if width > WIDTH:
        await w.shot(f"too-wide-{name}")
    assert width <= WIDTH, f"{url}: {width} px wide"


async def test_long_values_wrap_and_big_payloads_are_cut(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    await seed(store)
    long_id, run_id, big_id = await _long_values(store)
    args = [f"--api-token={t}" for t in TOKENS]
    with api_process(dsn, "--listen", "127.0.0.1:0", *args) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        pages = {"overview": "/ui/", "jobs": "/ui/jobs", "job": f"/ui/jobs/{long_id}",
                 "runs": "/ui/runs", "run": f"/ui/runs/{run_id}", "workers": "/ui/workers",
                 "deliveries": "/ui/deliveries", "big": f"/ui/jobs/{big_id}"}  # fmt: skip
        for name, path in pages.items():
            await _fits(w, url + path, name)
        await tab.goto(f"{url}/ui/jobs/{long_id}")
        await expect(tab.locator("pre.payload")).to_contain_text(LINE)
        await w.shot("job-long-values")

        response = await tab.goto(f"{url}/ui/jobs/{big_id}")
        assert response is not None and len(await response.body()) < 100_000
        await expect(tab.locator(".payload-cut")).to_contain_text("Cut at 4096 characters")
        await w.shot("job-big-payload")
        async with tab.expect_download() as info:
            await tab.get_by_role("link", name="Download the whole payload (JSON)").click()
        download = await info.value
        assert download.suggested_filename == f"job-{big_id}-payload.json"
        assert json.loads(Path(await download.path()).read_text()) == BIG
        w.no_errors()

        await tab.get_by_role("button", name="Log out").click()
        await login(tab, url, READER)
        await tab.goto(f"{url}/ui/jobs/{big_id}")
        await expect(tab.get_by_text("withheld from read sessions")).to_be_visible()
        await expect(tab.locator(".payload-cut")).to_have_count(0)
        w.expected.add(403)
        for path in (f"/ui/jobs/{big_id}/payload", f"/ui/runs/{run_id}/payload"):
            response = await tab.goto(url + path)
            assert response is not None and response.status == 403, path
            assert "z" * 100 not in await response.text() and LINE not in await response.text()
        w.no_errors()
