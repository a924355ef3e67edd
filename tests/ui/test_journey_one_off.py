"""Issue 63, item 9, in a real Chromium against a real `punchclock api`: a one-off job whose
run is over says what happened (done, or missed and why) on the jobs list and its page, with
no Pause button; its skipped run says why no attempt exists. The API accepts a run_at
already past with a warning saying what will happen (the policy: DESIGN.md, Dashboard)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, TOKENS, api_process, http
from .journeys import Watched
from .seeded import seed
from .test_journey_jobs import login


async def test_one_offs_say_what_happened_and_a_past_run_at_is_warned(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    await seed(store)  # "one-shot": a one-off whose run succeeded 4 minutes ago
    now = await store.now()
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        past = {
            "name": "late-report",
            "type": "echo",
            "run_at": (now - timedelta(hours=2)).isoformat(),
        }
        status, _, body = http(f"{url}/v1/jobs", "POST", ADMIN, past)
        assert status == 201, body
        created = json.loads(body)
        [warning] = [w for w in created["warnings"] if w.startswith("run_at:")]
        assert "is already past" in warning and "recorded as skipped (missed)" in warning
        missed_id = created["id"]
        [missed_run] = await factory.run_ids(store, missed_id)
        soon = {"name": "soon", "type": "echo", "run_at": (now + timedelta(hours=2)).isoformat()}
        status, _, body = http(f"{url}/v1/jobs", "POST", ADMIN, soon)
        assert status == 201 and not [w for w in json.loads(body)["warnings"] if "run_at" in w]
        soon_id = json.loads(body)["id"]
        moved = {"run_at": (now - timedelta(minutes=10)).isoformat()}
        status, _, body = http(f"{url}/v1/jobs/{soon_id}", "PATCH", ADMIN, moved)
        assert status == 200, body
        assert any("due at once" in w for w in json.loads(body)["warnings"]), body
        status, _, body = http(f"{url}/v1/jobs/{missed_id}", "GET", ADMIN)
        assert not [w for w in json.loads(body)["warnings"] if "run_at" in w]  # said once

        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/jobs")
        done = tab.get_by_role("row").filter(has_text="one-shot")
        await expect(done.locator(".badge").last).to_have_text("done")
        await expect(done).to_contain_text("done: succeeded at")
        await expect(done.get_by_role("link", name="Pause…")).to_have_count(0)
        missed = tab.get_by_role("row").filter(has_text="late-report")
        await expect(missed.locator(".badge").last).to_have_text("missed")
        await expect(missed).to_contain_text("missed: skipped at")
        await expect(missed).to_contain_text("catch-up policy")
        await expect(missed.get_by_role("link", name="Pause…")).to_have_count(0)
        active = tab.get_by_role("row").filter(has_text="etl-hourly")
        await expect(active.get_by_role("link", name="Pause…")).to_have_count(1)
        await w.shot("jobs-one-offs")

        await missed.get_by_role("link", name="late-report").click()
        await expect(tab.locator("#one-off")).to_contain_text(
            "This one-off job is over, missed: skipped at"
        )
        await expect(tab.get_by_role("link", name="Pause…")).to_have_count(0)
        await expect(tab.get_by_role("button", name="Run now")).to_be_visible()
        await w.shot("job-missed")
        await tab.locator("#one-off").get_by_role("link", name=f"run #{missed_run}").click()
        await expect(tab.get_by_text("No attempt: the run was skipped (missed)")).to_be_visible()
        w.no_errors()
