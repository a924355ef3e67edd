"""Backfill, POST /v1/jobs/{id}/backfill and its CLI and dashboard: exactly the instants of
the window that have no run get one (trigger backfill, due now); a dry run only counts;
at most 1000 instants, ending by now; every bad field named."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..helpers import job
from ..integration.test_api_client import Cli
from .conftest import Ui


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def hourly_with_holes(store: Store) -> tuple[int, datetime, datetime, list[datetime]]:
    """An hourly job whose last 6 full hours have runs at 3 of them: (id, from, to, holes)."""
    created = await jobs.create_job(store, job("hourly", cron="0 * * * *"), factory.LIMITS)
    now = await store.now()
    top = now.replace(minute=0, second=0, microsecond=0)
    hours = [top - timedelta(hours=h) for h in range(6, 0, -1)]  # 6 h ago .. 1 h ago
    for at in hours[::2]:
        await factory.sql(
            store,
            """INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts, status)
               VALUES ($1, $2, $2, 'echo', 3, 'succeeded')""",
            created.id,
            at,
        )
    return created.id, hours[0], hours[-1] + timedelta(minutes=30), hours[1::2]


async def backfilled(store: Store, job_id: int) -> list[datetime]:
    rows = await factory.sql_rows(
        store,
        "SELECT scheduled_at FROM runs WHERE job_id = $1 AND trigger = 'backfill'"
        " AND status = 'scheduled' AND run_after <= now() ORDER BY scheduled_at",
        job_id,
    )
    return [r["scheduled_at"] for r in rows]


async def test_api_fills_exactly_the_holes(ui_open: Ui, store: Store) -> None:
    job_id, start, end, holes = await hourly_with_holes(store)
    api = ui_open.client
    path = f"/v1/jobs/{job_id}/backfill"
    r = await api.post(path, json={"from": iso(start), "to": iso(end), "dry_run": True})
    data = await r.json()
    assert r.status == 200 and (data["instants"], data["missing"], data["created"]) == (6, 3, 0)
    assert await backfilled(store, job_id) == []
    r = await api.post(path, json={"from": iso(start), "to": iso(end)})
    data = await r.json()
    assert r.status == 201 and data["created"] == 3 and len(data["run_ids"]) == 3
    assert await backfilled(store, job_id) == holes
    run = await (await api.get(f"/v1/runs/{data['run_ids'][0]}")).json()
    assert run["trigger"] == "backfill"
    r = await api.post(path, json={"from": iso(start), "to": iso(end)})  # nothing left
    assert (await r.json())["created"] == 0 and await backfilled(store, job_id) == holes


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"to": "2026-01-01T00:00:00Z"}, "from", "is required"),
        ({"from": "2026-01-01T00:00:00", "to": "2026-01-02T00:00:00Z"}, "from", "UTC offset"),
        ({"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "to", "after from"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "x": 1}, "x", "unknown"),
        (
            {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "dry_run": 1},
            "dry_run",
            "true or false",
        ),
    ],
)
async def test_bad_fields_are_named(
    ui_open: Ui, store: Store, body: dict[str, Any], field: str, words: str
) -> None:
    created = await jobs.create_job(store, job("j"), factory.LIMITS)
    r = await ui_open.client.post(f"/v1/jobs/{created.id}/backfill", json=body)
    assert r.status == 422
    errors = (await r.json())["errors"]
    assert any(e["field"] == field and words in e["message"] for e in errors), errors


async def test_capped_and_by_now(ui_open: Ui, store: Store) -> None:
    created = await jobs.create_job(store, job("minutely"), factory.LIMITS)
    now = await store.now()
    path = f"/v1/jobs/{created.id}/backfill"
    r = await ui_open.client.post(
        path, json={"from": iso(now - timedelta(hours=18)), "to": iso(now - timedelta(hours=1))}
    )
    assert r.status == 422
    assert (await r.json())["errors"] == [
        {
            "field": "to",
            "message": "the window holds more than 1000 instants of the schedule; end it sooner",
        }
    ]
    r = await ui_open.client.post(
        path, json={"from": iso(now - timedelta(hours=1)), "to": iso(now + timedelta(hours=1))}
    )
    assert r.status == 422 and (await r.json())["errors"][0]["field"] == "to"
    r = await ui_open.client.post(
        "/v1/jobs/999999/backfill", json={"from": iso(now - timedelta(hours=1)), "to": iso(now)}
    )
    assert r.status == 404
    assert await factory.count(store, "runs", "trigger = 'backfill'") == 0


async def test_cli(ui_open: Ui, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    job_id, start, end, holes = await hourly_with_holes(store)
    cli = Cli(str(ui_open.client.make_url("")), capsys)
    window = ("--from", iso(start), "--to", iso(end))
    code, out, err = await cli("jobs", "backfill", "hourly", *window, "--dry-run")
    assert code == 0 and "6 instant(s), 3 without a run (dry run" in out, err
    data = await cli.json("jobs", "backfill", str(job_id), *window)
    assert data["created"] == 3 and await backfilled(store, job_id) == holes
    code, out, err = await cli(
        "jobs", "backfill", "hourly", "--from", "yesterday", "--to", iso(end)
    )
    assert code == 2 and "from" in err


async def test_dashboard_counts_then_creates(ui_admin: Ui, store: Store) -> None:
    job_id, start, end, holes = await hourly_with_holes(store)
    window = {"from": start.strftime("%Y-%m-%dT%H:%M:%S"), "to": end.strftime("%Y-%m-%dT%H:%M:%S")}
    status, html = await ui_admin.get(f"/ui/jobs/{job_id}")
    assert 'id="backfill"' in html
    status, html = await ui_admin.get(f"/ui/jobs/{job_id}/backfill", params=window)
    assert status == 200 and re.search(r"6 instants .*<strong>3</strong> have no run", html, re.S)
    assert "Create 3 runs" in html and await backfilled(store, job_id) == []
    r = await ui_admin.post(f"/ui/jobs/{job_id}/backfill", window)
    assert r.status == 303 and "done=backfilled&n=3" in r.headers["Location"]
    assert await backfilled(store, job_id) == holes
    status, html = await ui_admin.get(r.headers["Location"])
    assert "Backfilled: created 3 runs, due now." in html
    status, html = await ui_admin.get(f"/ui/jobs/{job_id}/backfill", params={**window, "from": "x"})
    assert status == 422 and 'id="bf-from-error"' in html
