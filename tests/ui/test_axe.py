"""axe-core's rules (WCAG 2 A/AA and best practices) over every dashboard page, as admin and
as a read session, against seeded data: zero violations. axe-core comes from the npm
registry (`npm install --prefix tests/ui/.axe axe-core@4`, which .ci/run does); the pages'
CSP stays as it is, the browser context bypasses it to inject the script."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from supervisor.core.store import Store

from ..api_support import ADMIN, READER, TOKENS, api_process
from .journeys import Watched
from .seeded import seed

AXE = Path(__file__).parent / ".axe" / "node_modules" / "axe-core" / "axe.min.js"
INSTALL = "npm install --prefix tests/ui/.axe axe-core@4"


def axe_script() -> Path:
    if AXE.exists():
        return AXE
    if os.environ.get("CI") == "true":
        pytest.fail(f"{AXE} is missing in CI: .ci/run runs `{INSTALL}`")
    pytest.skip(f"axe-core is not installed here: {INSTALL}")


async def violations(page: Page, script: Path) -> list[dict[str, Any]]:
    """axe.run's violations on the page as loaded, each with its first few nodes."""
    await page.add_script_tag(path=str(script))
    found: list[dict[str, Any]] = await page.evaluate(
        """async () => (await axe.run(document)).violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 3).map(n => [n.target.join(" "), n.failureSummary])}))"""
    )
    return found


def pages(s: Any) -> list[str]:
    j, o, r = s.job_id, s.one_off_id, s.run_id
    return [
        "/ui/", "/ui/jobs", "/ui/jobs?q=etl", f"/ui/jobs/{j}", f"/ui/jobs/{o}",
        f"/ui/runs/{r}", "/ui/runs", "/ui/runs?tab=upcoming", "/ui/workers",
        "/ui/deliveries", "/ui/jobs/new", f"/ui/jobs/{j}/edit", f"/ui/jobs/{j}/pause",
        f"/ui/jobs/{j}/trigger", f"/ui/jobs/{j}/delete", "/ui/runs/requeue",
        f"/ui/jobs/{j}/backfill?from=2026-01-01T00:00&to=2026-01-01T06:00",
        "/ui/runs?job=ETL&status=dead", "/ui/jobs?last=dead&sort=next",
    ]  # fmt: skip


async def login(page: Page, url: str, token: str) -> None:
    await page.goto(f"{url}/ui/login")
    await page.get_by_label("API token").fill(token)
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("heading", name="Overview")).to_be_visible()


async def test_every_page_passes_axe(
    chromium: Browser, store: Store, dsn: str, tmp_path: Path
) -> None:
    script = axe_script()
    seeded = await seed(store)
    report: dict[str, list[dict[str, Any]]] = {}
    with api_process(dsn, "--listen", "127.0.0.1:0", *[f"--api-token={t}" for t in TOKENS]) as api:
        url = api.url()
        for role, token in (("admin", ADMIN), ("read", READER)):
            context = await chromium.new_context(
                viewport={"width": 1280, "height": 800}, bypass_csp=True
            )
            try:
                page = await context.new_page()
                w = Watched(page, tmp_path)
                await page.goto(f"{url}/ui/login")
                found = await violations(page, script)
                if found:
                    report[f"{role} /ui/login"] = found
                await login(page, url, token)
                for path in pages(seeded):
                    if role == "read" and path.startswith(("/ui/jobs/new", "/ui/runs/requeue")):
                        continue
                    if role == "read" and path.endswith(("/edit", "/pause", "/trigger", "/delete")):
                        continue
                    response = await page.goto(url + path)
                    assert response is not None and response.status == 200, (role, path)
                    found = await violations(page, script)
                    if found:
                        report[f"{role} {path}"] = found
                        await w.shot(f"axe-{role}-{path.strip('/').replace('/', '-') or 'home'}")
                w.no_errors()
            finally:
                await context.close()
    assert report == {}, json.dumps(report, indent=1)
