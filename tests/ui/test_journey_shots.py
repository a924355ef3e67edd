"""The README's screenshots, taken here against seeded data: the overview and a job's
timeline. Written under the test's tmp dir (artifacts); with PUNCHCLOCK_README_SHOTS=docs
they replace docs/dashboard-*.png (then look at them before committing)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, TOKENS, api_process
from ..helpers import job
from .journeys import Watched
from .test_journey_jobs import login

# Past runs every `step` minutes over `hours`, every `bad`-th one dead, one in `skip` skipped.
HISTORY = """
INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts, status, attempts,
                  started_at, finished_at, skip_reason, last_error)
SELECT $1, t, t, 'echo', 3, s::run_status, CASE WHEN s = 'skipped' THEN 0 ELSE 1 END,
       CASE WHEN s <> 'skipped' THEN t + make_interval(secs => 0.2 + (g % 7) * 0.4) END,
       CASE WHEN s <> 'skipped' THEN t + make_interval(secs => 5 + (g * 37 % 11) * $2 / 10.0) END,
       CASE WHEN s = 'skipped' THEN 'missed' END,
       CASE WHEN s = 'dead' THEN 'exit code 1' END
FROM (SELECT g, date_trunc('minute', now()) - make_interval(mins => g * $3) AS t,
             CASE WHEN g % $4 = 0 THEN 'dead' WHEN g % $5 = 0 THEN 'skipped'
                  ELSE 'succeeded' END AS s
      FROM generate_series(1, $6 * 60 / $3) g) x
ON CONFLICT DO NOTHING
"""


async def seed(store: Store) -> int:
    specs = [
        ("billing-export", "0 2 * * *", "Europe/Berlin", (60, 1440, 5, 999, 7 * 24)),
        ("etl-hourly", "0 * * * *", "UTC", (40, 60, 17, 23, 7 * 24)),
        ("ping", "*/5 * * * *", "UTC", (2, 5, 41, 97, 24)),
        ("thumbnails", "*/10 * * * *", "America/New_York", (8, 10, 13, 1000, 24)),
    ]
    ids = {}
    for name, cron, zone, args in specs:
        created = await jobs.create_job(store, job(name, cron=cron, timezone=zone), factory.LIMITS)
        ids[name] = created.id
        await factory.sql(store, HISTORY, created.id, *args)
    await jobs.create_job(store, job("weekly-report", "pdf", cron="0 6 * * 1"), factory.LIMITS)
    await store.upsert_worker("host-a:4711", "host-a", 4711, ["echo"], 8, "1.0.0", 30.0)
    return ids["etl-hourly"]


async def test_readme_screenshots(tab: Page, store: Store, dsn: str, tmp_path: Path) -> None:
    timeline_job = await seed(store)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        # Listed as unserved (no live worker offers pdf). Not get_by_text: on a Monday before
        # 06:00 UTC its next run is also among the overview's next runs due.
        unserved = tab.get_by_role("listitem").filter(has_text="weekly-report")
        await expect(unserved).to_contain_text("type pdf")
        overview = tmp_path / "dashboard-overview.png"
        await tab.screenshot(path=str(overview))  # the viewport: what a README can hold
        await tab.goto(f"{url}/ui/jobs/{timeline_job}")
        card = tab.locator(".timeline-card")
        await expect(card).to_be_visible()
        timeline = tmp_path / "dashboard-timeline.png"
        await tab.screenshot(path=str(timeline))
        w.no_errors()
    target = os.environ.get("PUNCHCLOCK_README_SHOTS")
    if target:
        for shot in (overview, timeline):
            shutil.copy(shot, Path(target) / shot.name)
