"""Journey with a real supervisor, a real `punchclock api` and Chromium: trigger a job from
its page and watch its run go to succeeded without reloading (server-sent events), its
output appearing while the child still runs; a failing job's run ends dead and is requeued
from the page; no console errors."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, TOKENS, api_process
from ..e2e.procs import Cluster
from ..helpers import job
from .journeys import Watched
from .test_journey_jobs import login


async def test_trigger_watch_live_and_requeue_dead(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    out = tmp_path / "out.csv"
    hello = await jobs.create_job(
        store,
        job("hello", "append", cron="0 0 1 1 *", payload={"out": str(out), "sleep": 1.5}),
        factory.LIMITS,
    )
    broken = await jobs.create_job(
        store, job("broken", "fail", cron="0 0 1 1 *", max_attempts=1), factory.LIMITS
    )
    cluster = Cluster(tmp_path, dsn)
    try:
        await cluster.start_ready("w1", {"append": "append", "fail": "fail"}, poll_interval=0.2)
        with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
            url = api.url()
            w = Watched(tab, tmp_path)
            await login(tab, url, ADMIN)
            await tab.goto(f"{url}/ui/jobs/{hello.id}")
            await tab.get_by_role("button", name="Run now").click()
            badge = tab.locator("#run-live h1 .badge")
            await expect(tab.get_by_role("status")).to_contain_text("Triggered run")
            await expect(badge).to_have_text("running", timeout=15_000)  # no reload: SSE
            await expect(tab.get_by_text("lease expires")).to_be_visible()
            await w.shot("run-running")
            await expect(badge).to_have_text("succeeded", timeout=15_000)
            await expect(tab.get_by_role("heading", name="Attempt 1")).to_be_visible()
            await w.shot("run-succeeded")

            await tab.goto(f"{url}/ui/jobs/{broken.id}")
            await tab.get_by_role("button", name="Run now").click()
            await expect(badge).to_have_text("dead", timeout=15_000)
            await expect(tab.locator("#run-live")).to_contain_text("failing on purpose")
            await tab.get_by_role("button", name="Requeue").click()
            await expect(tab.get_by_role("status")).to_contain_text("Requeued run")
            await expect(tab.get_by_role("heading", name="Attempt 2")).to_be_visible(timeout=15_000)
            await expect(badge).to_have_text("dead", timeout=15_000)
            await w.shot("run-requeued")
            await tab.get_by_role("link", name="Overview").click()
            await expect(tab.get_by_role("heading", name="Last hour, per minute")).to_be_visible()
            await w.shot("overview")
            await tab.get_by_role("link", name="Runs").click()
            await expect(tab.get_by_role("link", name="broken").first).to_be_visible()
            await w.shot("runs")
            w.no_errors()
    finally:
        cluster.stop_all()


async def test_a_running_childs_output_appears_live(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    talk = await jobs.create_job(
        store,
        job(
            "talk",
            "talk",
            cron="0 0 1 1 *",
            payload={"lines": ["step 1 <b>not bold</b>", "step 2"], "release": str(release)},
        ),
        factory.LIMITS,
    )
    cluster = Cluster(tmp_path, dsn)
    try:
        await cluster.start_ready("w1", {"talk": "talk"}, poll_interval=0.2)
        with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
            url = api.url()
            w = Watched(tab, tmp_path)
            await login(tab, url, ADMIN)
            await tab.goto(f"{url}/ui/jobs/{talk.id}")
            await tab.get_by_role("button", name="Run now").click()
            badge = tab.locator("#run-live h1 .badge")
            live = tab.locator("#run-live")
            await expect(badge).to_have_text("running", timeout=15_000)
            # The child blocks until released: its output shows while it runs, as text.
            await expect(live).to_contain_text("step 2", timeout=10_000)
            await expect(live).to_contain_text("step 1 <b>not bold</b>")
            assert await badge.text_content() == "running"
            assert await tab.locator("#run-live b").count() == 0  # escaped, not markup
            await w.shot("run-live-output")
            release.touch()
            await expect(badge).to_have_text("succeeded", timeout=15_000)
            await expect(live).to_contain_text("released")
            w.no_errors()
    finally:
        cluster.stop_all()
