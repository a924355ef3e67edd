"""The runs pages without a browser: history by default and the upcoming tab, filters and
keyset pages, one run with its attempts (output tails escaped), cancel and requeue, and a
read session's view and refusals."""

from __future__ import annotations

import asyncio
import re

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, READER
from ..helpers import job
from .conftest import Ui


def run_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<a href="/ui/runs/(\d+)">#', html)]


async def make_job(store: Store, name: str = "report") -> int:
    return (await jobs.create_job(store, job(name, cron="0 0 1 1 *"), factory.LIMITS)).id


async def test_history_by_default_upcoming_on_its_tab(ui_reader: Ui, store: Store) -> None:
    job_id = await make_job(store)
    past = await factory.insert_runs(store, job_id, 3, start_s=60)  # newest first
    future = await factory.sql_value(
        store,
        """INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts)
           VALUES ($1, now() + interval '1 hour', now() + interval '1 hour', 'echo', 3)
           RETURNING id""",
        job_id,
    )
    status, html = await ui_reader.get("/ui/runs")
    assert status == 200 and run_ids(html) == past  # 1 s apart going back: newest first
    status, html = await ui_reader.get("/ui/runs?tab=upcoming")
    assert future in run_ids(html) and not set(past) & set(run_ids(html))


async def test_filters_and_pages(ui_reader: Ui, store: Store) -> None:
    a, b = await make_job(store, "a-job"), await make_job(store, "b-job")
    ok = await factory.insert_runs(store, a, 120, start_s=10)
    dead = await factory.insert_runs(store, b, 2, status="dead", start_s=5)
    _, html = await ui_reader.get("/ui/runs?status=dead")
    assert run_ids(html) == dead
    _, html = await ui_reader.get("/ui/runs?job=b-job&status=dead&status=succeeded")
    assert run_ids(html) == dead
    seen: list[int] = []
    url: str | None = "/ui/runs?job=a-job"
    while url:
        status, html = await ui_reader.get(url)
        assert status == 200
        seen += run_ids(html)
        found = re.search(r'<a href="([^"]+)" rel="next">', html)
        url = found.group(1).replace("&amp;", "&") if found else None
    assert seen == ok
    status, html = await ui_reader.get("/ui/runs?status=lost")
    assert status == 422 and "status: &#39;lost&#39; is not one of" in html
    status, html = await ui_reader.get("/ui/runs?scheduled_after=yesterday")
    assert status == 422 and "scheduled_after: must be a date and time" in html


async def test_run_detail_shows_attempts_with_tails_escaped(ui_anon: Ui, store: Store) -> None:
    job_id = await make_job(store)
    [run_id] = await factory.insert_runs(store, job_id, 1, status="dead")
    await factory.sql(
        store, 'UPDATE runs SET payload = \'{"token": "s3cr3t"}\' WHERE id = $1', run_id
    )
    await factory.sql(
        store,
        """INSERT INTO run_attempts (run_id, attempt, worker_id, lease_token, started_at,
               finished_at, outcome, exit_code, error, stdout_tail, stderr_tail, cpu_seconds,
               peak_rss_bytes)
           VALUES ($1, 1, 'host-a:1', 1, now() - interval '5 seconds', now(), 'failed', 3,
                   'exit code 3', '<script>alert(1)</script> done', 'warn: <b>x</b>', 0.25, 1048576)""",
        run_id,
    )
    await ui_anon.login(READER)
    status, html = await ui_anon.get(f"/ui/runs/{run_id}")
    assert status == 200 and "Attempt 1" in html and "host-a:1" in html and "code 3" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; done" in html and "<script>alert" not in html
    assert "warn: &lt;b&gt;x&lt;/b&gt;" in html and "1.0 MiB" in html
    assert "s3cr3t" not in html and "Requeue" not in html
    await ui_anon.post("/ui/logout")
    await ui_anon.login(ADMIN)
    _, html = await ui_anon.get(f"/ui/runs/{run_id}")
    assert "s3cr3t" in html and "Requeue" in html and "Cancel run" not in html


async def test_cancel_and_requeue(ui_admin: Ui, store: Store) -> None:
    job_id = await make_job(store)
    [dead] = await factory.insert_runs(store, job_id, 1, status="dead")
    await ui_admin.get(f"/ui/runs/{dead}")
    r = await ui_admin.post(f"/ui/runs/{dead}/requeue")
    assert r.status == 303 and r.headers["Location"] == f"/ui/runs/{dead}?done=requeued"
    assert await factory.status(store, dead) == "scheduled"
    _, html = await ui_admin.get(r.headers["Location"])
    assert "Requeued run" in html and "Cancel run" in html
    r = await ui_admin.post(f"/ui/runs/{dead}/cancel")
    assert r.status == 303 and await factory.status(store, dead) == "cancelled"
    r = await ui_admin.post(f"/ui/runs/{dead}/requeue")  # a cancelled run cannot be
    assert r.status == 409 and "only dead or failed runs can be requeued" in await r.text()


async def test_read_session_cannot_cancel_or_requeue(ui_reader: Ui, store: Store) -> None:
    job_id = await make_job(store)
    [dead] = await factory.insert_runs(store, job_id, 1, status="dead")
    for action in ("requeue", "cancel"):
        r = await ui_reader.post(f"/ui/runs/{dead}/{action}")
        assert r.status == 403, action
    assert await factory.status(store, dead) == "dead"


async def read_events(response: object, until: str, timeout: float = 10.0) -> list[tuple[str, str]]:
    """Server-sent events from a streaming response until one named `until`."""
    events: list[tuple[str, str]] = []
    name, data = "message", []
    async with asyncio.timeout(timeout):
        async for raw in response.content:  # type: ignore[attr-defined]
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif not line and data:
                events.append((name, "\n".join(data)))
                if name == until:
                    return events
                name, data = "message", []
    return events


async def test_live_stream_sends_the_run_as_it_changes_then_done(
    ui_reader: Ui, store: Store
) -> None:
    job_id = await make_job(store)
    [run_id] = await factory.insert_runs(store, job_id, 1, status="scheduled")
    r = await ui_reader.client.get(f"/ui/runs/{run_id}/live")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    [(name, html)] = await read_events(r, until="run")
    assert name == "run" and 's-scheduled">scheduled' in html and "<html" not in html
    await factory.finish_run(store, run_id, "succeeded")
    events = await read_events(r, until="done")
    assert [n for n, _ in events] == ["run", "done"]
    assert 's-succeeded">succeeded' in events[0][1]
    r.close()
    _, html = await ui_reader.get(f"/ui/runs/{run_id}")
    assert "sse-connect" not in html  # a final run's page opens no stream
