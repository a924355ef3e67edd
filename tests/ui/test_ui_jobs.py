"""The jobs and workers pages without a browser: columns, search and filters, keyset pages,
the admin actions (pause with a reason, resume, trigger, delete with confirmation), a read
session's view and refusals, escaping."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from api.ui import pages_jobs
from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, READER
from ..helpers import job, wait_for
from .conftest import Ui


async def make(store: Store, name: str, **kw: object) -> int:
    return (await jobs.create_job(store, job(name, **kw), factory.LIMITS)).id  # type: ignore[arg-type]


def names(html: str) -> list[str]:
    return re.findall(r'<a href="/ui/jobs/\d+">([^<]+)</a>', html)


async def test_list_shows_schedule_zone_next_run_last_run_and_success_rate(
    ui_admin: Ui, store: Store
) -> None:
    job_id = await make(store, "nightly-report", cron="0 2 * * *", timezone="Europe/Berlin")
    await factory.insert_runs(store, job_id, 3, start_s=100)
    await factory.insert_runs(store, job_id, 1, status="dead", start_s=10)
    status, html = await ui_admin.get("/ui/jobs")
    assert status == 200
    row = html[html.index("nightly-report") :]
    row = row[: row.index("</tr>")]
    assert "<code>0 2 * * *</code>" in row and "At 02:00" in row
    assert "Europe/Berlin" in row
    assert re.search(r"\d{4}-\d\d-\d\d 01:00:00 UTC", row) or "00:00:00 UTC" in row
    assert "CET" in row or "CEST" in row  # the next run in the job's own zone
    assert 's-dead">dead' in row  # the latest run
    assert "75%" in row and "of 4" in row  # 3 of the last 4 ended runs succeeded


async def test_search_and_filters(ui_admin: Ui, store: Store) -> None:
    await make(store, "Billing-Export", type="shell")
    await make(store, "billing-import")
    paused = await make(store, "cleanup")
    await jobs.set_paused(store, paused, True, factory.LIMITS)
    dead = await make(store, "flaky")
    await factory.insert_runs(store, dead, 1, status="dead")
    assert names((await ui_admin.get("/ui/jobs?q=BILLING"))[1]) == [
        "Billing-Export",
        "billing-import",
    ]
    assert names((await ui_admin.get("/ui/jobs?type=shell"))[1]) == ["Billing-Export"]
    assert names((await ui_admin.get("/ui/jobs?paused=yes"))[1]) == ["cleanup"]
    assert "cleanup" not in names((await ui_admin.get("/ui/jobs?paused=no"))[1])
    assert names((await ui_admin.get("/ui/jobs?last=dead"))[1]) == ["flaky"]
    status, html = await ui_admin.get("/ui/jobs?paused=maybe")
    assert status == 422 and "paused: must be yes, no or empty" in html


@pytest.fixture
def refresh_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last-status candidates are refreshed behind every view (before the app exists)."""
    monkeypatch.setattr(pages_jobs, "LAST_REFRESH", 0.0)


async def test_last_status_filter_pages_candidates_checked_live(
    refresh_always: None, ui_admin: Ui, store: Store
) -> None:
    dead = []
    for i in range(130):
        job_id = await make(store, f"job-{i:03d}", type="even" if i % 2 == 0 else "odd")
        await factory.insert_runs(store, job_id, 1, status="dead" if i % 3 else "succeeded")
        if i % 3:
            dead.append(f"job-{i:03d}")

    async def pages(url: str | None) -> list[str]:
        seen: list[str] = []
        while url:
            status, html = await ui_admin.get(url)
            assert status == 200
            seen += names(html)
            found = re.search(r'<a href="([^"]+)" rel="next">', html)
            url = found.group(1).replace("&amp;", "&") if found else None
        return seen

    assert await pages("/ui/jobs?last=dead") == dead  # 86 jobs: two pages, in name order
    assert await pages("/ui/jobs?last=dead&type=even&q=JOB-1") == [
        n for n in dead if n.startswith("job-1") and int(n[-3:]) % 2 == 0
    ]
    # A job that recovered is dropped at once (every row is checked live); one that failed
    # since the candidates were read shows once they are read again.
    await factory.insert_runs(store, await _id(store, "job-001"), 1, status="succeeded")
    await factory.insert_runs(store, await _id(store, "job-000"), 1, status="dead")
    listed = await pages("/ui/jobs?last=dead")  # served from the old candidates
    assert "job-001" not in listed and "job-000" not in listed

    async def shown() -> bool:  # each view starts a refresh behind it
        return names((await ui_admin.get("/ui/jobs?last=dead"))[1])[0] == "job-000"

    await wait_for(shown, 10, "the refreshed candidates")


async def _id(store: Store, name: str) -> int:
    return int(await factory.sql_value(store, "SELECT id FROM jobs WHERE name = $1", name))


async def test_keyset_pages_by_name_and_by_next_run(ui_admin: Ui, store: Store) -> None:
    # Daily, about 12 hours from now: no job's next run passes while the test pages (a next
    # run that passes moves its job later in a live list, DESIGN.md, Jobs list).
    hour = (datetime.now(UTC).hour + 12) % 24
    for i in range(120):
        await make(store, f"job-{i:03d}", cron=f"{i % 60} {hour} * * *")
    for sort in ("name", "next"):
        seen: list[str] = []
        url: str | None = f"/ui/jobs?sort={sort}"
        pages = 0
        while url:
            status, html = await ui_admin.get(url)
            assert status == 200
            seen += names(html)
            found = re.search(r'<a href="([^"]+)" rel="next">', html)
            url = found.group(1).replace("&amp;", "&") if found else None
            pages += 1
        assert pages == 3 and len(seen) == 120 and len(set(seen)) == 120, sort
    _, html = await ui_admin.get("/ui/jobs?sort=next")
    assert names(html)[:2] == ["job-000", "job-060"]  # minute 0 soonest, ties by run id


async def test_htmx_gets_only_the_table(ui_admin: Ui, store: Store) -> None:
    await make(store, "alpha")
    r = await ui_admin.client.get(
        "/ui/jobs?q=alp", headers={"HX-Request": "true", "HX-Target": "jobs-table"}
    )
    html = await r.text()
    assert html.lstrip().startswith('<div id="jobs-table">') and "<html" not in html
    assert names(html) == ["alpha"]


async def test_pause_with_reason_then_resume(ui_admin: Ui, store: Store) -> None:
    job_id = await make(store, "etl")
    status, html = await ui_admin.get(f"/ui/jobs/{job_id}/pause?back=/ui/jobs?q=etl")
    assert status == 200 and 'name="reason"' in html
    reason = "upstream down <script>alert(1)</script>"
    r = await ui_admin.post(
        f"/ui/jobs/{job_id}/pause", {"reason": reason, "back": "/ui/jobs?q=etl"}
    )
    assert r.status == 303 and r.headers["Location"].startswith("/ui/jobs?q=etl&done=paused")
    row = await factory.job_row(store, job_id)
    assert row is not None and row["paused"] and row["pause_reason"] == reason
    status, html = await ui_admin.get(r.headers["Location"])
    assert "Paused etl." in html
    assert "upstream down &lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    r = await ui_admin.post(f"/ui/jobs/{job_id}/resume", {"back": "/ui/jobs"})
    assert r.status == 303
    row = await factory.job_row(store, job_id)
    assert row is not None and not row["paused"] and row["pause_reason"] is None


async def test_a_reason_too_long_is_refused_by_name(ui_admin: Ui, store: Store) -> None:
    job_id = await make(store, "etl")
    await ui_admin.get(f"/ui/jobs/{job_id}/pause")
    r = await ui_admin.post(f"/ui/jobs/{job_id}/pause", {"reason": "x" * 501})
    assert r.status == 422 and "reason: must be at most 500 characters" in await r.text()
    row = await factory.job_row(store, job_id)
    assert row is not None and not row["paused"]


async def test_trigger_now_with_and_without_payload(ui_admin: Ui, store: Store) -> None:
    job_id = await make(store, "adhoc", cron="0 0 1 1 *")
    r = await ui_admin.post(f"/ui/jobs/{job_id}/trigger", {"back": "/ui/jobs"})
    assert r.status == 303 and "done=triggered" in r.headers["Location"]
    await ui_admin.get(f"/ui/jobs/{job_id}/trigger")
    r = await ui_admin.post(f"/ui/jobs/{job_id}/trigger", {"payload": "[1, 2]"})
    assert r.status == 422 and "payload: must be a JSON object" in await r.text()
    r = await ui_admin.post(f"/ui/jobs/{job_id}/trigger", {"payload": '{"n": 1}'})
    assert r.status == 303
    manual = await factory.sql_rows(
        store,
        "SELECT payload FROM runs WHERE job_id = $1 AND trigger = 'manual' ORDER BY id",
        job_id,
    )
    assert [m["payload"] for m in manual] == [None, {"n": 1}]


async def test_delete_asks_first(ui_admin: Ui, store: Store) -> None:
    job_id = await make(store, "old-job")
    status, html = await ui_admin.get(f"/ui/jobs/{job_id}/delete")
    assert status == 200 and "Delete <strong>old-job</strong>?" in html
    assert await factory.job_row(store, job_id) is not None  # the GET changed nothing
    r = await ui_admin.post(f"/ui/jobs/{job_id}/delete", {"back": "/ui/jobs"})
    assert r.status == 303
    assert await store.get_job(job_id) is None
    status, _ = await ui_admin.get(f"/ui/jobs/{job_id}/delete")
    assert status == 404


async def test_read_session_sees_no_actions_and_is_refused(ui_reader: Ui, store: Store) -> None:
    job_id = await make(store, "watched")
    status, html = await ui_reader.get("/ui/jobs")
    assert status == 200 and "watched" in html
    assert "Run now" not in html and "Pause…" not in html and "Delete…" not in html
    assert re.findall(r'<form method="post" action="/ui/jobs', html) == []
    for action in ("pause", "resume", "trigger", "delete"):
        r = await ui_reader.post(f"/ui/jobs/{job_id}/{action}", {"back": "/ui/jobs"})
        assert r.status == 403, action
    row = await factory.job_row(store, job_id)
    assert row is not None and not row["paused"] and row["deleted_at"] is None
    assert await factory.count(store, "runs", "job_id = $1 AND trigger = 'manual'", job_id) == 0


async def test_workers_page(ui_reader: Ui, store: Store) -> None:
    await store.upsert_worker("host-a:11", "host-a", 11, ["echo", "shell"], 8, "1.2.3", 30.0)
    await store.touch_worker("host-a:11", 3)
    await store.upsert_worker("host-b:22", "host-b", 22, ["echo"], 4, "1.2.3", 30.0)
    await store.stop_worker("host-b:22")
    status, html = await ui_reader.get("/ui/workers")
    assert status == 200
    live = html[html.index("host-a:11") :]
    live = live[: live.index("</tr>")]
    assert 's-live">live' in live and ">echo<" in live and ">shell<" in live
    assert '<td class="num">3</td>' in live and "5<span" in live  # running, free of 8
    gone = html[html.index("host-b:22") :]
    assert 's-gone">stopped' in gone[: gone.index("</tr>")]


async def test_job_detail_shows_next_instants_and_payload_to_admins_only(
    ui_anon: Ui, store: Store
) -> None:
    job_id = await make(
        store, "berlin", cron="30 2 * * *", timezone="Europe/Berlin", payload={"secret": "s3cr3t"}
    )
    await ui_anon.login(ADMIN)
    status, html = await ui_anon.get(f"/ui/jobs/{job_id}")
    assert status == 200 and "Next 20 instants" in html
    assert len(re.findall(r'<td class="mono">\d{4}-\d\d-\d\dT\d\d:\d\d:00Z</td>', html)) == 20
    assert "T02:30:00+01:00" in html or "T02:30:00+02:00" in html  # the job's wall clock
    assert "s3cr3t" in html and "Run now" in html
    await ui_anon.post("/ui/logout")
    await ui_anon.login(READER)
    status, html = await ui_anon.get(f"/ui/jobs/{job_id}")
    assert status == 200 and "s3cr3t" not in html and "withheld from read sessions" in html
    assert "Run now" not in html and "Pause…" not in html
    status, _ = await ui_anon.get("/ui/jobs/999999")
    assert status == 404


async def test_the_api_and_the_dashboard_share_the_pause_reason(ui_open: Ui, store: Store) -> None:
    job_id = await make(store, "etl")
    api = ui_open.client
    r = await api.post(f"/v1/jobs/{job_id}/pause", json={"reason": "  disk full  "})
    assert r.status == 200 and (await r.json())["pause_reason"] == "disk full"
    status, html = await ui_open.get(f"/ui/jobs/{job_id}")
    assert status == 200 and "disk full" in html
    r = await api.post(f"/v1/jobs/{job_id}/resume")
    assert (await r.json())["pause_reason"] is None
    await ui_open.get(f"/ui/jobs/{job_id}/pause")
    await ui_open.post(f"/ui/jobs/{job_id}/pause", {"reason": "from the dashboard"})
    got = await (await api.get(f"/v1/jobs/{job_id}")).json()
    assert got["paused"] and got["pause_reason"] == "from the dashboard"
    listed = await (await api.get("/v1/jobs")).json()
    assert listed["jobs"][0]["pause_reason"] == "from the dashboard"
    r = await api.post(f"/v1/jobs/{job_id}/pause")  # no body: paused, no reason
    assert r.status == 200 and (await r.json())["pause_reason"] is None
    for bad, problem in (({"reason": 5}, "must be a string or null"), ({"why": "x"}, "unknown")):
        r = await api.post(f"/v1/jobs/{job_id}/pause", json=bad)
        assert r.status == 422
        errors = (await r.json())["errors"]
        assert problem in errors[0]["message"] and errors[0]["field"] in ("reason", "why")
    for long in ("x" * 501, "x" + "\x1e" * 500):  # counted as sent, before stripping
        r = await api.post(f"/v1/jobs/{job_id}/pause", json={"reason": long})
        assert (await r.json())["errors"][0] == {
            "field": "reason",
            "message": "must be at most 500 characters",
        }
