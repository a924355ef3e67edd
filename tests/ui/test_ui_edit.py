"""The new / edit job form without a browser: every field reaches the API's validation, its
errors appear next to their fields, the preview fragment marks the DST rules."""

from __future__ import annotations

from supervisor.core import channels
from supervisor.core.events import validate_channel
from supervisor.core.groups import groups
from supervisor.core.store import Store

from .. import factory
from .conftest import Ui
from .test_ui_jobs import make

FORM = {
    "name": "nightly",
    "type": "shell",
    "kind": "cron",
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "run_at": "",
    "payload": '{"n": 1}',
    "max_attempts": "5",
    "timeout_seconds": "60",
    "retry_base_seconds": "2",
    "retry_cap_seconds": "20",
    "catchup": "all",
    "catchup_window_seconds": "600",
    "overlap": "skip",
}


async def test_create_with_every_field_then_edit(ui_admin: Ui, store: Store) -> None:
    status, html = await ui_admin.get("/ui/jobs/new")
    assert status == 200 and 'name="cron"' in html and 'id="preview"' in html
    r = await ui_admin.post("/ui/jobs/new", {**FORM, "paused": "on"})
    assert r.status == 303 and "done=created" in r.headers["Location"], await r.text()
    job = await store.get_job_by_name("nightly")
    assert job is not None
    s = job.spec
    assert (s.cron, s.timezone, s.payload, s.max_attempts) == (
        "30 2 * * *",
        "Europe/Berlin",
        {"n": 1},
        5,
    )
    assert (s.timeout_seconds, s.retry_base_seconds, s.retry_cap_seconds) == (60, 2, 20)
    assert (str(s.catchup), s.catchup_window_seconds, str(s.overlap), s.paused) == (
        "all",
        600,
        "skip",
        True,
    )
    status, html = await ui_admin.get(r.headers["Location"])
    assert "Created nightly." in html and '<a href="/ui/jobs/' in html
    status, html = await ui_admin.get(f"/ui/jobs/{job.id}/edit")
    assert status == 200 and 'value="30 2 * * *"' in html and "&#34;n&#34;: 1" in html
    edit = {
        **FORM,
        "kind": "once",
        "run_at": "2030-01-02T03:04",
        "payload": "",
        "timeout_seconds": "",
    }
    r = await ui_admin.post(f"/ui/jobs/{job.id}/edit", edit)
    assert r.status == 303 and "done=saved" in r.headers["Location"], await r.text()
    saved = await store.get_job(job.id)
    assert saved is not None and saved.spec.cron is None and not saved.spec.paused
    assert (
        saved.spec.run_at is not None
        and saved.spec.run_at.isoformat() == "2030-01-02T02:04:00+00:00"
    )
    assert saved.spec.payload == {} and saved.spec.timeout_seconds is None


async def test_errors_appear_next_to_their_fields(ui_admin: Ui, store: Store) -> None:
    await ui_admin.get("/ui/jobs/new")
    bad = {**FORM, "cron": "61 * * * *", "timezone": "Mars/Base", "max_attempts": "x"}
    r = await ui_admin.post("/ui/jobs/new", {**bad, "retry_cap_seconds": "1"})
    html = await r.text()
    assert r.status == 422
    assert (
        'id="max_attempts-error" class="field-error">max_attempts: must be a whole number' in html
    )
    assert 'value="61 * * * *"' in html  # what was typed stays
    r = await ui_admin.post("/ui/jobs/new", {**FORM, "cron": "61 * * * *"})
    html = await r.text()
    assert r.status == 422 and 'id="cron-error"' in html and "cron: " in html
    assert 'aria-describedby="cron-error"' in html
    r = await ui_admin.post("/ui/jobs/new", {**FORM, "retry_cap_seconds": "1"})
    html = await r.text()
    assert (
        'id="retry_cap_seconds-error" class="field-error">retry.cap_seconds: must be at least'
        in html
    )
    r = await ui_admin.post("/ui/jobs/new", {**FORM, "timezone": "Mars/Base"})
    assert "timezone: unknown time zone &#39;Mars/Base&#39;" in await r.text()
    await make(store, "taken")
    r = await ui_admin.post("/ui/jobs/new", {**FORM, "name": "taken"})
    assert r.status == 422 and "already exists" in await r.text()
    assert await store.get_job_by_name("nightly") is None


async def test_preview_fragment_marks_dst_rules(ui_admin: Ui) -> None:
    hx = {"HX-Request": "true"}
    status, html = await ui_admin.get(
        "/ui/jobs/preview?cron=30+2+*+*+*&timezone=Europe/Berlin", headers=hx
    )
    assert status == 200 and "<html" not in html and html.count("<tr") == 11
    assert "Europe/Berlin" in html
    status, html = await ui_admin.get("/ui/jobs/preview?cron=61+*+*+*+*", headers=hx)
    assert 'id="preview-error"' in html and "cron:" in html
    status, html = await ui_admin.get("/ui/jobs/preview?cron=0+*+*+*+*")
    assert "<html" in html  # without htmx, a page of its own


def test_dst_marks() -> None:
    from datetime import UTC, datetime

    from api.ui.preview import preview

    def rules(cron: str, after: str) -> list[str | None]:
        at = datetime.fromisoformat(after).replace(tzinfo=UTC)
        return [i.rule for i in preview(cron, "Europe/Berlin", at, 3)]

    assert rules("30 2 * * *", "2026-03-28T00:00") == [None, "shifted", None]
    assert rules("*/30 * * * *", "2026-03-29T00:40") == ["skipped", None, None]
    assert rules("30 2 * * *", "2026-10-24T00:00") == [None, "not repeated", None]
    assert rules("*/30 2 * * *", "2026-10-25T00:10") == ["repeated", "repeated", "repeated"]
    assert rules("0 3 * * *", "2026-03-28T00:00") == [None, None, None]


async def test_a_read_session_gets_no_form(ui_reader: Ui, store: Store) -> None:
    job_id = await make(store, "x")
    for path in ("/ui/jobs/new", f"/ui/jobs/{job_id}/edit"):
        status, _ = await ui_reader.get(path)
        assert status == 403
    r = await ui_reader.post("/ui/jobs/new", FORM)
    assert r.status == 403 and await factory.count(store, "jobs") == 1


async def test_policy_limits_and_notify_fields_round_trip(ui_admin: Ui, store: Store) -> None:
    await groups(store).insert_group("db-heavy", 2)
    hook = {"name": "ops", "url": "https://hooks.example.com/hook", "format": "slack"}
    spec = validate_channel(hook, ())
    await channels.create_channel(store, spec)
    form = {
        **FORM,
        "overlap": "allow",
        "success_exit_codes": "0, 3",
        "dead_on": "65 timeout",
        "retry_on": "",
        "max_concurrent": "4",
        "concurrency_group": "db-heavy",
        "notify": '[{"channel": "ops", "events": ["run_dead"]}]',
        "pause_after_failures": "3",
        "job_failing_after": "2",
        "expect_success_within_seconds": "7200",
        "late_after_seconds": "90",
        "ping_url": "https://hc.example.com/ping/s3cr3t-token",
    }
    r = await ui_admin.post("/ui/jobs/new", form)
    html = await r.text()
    assert r.status == 303, html[html.find("Not saved") : html.find("Not saved") + 300]
    job = await store.get_job_by_name("nightly")
    assert job is not None
    assert job.spec.exit_policy.view() == {
        "success_exit_codes": [0, 3],
        "dead_on": [65, "timeout"],
        "retry_on": None,
    }
    assert (job.spec.limits.max_concurrent, job.spec.limits.group) == (4, "db-heavy")
    s = job.spec
    assert (s.pause_after_failures, s.job_failing_after) == (3, 2)
    assert (s.expect_success_within_seconds, s.late_after_seconds) == (7200, 90)
    assert s.ping_url == "https://hc.example.com/ping/s3cr3t-token"
    _, html = await ui_admin.get(f"/ui/jobs/{job.id}")
    assert "at most 4 at once, in group <strong>db-heavy</strong>" in html
    assert "job_failing after 2 dead run(s) in a row; paused after 3" in html
    assert "pings https://hc.example.com" in html and "s3cr3t" not in html
    assert "success on 0, 3; dead at once on 65, timeout; retried: every other failure" in html
    _, html = await ui_admin.get(f"/ui/jobs/{job.id}/edit")
    assert "s3cr3t" not in html and "set, to https://hc.example.com" in html  # write-only
    assert 'value="7200"' in html and 'value="90"' in html
    assert 'value="0, 3"' in html and 'value="65, timeout"' in html and 'value="db-heavy"' in html
    assert "&#34;channel&#34;: &#34;ops&#34;" in html
    # Errors from the API land at their fields; nothing changes.
    bad = {**form, "dead_on": "65 nonsense", "concurrency_group": "nope", "notify": "[{"}
    r = await ui_admin.post(f"/ui/jobs/{job.id}/edit", bad)
    html = await r.text()
    assert r.status == 422 and 'id="notify-error"' in html and "is not valid JSON" in html
    for field, value in (
        ("dead_on", "65 nonsense"),
        ("concurrency_group", "nope"),
        ("notify", '[{"channel": "nobody", "events": ["run_dead"]}]'),
    ):
        r = await ui_admin.post(f"/ui/jobs/{job.id}/edit", {**form, field: value})
        html = await r.text()
        assert r.status == 422 and f'id="{field}-error"' in html, field
    again = await store.get_job_by_name("nightly")
    assert again is not None and again.spec == job.spec
    # Empty fields mean none: no limit, no group, no subscriptions, no auto-pause; an empty
    # ping URL keeps the stored one (it is never shown), the checkbox removes it.
    cleared = {**form, "max_concurrent": "", "concurrency_group": "", "notify": "",
               "pause_after_failures": "", "ping_url": ""}  # fmt: skip
    r = await ui_admin.post(f"/ui/jobs/{job.id}/edit", cleared)
    assert r.status == 303
    after = await store.get_job_by_name("nightly")
    assert after is not None and not after.spec.limits.limited
    assert after.spec.pause_after_failures is None and after.spec.ping_url == s.ping_url
    r = await ui_admin.post(f"/ui/jobs/{job.id}/edit", {**cleared, "ping_url_clear": "on"})
    assert r.status == 303
    after = await store.get_job_by_name("nightly")
    assert after is not None and after.spec.ping_url is None
