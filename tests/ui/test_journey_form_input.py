"""Journeys through the job and backfill forms in a real Chromium against a real
`punchclock api`: a one-off hides the cron field and previews its instant as it is typed;
the type field suggests live workers' types, the name rule is shown up front, a UTC preview
has one time column; the backfill window is typed in one format and no input moves when an
error appears; a 10 MB payload comes back as an error at the field, the rest kept, and a
form over the limit elsewhere gets a page that says the limit and leads back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Locator, Page, expect

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, TOKENS, api_process
from ..helpers import job
from .journeys import Watched
from .test_axe import axe_script, violations
from .test_backfill import hourly_with_holes
from .test_journey_jobs import login

TEN_MB = 10_000_000
BIG = "(e, n) => { e.value = JSON.stringify({blob: 'x'.repeat(n)}); }"


async def test_a_one_off_hides_the_cron_and_previews_its_instant(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/jobs/new")
        await tab.get_by_label("Name", exact=True).fill("new-year")
        await tab.locator("#type").fill("echo")
        preview, cron = tab.locator("#preview"), tab.locator("#cron")
        await expect(preview.locator("tbody tr")).to_have_count(10)  # the default: hourly
        await tab.get_by_label("once, at run_at").check()
        await expect(cron).to_be_hidden()
        await expect(preview.get_by_role("heading")).to_have_text("Runs once")
        await tab.get_by_label("Run at").fill("2031-01-01T00:00")
        await tab.locator("#timezone").fill("Europe/Berlin")
        row = preview.locator("tbody tr")
        await expect(row).to_have_count(1)
        await expect(row).to_contain_text("2030-12-31T23:00:00Z")
        await expect(row).to_contain_text("2031-01-01T00:00:00+01:00")
        await w.shot("job-form-once")
        await tab.get_by_label("cron", exact=True).check()  # and back: the cron's instants
        await expect(cron).to_be_visible()
        await expect(tab.get_by_label("Run at")).to_be_hidden()
        await expect(preview.locator("tbody tr")).to_have_count(10)
        await tab.get_by_label("once, at run_at").check()
        await expect(preview.locator("tbody tr")).to_have_count(1)
        await tab.get_by_role("button", name="Create job").click()
        await expect(tab.get_by_role("status")).to_have_text("Created new-year.")
        made = await store.get_job_by_name("new-year")
        assert made is not None and made.spec.cron is None and made.spec.run_at is not None
        w.no_errors()


async def test_type_suggestions_name_rule_utc_preview_and_backfill_window(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    await store.upsert_worker("host-a:1", "host-a", 1, ["shell", "backup"], 4, "1", 30.0)
    await store.upsert_worker("host-b:2", "host-b", 2, ["retired"], 4, "1", 30.0)
    await store.stop_worker("host-b:2")
    hourly, start, end, _ = await hourly_with_holes(store)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/jobs/new")
        kind = tab.locator("#type")
        await expect(kind).to_have_attribute("list", "types")
        options = tab.locator("#types option")
        assert [await o.get_attribute("value") for o in await options.all()] == [
            "backup",
            "shell",
        ]
        await expect(kind).to_have_accessible_description(
            re.compile(r"^Live workers offer: backup, shell;")
        )
        await kind.fill("my-own-type")  # free text still
        name = tab.get_by_label("Name", exact=True)
        await expect(name).to_have_accessible_description(re.compile(r"^1-200 letters"))
        await expect(tab.locator("#name-hint")).to_be_visible()  # before any submit
        head = tab.locator("#preview thead th")
        await expect(head).to_have_text(["UTC"])  # a UTC job: one column, not "UTC | UTC"
        await w.shot("job-form-hints")

        await tab.goto(f"{url}/ui/jobs/{hourly}")  # its backfill card, then the count page
        since = tab.get_by_label("Instants from")
        await expect(since).to_have_attribute("type", "text")  # no locale format
        await expect(since).to_have_attribute("placeholder", "YYYY-MM-DD HH:MM:SS")
        form = tab.locator("form.backfill-window")
        await since.fill(start.strftime("%Y-%m-%d %H:%M"))
        await tab.get_by_label("until, before").fill(end.strftime("%Y-%m-%d %H:%M:%S"))
        await tab.get_by_role("button", name="Count runs to backfill").click()
        await expect(tab.locator("#backfill-count")).to_contain_text("3 have no run")
        await expect(since).to_have_value(start.strftime("%Y-%m-%d %H:%M"))  # as typed
        before = await _offset(since, form)
        w.expected.add(422)
        await tab.get_by_label("until, before").fill("next tuesday")
        await tab.get_by_role("button", name="Count runs to backfill").click()
        await expect(tab.locator("#bf-to-error")).to_contain_text("to: must be a date")
        assert await _offset(since, form) == before  # the error moved nothing
        until = tab.get_by_label("until, before")
        assert (await _offset(until, form))[1] == before[1]  # the two on one line
        await expect(until).to_have_accessible_description(re.compile(r"to: must be a date"))
        await w.shot("backfill-error")
        w.no_errors()


async def _offset(field: Locator, form: Locator) -> tuple[float, float]:
    a, b = await field.bounding_box(), await form.bounding_box()
    assert a is not None and b is not None
    return a["x"] - b["x"], a["y"] - b["y"]


async def test_a_10_mb_payload_is_an_error_at_the_field_the_rest_kept(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    created = await jobs.create_job(store, job("billing"), factory.LIMITS)
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        w.expected.add(413)
        await login(tab, url, ADMIN)
        await tab.goto(f"{url}/ui/jobs/new")
        await tab.get_by_label("Name", exact=True).fill("big-one")
        await tab.locator("#type").fill("echo")
        await tab.locator("#cron").fill("15 3 * * *")
        await tab.get_by_label("Max attempts").fill("7")
        await tab.locator("#payload").evaluate(BIG, TEN_MB)
        await tab.get_by_role("button", name="Create job").click()
        error = tab.locator("#payload-error")
        await expect(error).to_contain_text("payload: is 9.5 MiB as sent")
        await expect(error).to_contain_text("at most 1.0 MiB (the server's api_max_body)")
        await expect(tab.locator("#payload")).to_have_attribute("aria-invalid", "true")
        await expect(tab.get_by_label("Name", exact=True)).to_have_value("big-one")
        await expect(tab.locator("#cron")).to_have_value("15 3 * * *")
        await expect(tab.get_by_label("Max attempts")).to_have_value("7")
        await expect(tab.locator("#preview tbody tr").first).to_contain_text("T03:15:00Z")
        assert await store.get_job_by_name("big-one") is None
        await w.shot("job-form-too-large")

        # The trigger page too: its form again, the error at the payload with size and limit.
        await tab.goto(f"{url}/ui/jobs/{created.id}/trigger")
        await tab.get_by_label("Payload").evaluate(BIG, TEN_MB)
        await tab.get_by_role("button", name="Run now").click()
        await expect(tab.get_by_role("heading", level=1)).to_have_text("Run now billing")
        error = tab.locator("#payload-error")
        await expect(error).to_contain_text("payload: is 9.5 MiB as sent")
        await expect(error).to_contain_text("at most 1.0 MiB (the server's api_max_body)")
        await expect(tab.get_by_label("Payload")).to_have_attribute("aria-invalid", "true")
        await w.shot("trigger-too-large")
        # Elsewhere (a pause reason), a page saying the limit, and the way back.
        await tab.goto(f"{url}/ui/jobs/{created.id}/pause")
        await tab.get_by_label("Reason").evaluate(BIG, TEN_MB)
        await tab.get_by_role("button", name="Pause job").click()
        await expect(tab.get_by_role("heading", level=1)).to_have_text("413 · Form too large")
        await expect(tab.locator(".error-page")).to_contain_text("at most 1.0 MiB")
        await w.shot("form-too-large-page")
        await tab.get_by_role("link", name="Back to the form").click()
        await expect(tab.get_by_role("heading", level=1)).to_have_text("Pause billing")
        assert await factory.count(store, "runs", "trigger = 'manual'") == 0
        w.no_errors()


async def test_the_forms_states_pass_axe(
    chromium: Browser, store: Store, dsn: str, tmp_path: Path
) -> None:
    """What the fixed pages of test_axe do not reach: a form with errors, a one-off's
    preview, a paused job's trigger page (and its payload over the limit), the backfill count
    with an error, the 413 page, the runs filter's errors, a focused confirmation."""
    script = axe_script()
    made = await jobs.create_job(store, job("billing", paused=True), factory.LIMITS)
    hourly, start, end, _ = await hourly_with_holes(store)
    context = await chromium.new_context(bypass_csp=True)  # to inject axe-core
    try:
        tab = await context.new_page()
        with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
            url = api.url()
            w = Watched(tab, tmp_path)
            w.expected |= {413, 422}
            await login(tab, url, ADMIN)
            found: dict[str, list[dict[str, Any]]] = {}
            await tab.goto(f"{url}/ui/jobs/new")
            await tab.get_by_label("once, at run_at").check()
            await tab.get_by_label("Run at").fill("2020-01-01T00:00")
            await tab.get_by_role("button", name="Preview only").click()
            await expect(tab.locator("#preview")).to_contain_text("already past")
            found["once preview"] = await violations(tab, script)
            await tab.get_by_role("button", name="Create job").click()
            await expect(tab.locator("#name-error")).to_be_visible()
            found["form errors"] = await violations(tab, script)
            await tab.locator("#payload").evaluate(BIG, 2_000_000)
            await tab.get_by_role("button", name="Create job").click()
            await expect(tab.locator("#payload-error")).to_be_visible()
            found["payload too large"] = await violations(tab, script)
            await tab.goto(f"{url}/ui/jobs/{made.id}/trigger")
            await expect(tab.locator("#paused-trigger")).to_be_visible()
            found["trigger paused"] = await violations(tab, script)
            await tab.get_by_label("Payload").evaluate(BIG, 2_000_000)
            await tab.get_by_role("button", name="Run now").click()
            await expect(tab.locator("#payload-error")).to_be_visible()
            found["trigger too large"] = await violations(tab, script)
            await tab.goto(f"{url}/ui/jobs/{made.id}/pause")
            await tab.get_by_label("Reason").evaluate(BIG, 2_000_000)
            await tab.get_by_role("button", name="Pause job").click()
            await expect(tab.get_by_role("link", name="Back to the form")).to_be_visible()
            found["413 page"] = await violations(tab, script)
            window = f"from={start:%Y-%m-%d %H:%M}&to={end:%Y-%m-%d %H:%M}"
            await tab.goto(f"{url}/ui/jobs/{hourly}/backfill?{window}")
            await expect(tab.locator("#backfill-count")).to_be_visible()
            found["backfill count"] = await violations(tab, script)
            await tab.goto(f"{url}/ui/jobs/{hourly}/backfill?from=x&to=y")
            await expect(tab.locator("#bf-to-error")).to_be_visible()
            found["backfill errors"] = await violations(tab, script)
            await tab.goto(f"{url}/ui/runs?scheduled_after=x&finished_before=y")
            await expect(tab.locator("#finished_before-error")).to_be_visible()
            found["runs filter errors"] = await violations(tab, script)
            await tab.goto(f"{url}/ui/jobs?done=paused&job=billing")
            await expect(tab.locator("#notice")).to_be_focused()
            found["focused confirmation"] = await violations(tab, script)
            w.no_errors()
    finally:
        await context.close()
    assert {k: v for k, v in found.items() if v} == {}
