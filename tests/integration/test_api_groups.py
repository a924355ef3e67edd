"""/v1/concurrency-groups and a job's concurrency fields over HTTP: CRUD, the validation
matrix (problem+json naming the field, nothing written), a run waiting for its group, and
the CLI."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from supervisor.core.store import Store

from ..api_support import ADMIN
from ..factory import count, sql
from ..ui.conftest import Ui

Client = TestClient[Any, Any]
G = "/v1/concurrency-groups"
JOB = {"name": "etl", "type": "echo", "cron": "0 3 * * *"}


async def _problem(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/problem+json"
    data: dict[str, Any] = await resp.json(content_type=None)
    return data


async def test_groups_crud(api: Client, store: Store) -> None:
    r = await api.post(G, json={"name": "db-heavy", "max_running": 2})
    assert r.status == 201 and r.headers["Location"] == f"{G}/db-heavy"
    assert (await r.json())["running"] == 0
    await _problem(await api.post(G, json={"name": "db-heavy", "max_running": 3}), 409)
    got = await (await api.patch(f"{G}/db-heavy", json={"max_running": 5})).json()
    assert got["max_running"] == 5
    listed = await (await api.get(G)).json()
    assert [g["name"] for g in listed["groups"]] == ["db-heavy"]
    job = await (await api.post("/v1/jobs", json={**JOB, "concurrency_group": "db-heavy"})).json()
    assert job["concurrency_group"] == "db-heavy" and job["max_concurrent"] is None
    data = await _problem(await api.delete(f"{G}/db-heavy"), 409)
    assert "has 1 job(s)" in data["detail"]
    left = await (await api.patch(f"/v1/jobs/{job['id']}", json={"concurrency_group": None})).json()
    assert left["concurrency_group"] is None
    assert (await api.delete(f"{G}/db-heavy")).status == 200
    await _problem(await api.get(f"{G}/db-heavy"), 404)
    await _problem(await api.get(f"{G}/..%2Fetc"), 404)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"max_running": 2}, "name", "is required"),
        ({"name": "a/b", "max_running": 2}, "name", "letters, digits"),
        ({"name": "g", "max_running": 0}, "max_running", "between 1 and 10000"),
        ({"name": "g", "max_running": 2.5}, "max_running", "whole number"),
        ({"name": "g", "max_running": True}, "max_running", "whole number"),
        ({"name": "g"}, "max_running", "is required"),
        ({"name": "g", "max_running": 2, "limit": 3}, "limit", "unknown field"),
    ],
)
async def test_group_validation(
    api: Client, store: Store, body: Any, field: str, words: str
) -> None:
    data = await _problem(await api.post(G, json=body), 422)
    assert any(e["field"] == field and words in e["message"] for e in data["errors"]), data
    assert await count(store, "concurrency_groups") == 0


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"concurrency_group": "nope"}, "concurrency_group", "no concurrency group named"),
        ({"concurrency_group": 5}, "concurrency_group", "letters, digits"),
        ({"max_concurrent": 0}, "max_concurrent", "between 1 and 1000"),
        ({"max_concurrent": "2"}, "max_concurrent", "whole number"),
        ({"max_concurrent": 3, "overlap": "skip"}, "max_concurrent", "overlap allow"),
    ],
)
async def test_job_limit_validation(
    api: Client, store: Store, extra: Any, field: str, words: str
) -> None:
    data = await _problem(await api.post("/v1/jobs", json={**JOB, **extra}), 422)
    assert any(e["field"] == field and words in e["message"] for e in data["errors"]), data
    assert await count(store, "jobs") == 0  # no half-written job


async def test_a_due_run_says_what_it_waits_for(api: Client, store: Store) -> None:
    await api.post(G, json={"name": "one", "max_running": 1})
    job = await (
        await api.post("/v1/jobs", json={**JOB, "concurrency_group": "one", "max_concurrent": 1})
    ).json()
    first = await (await api.post(f"/v1/jobs/{job['id']}/trigger")).json()
    assert first["waiting_for"] is None  # nothing runs: nothing holds it back
    async with store.transaction() as tx:
        [claimed] = await tx.claim_runs(["echo"], 10, "w1", 30.0)
    second = await (await api.post(f"/v1/jobs/{job['id']}/trigger", json={})).json()
    assert second["waiting_for"] == "job etl: max_concurrent 1 running"
    await api.patch(f"/v1/jobs/{job['id']}", json={"max_concurrent": None})
    got = await (await api.get(f"/v1/runs/{second['id']}")).json()
    assert got["waiting_for"] == "group one: 1 running"
    await Ui(api).login(ADMIN)  # the dashboard says so
    page = await (await api.get(f"/ui/runs/{second['id']}")).text()
    assert '<dd id="waiting-for"><strong>group one: 1 running</strong>' in page
    await sql(store, "UPDATE runs SET status = 'cancelled', lease_owner = NULL, "
              "lease_expires_at = NULL, finished_at = now() WHERE id = $1", claimed.id)  # fmt: skip
    assert (await (await api.get(f"/v1/runs/{second['id']}")).json())["waiting_for"] is None
