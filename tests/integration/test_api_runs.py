"""Run history, triggers, requeue, cancel and workers over HTTP on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import json
import random
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from api import cursor
from api.app import create_app
from api.permissions import TABLE
from supervisor.core.store import Store

from ..api_support import ADMIN, TOKENS, config
from ..factory import (
    age_worker,
    count,
    finish_run,
    insert_runs,
    run_ids,
    runs,
    seconds_until,
    set_run,
    sql,
    sql_rows,
    statuses,
)
from ..helpers import job

Client = TestClient[Any, Any]


async def _job(store: Store, name: str, **kw: Any) -> int:
    row = await store.insert_job(job(name, **kw))
    return int(row.id)


async def _walk(api: Client, params: dict[str, str], limit: int) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, "limit": str(limit), **({"cursor": cursor} if cursor else {})}
        resp = await api.get("/v1/runs", params=query)
        assert resp.status == 200, await resp.text()
        page = await resp.json()
        assert len(page["runs"]) <= limit
        seen += page["runs"]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


@pytest.mark.parametrize("filters", ["none", "status", "job"])
async def test_pages_neither_skip_nor_repeat_while_runs_are_inserted(
    api: Client, store: Store, filters: str
) -> None:
    jobs = [await _job(store, f"j{i}") for i in range(4)]
    # 1,000 runs over 4 jobs at 250 shared instants: ties on scheduled_at break on id.
    await sql(  # the shape of this table is the test's point
        store,
        """insert into runs (job_id, scheduled_at, run_after, type, max_attempts, status)
           select j, now() - make_interval(mins => g), now(), 'echo', 3,
                  (case when g % 2 = 0 then 'dead' else 'succeeded' end)::run_status
           from generate_series(1, 250) g, unnest($1::bigint[]) j""",
        jobs,
    )
    original = set(await run_ids(store))
    assert len(original) == 1000
    params = {"none": {}, "status": {"status": "dead"}, "job": {"job_id": str(jobs[1])}}[filters]
    expected = {
        "none": original,
        "status": {
            r["id"] for r in (await runs(store, list(original))).values() if r["status"] == "dead"
        },
        "job": set(await run_ids(store, jobs[1])),
    }[filters]
    stop = asyncio.Event()
    inserted = 0

    async def insert_more() -> None:
        nonlocal inserted
        rng = random.Random(1)
        while not stop.is_set():
            # Older and newer than any page position, at instants no original run has.
            minutes = rng.uniform(-60, 300)
            await sql(  # runs arriving while the pages are read: the point
                store,
                """insert into runs (job_id, scheduled_at, run_after, type, max_attempts, status)
                   values ($1, now() - make_interval(secs => $2), now(), 'echo', 3, 'dead')""",
                rng.choice(jobs),
                minutes * 60 + 0.5,
            )
            inserted += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(insert_more())
    try:
        seen = await _walk(api, params, limit=37)
    finally:
        stop.set()
        await task
    assert inserted > 0
    ids = [r["id"] for r in seen]
    assert len(ids) == len(set(ids)), "a row was repeated"
    assert expected <= set(ids), f"skipped: {sorted(expected - set(ids))[:10]}"
    keys = [(r["scheduled_at"], r["id"]) for r in seen]
    assert keys == sorted(keys, reverse=True), "newest first by (scheduled_at, id)"


async def test_a_date_window_pages_through_exactly_its_runs(api: Client, store: Store) -> None:
    # Runs 1..8 s and 51..58 s old; the window keeps the 3..6 s old ones. Paged one at a
    # time through each list query (all runs, by status, by job), the window's end is the
    # scan's start, never the first page's open cursor.
    job = await _job(store, "gamma")
    ids = await insert_runs(store, job, 8, status="dead")
    await insert_runs(store, job, 8, status="dead", start_s=50)
    now = await store.now()
    window = {
        "scheduled_after": (now - timedelta(seconds=6, milliseconds=500)).isoformat(),
        "scheduled_before": (now - timedelta(seconds=2, milliseconds=500)).isoformat(),
        "limit": "1",
    }
    expected = ids[2:6]  # newest first: 3, 4, 5 and 6 s old
    for extra in ({}, {"status": "dead"}, {"job_id": str(job)}):
        params = {**window, **extra}
        seen: list[int] = []
        while True:
            page = await (await api.get("/v1/runs", params=params)).json()
            seen += [r["id"] for r in page["runs"]]
            if not page.get("next_cursor"):
                break
            params = {**window, **extra, "cursor": page["next_cursor"]}
            assert len(seen) <= len(expected), (extra, seen)
        assert seen == expected, extra


async def test_default_is_history_and_upcoming_is_the_plan_ahead(api: Client, store: Store) -> None:
    """Issue 12: the list was newest scheduled_at first over every run, so a history's first
    pages were the planned future. Default: due runs (scheduled_at <= now()) newest first;
    upcoming=true: scheduled_at > now(), soonest first. Each pages through its runs exactly
    once under every filter, and a cursor from one mode is refused in the other."""
    jobs = [await _job(store, name) for name in ("alpha", "beta", "gamma")]
    # Per job 12 due runs (the newest at the insert's now()) and 10 planned an hour or more
    # ahead, at instants the jobs share (ties break on id); statuses vary in both.
    await sql(  # the shape of this table is the test's point
        store,
        """insert into runs (job_id, scheduled_at, run_after, type, max_attempts, status)
           select j, now() + make_interval(mins => g), now(), 'echo', 3,
                  (case when g > 0 and g % 4 = 0 then 'cancelled' when g > 0 then 'scheduled'
                        else (array['succeeded', 'dead', 'scheduled'])[1 + -g % 3] end)::run_status
           from (select generate_series(-11, 0) union all select generate_series(60, 69)) s (g),
                unnest($1::bigint[]) j""",
        jobs,
    )
    rows = await sql_rows(  # the expected pages, split at the database's now
        store,
        "select id, job_id, status, scheduled_at, scheduled_at > now() as ahead from runs"
        " order by scheduled_at, id",
    )
    history = [r for r in reversed(rows) if not r["ahead"]]
    ahead = [r for r in rows if r["ahead"]]
    assert len(history) == 36 and len(ahead) == 30
    cases: list[tuple[dict[str, str], Any]] = [
        ({}, lambda r: True),
        ({"status": "scheduled"}, lambda r: r["status"] == "scheduled"),
        ({"job_id": str(jobs[1])}, lambda r: r["job_id"] == jobs[1]),
        (
            {"job_name": "gamma", "status": "scheduled,dead"},
            lambda r: r["job_id"] == jobs[2] and r["status"] in ("scheduled", "dead"),
        ),
    ]
    for params, keep in cases:
        for mode, expected in (({}, history), ({"upcoming": "true"}, ahead)):
            seen = await _walk(api, {**params, **mode}, limit=4)
            want = [r["id"] for r in expected if keep(r)]
            assert want and [r["id"] for r in seen] == want, (params, mode)
        explicit = await _walk(api, {**params, "upcoming": "false"}, limit=100)
        assert [r["id"] for r in explicit] == [r["id"] for r in history if keep(r)]
    # A window reaching into the future is only its due part by default.
    now = await store.now()
    after = now - timedelta(minutes=2, seconds=30)
    window = {"scheduled_after": after.isoformat(), "scheduled_before": "2999-01-01T00:00:00Z"}
    got = await _walk(api, window, limit=2)
    assert [r["id"] for r in got] == [r["id"] for r in history if r["scheduled_at"] >= after]
    assert len(got) == 9
    got = await _walk(api, {**window, "upcoming": "true"}, limit=7)
    assert [r["id"] for r in got] == [r["id"] for r in ahead]
    # Cursors carry their mode.
    history_cursor = (await (await api.get("/v1/runs", params={"limit": "2"})).json())[
        "next_cursor"
    ]
    ahead_cursor = (
        await (await api.get("/v1/runs", params={"limit": "2", "upcoming": "true"})).json()
    )["next_cursor"]
    for token, params in (
        (history_cursor, {"upcoming": "true"}),
        (ahead_cursor, {}),
        (ahead_cursor, {"upcoming": "false"}),
    ):
        resp = await api.get("/v1/runs", params={**params, "cursor": token})
        assert resp.status == 422, await resp.text()
        problem = await resp.json(content_type=None)
        assert [e["field"] for e in problem["errors"]] == ["cursor"], problem
    resp = await api.get("/v1/runs", params={"upcoming": "yes"})
    assert resp.status == 422
    assert (await resp.json(content_type=None))["errors"][0]["field"] == "upcoming"
    resp = await api.post("/v1/runs/requeue", params={"upcoming": "true"})
    assert resp.status == 422  # bulk requeue has no mode: dead and failed runs are history


async def test_list_filters_and_cursor_rules(api: Client, store: Store) -> None:
    a, b = await _job(store, "alpha"), await _job(store, "beta")
    await insert_runs(store, a, 5, status="succeeded")
    await insert_runs(store, a, 3, status="dead", start_s=100)
    await insert_runs(store, b, 4, status="failed", start_s=200)
    got = await (await api.get("/v1/runs", params={"job_name": "alpha"})).json()
    assert {r["job_name"] for r in got["runs"]} == {"alpha"} and len(got["runs"]) == 8
    got = await (
        await api.get("/v1/runs", params=[("status", "dead"), ("status", "failed")])
    ).json()
    assert sorted(r["status"] for r in got["runs"]) == ["dead"] * 3 + ["failed"] * 4
    got = await (
        await api.get("/v1/runs", params={"status": "dead,failed", "job_id": str(b)})
    ).json()
    assert [r["status"] for r in got["runs"]] == ["failed"] * 4
    got = await (await api.get("/v1/runs", params={"job_id": str(a), "job_name": "beta"})).json()
    assert got["runs"] == []
    now = await store.now()
    window = {
        "scheduled_after": (now - timedelta(seconds=104, milliseconds=500)).isoformat(),
        "scheduled_before": (now - timedelta(seconds=100, milliseconds=500)).isoformat(),
    }
    got = await (await api.get("/v1/runs", params=window)).json()
    assert [r["status"] for r in got["runs"]] == ["dead"] * 3  # 101-103 s before now
    finished = {"finished_after": (now - timedelta(seconds=3)).isoformat()}
    got = await (await api.get("/v1/runs", params=finished)).json()
    assert [r["status"] for r in got["runs"]] == ["succeeded"] * 5
    run = got["runs"][0]
    assert run["duration_seconds"] == 2.0 and run["scheduled_at"].endswith("Z")
    first = await (await api.get("/v1/runs", params={"limit": "2"})).json()
    resp = await api.get(
        "/v1/runs", params={"limit": "2", "status": "dead", "cursor": first["next_cursor"]}
    )
    assert (
        resp.status == 422 and "different filters" in (await resp.json(content_type=None))["detail"]
    )
    for bad in [
        {"status": "done"},
        {"limit": "0"},
        {"limit": "501"},
        {"job_id": "x"},
        {"job_id": "0"},
        {"job_name": "no spaces"},
        {"scheduled_after": "yesterday"},
        {"finished_before": "2030-01-01T00:00:00"},
        {"page": "2"},
        {"cursor": "%%%"},
    ]:
        resp = await api.get("/v1/runs", params=bad)
        assert resp.status == 422, (bad, await resp.text())
        problem = await resp.json(content_type=None)
        assert problem["errors"][0]["field"] == next(iter(bad))


async def test_run_detail_has_every_attempt(api: Client, store: Store) -> None:
    a = await _job(store, "alpha", timezone="America/New_York")
    [run_id] = await insert_runs(store, a, 1, status="dead")
    await sql(  # two attempts with every field set: what the detail must show
        store,
        """insert into run_attempts (run_id, attempt, worker_id, lease_token, started_at,
               finished_at, outcome, exit_code, signal, error, stdout_tail, stderr_tail)
           values ($1, 1, 'w1', 1, now() - interval '10 s', now() - interval '8 s', 'failed',
                   3, null, 'exit 3', 'out', 'err'),
                  ($1, 2, 'w2', 2, now() - interval '5 s', now() - interval '4.5 s', 'timed_out',
                   null, 9, 'timed out after 0.5s', null, null)""",
        run_id,
    )
    resp = await api.get(f"/v1/runs/{run_id}")
    assert resp.status == 200
    run = await resp.json()
    assert run["scheduled_at_local"].endswith(("-05:00", "-04:00"))
    assert [a["attempt"] for a in run["history"]] == [1, 2]
    first, second = run["history"]
    assert (first["worker_id"], first["exit_code"], first["outcome"]) == ("w1", 3, "failed")
    assert first["duration_seconds"] == 2.0 and first["stdout_tail"] == "out"
    assert (second["signal"], second["outcome"], second["duration_seconds"]) == (
        9,
        "timed_out",
        0.5,
    )
    assert (await api.get("/v1/runs/424242")).status == 404


async def test_trigger_and_idempotency(api: Client, store: Store, dsn: str) -> None:
    job_id = await _job(store, "alpha", payload={"from": "job"})
    listener = await asyncpg.connect(dsn)
    woken = asyncio.Event()
    await listener.add_listener("punchclock_wake", lambda *_: woken.set())
    try:
        resp = await api.post(f"/v1/jobs/{job_id}/trigger")
        assert resp.status == 201, await resp.text()
        plain = await resp.json()
        await asyncio.wait_for(woken.wait(), 10)
    finally:
        await listener.close()
    assert plain["trigger"] == "manual" and plain["status"] == "scheduled"
    assert plain["payload"] is None and plain["history"] == []
    assert resp.headers["Location"] == f"/v1/runs/{plain['id']}"
    second = await (await api.post(f"/v1/jobs/{job_id}/trigger", json={})).json()
    assert second["id"] != plain["id"], "without a key every trigger is a new run"
    # Whitespace is not "no body": it is malformed JSON, and creates nothing.
    before = await count(store, "runs")
    bad = await api.post(
        f"/v1/jobs/{job_id}/trigger", data=b"\t", headers={"Content-Type": "application/json"}
    )
    assert bad.status == 400 and "malformed JSON" in (await bad.json())["detail"]
    assert await count(store, "runs") == before

    async def keyed(payload: Any) -> Any:
        return await api.post(
            f"/v1/jobs/{job_id}/trigger",
            json={"payload": payload},
            headers={"Idempotency-Key": "deploy-42"},
        )

    responses = await asyncio.gather(*(keyed({"v": 1}) for _ in range(6)))
    statuses = sorted(r.status for r in responses)
    bodies = [await r.json() for r in responses]
    assert statuses == [200] * 5 + [201]
    assert len({b["id"] for b in bodies}) == 1
    assert bodies[0]["payload"] == {"v": 1} and bodies[0]["idempotency_key"] == "deploy-42"
    conflict = await keyed({"v": 2})
    assert conflict.status == 409
    assert await count(store, "runs", "job_id=$1 and trigger='manual'", job_id) == 3
    for body, headers in [
        ({"payload": [1]}, {}),
        ({"extra": 1}, {}),
        ({}, {"Idempotency-Key": "has space"}),
        ({}, {"Idempotency-Key": "k" * 256}),
        ({"payload": {"x": "\u0000"}}, {}),
    ]:
        resp = await api.post(f"/v1/jobs/{job_id}/trigger", json=body, headers=headers)
        assert resp.status == 422, (body, headers, await resp.text())
    malformed = {"Content-Type": "application/json"}  # else 415 before the body is read
    assert (
        await api.post(f"/v1/jobs/{job_id}/trigger", data=b"{x", headers=malformed)
    ).status == 400
    assert (await api.post("/v1/jobs/999999/trigger")).status == 404
    assert await count(store, "runs", "trigger='manual'") == 3


async def test_requeue_single(api: Client, store: Store) -> None:
    job_id = await _job(store, "alpha", max_attempts=4)
    dead, done = await insert_runs(store, job_id, 2, status="dead")
    await set_run(store, dead, attempts=3, max_attempts=3)
    await set_run(store, done, status="succeeded")
    resp = await api.post(f"/v1/runs/{dead}/requeue")
    assert resp.status == 200, await resp.text()
    data = await resp.json()
    assert data["requeued"] == 1
    run = data["run"]
    assert run["status"] == "scheduled" and run["finished_at"] is None
    assert (run["attempts"], run["max_attempts"]) == (3, 7), "a fresh budget of the job's 4"
    assert await seconds_until(store, "runs", "run_after", dead) <= 0, "due now"
    again = await api.post(f"/v1/runs/{dead}/requeue")
    assert again.status == 409 and "scheduled" in (await again.json(content_type=None))["detail"]
    assert (await api.post(f"/v1/runs/{done}/requeue")).status == 409
    assert (await api.post("/v1/runs/999999/requeue")).status == 404


async def test_requeue_bulk_with_filters(api: Client, store: Store) -> None:
    a, b = await _job(store, "alpha"), await _job(store, "beta")
    await insert_runs(store, a, 5, status="dead")
    await insert_runs(store, b, 3, status="dead", start_s=100)
    await insert_runs(store, b, 2, status="failed", start_s=200)
    await insert_runs(store, b, 2, status="succeeded", start_s=300)
    resp = await api.post("/v1/runs/requeue", params={"job_name": "beta"})
    assert resp.status == 200 and (await resp.json()) == {"requeued": 3}, "dead by default"
    resp = await api.post("/v1/runs/requeue", params={"status": "failed"})
    assert (await resp.json()) == {"requeued": 2}
    resp = await api.post("/v1/runs/requeue", params={"status": "succeeded"})
    assert resp.status == 422
    resp = await api.post("/v1/runs/requeue", params={"limit": "5"})
    assert resp.status == 422, "list-only parameters are unknown here"
    resp = await api.post("/v1/runs/requeue")
    assert (await resp.json()) == {"requeued": 5}
    assert await statuses(store, await run_ids(store)) == {"scheduled": 10, "succeeded": 2}


async def test_cancel_a_waiting_run(api: Client, store: Store) -> None:
    job_id = await _job(store, "alpha")
    scheduled, done = await insert_runs(store, job_id, 2, status="scheduled")
    await finish_run(store, done)
    resp = await api.post(f"/v1/runs/{scheduled}/cancel")
    assert resp.status == 200, await resp.text()
    run = await resp.json()
    assert run["status"] == "cancelled" and run["finished_at"] is not None
    assert run["error"] == "cancelled by the API"
    assert (await api.post(f"/v1/runs/{scheduled}/cancel")).status == 409
    assert (await api.post(f"/v1/runs/{done}/cancel")).status == 409
    assert (await api.post("/v1/runs/999999/cancel")).status == 404


async def test_workers_live_and_recently_gone(api: Client, store: Store) -> None:
    await store.upsert_worker("live", "h1", 11, ["echo", "sql"], 8, "1.0", 30.0)
    await store.upsert_worker("stopped", "h2", 12, ["echo"], 8, "1.0", 30.0)
    await store.stop_worker("stopped")
    await store.upsert_worker("silent", "h3", 13, ["echo"], 8, "1.0", 30.0)
    await age_worker(store, "silent", 5 * 60)
    await store.upsert_worker("ancient", "h4", 14, ["echo"], 8, "1.0", 30.0)
    await age_worker(store, "ancient", 3 * 86400)
    await store.touch_worker("live", 3)
    data = await (await api.get("/v1/workers")).json()
    workers = {w["id"]: w for w in data["workers"]}
    assert set(workers) == {"live", "stopped", "silent"}
    assert data["workers"][0]["id"] == "live", "live workers first"
    live = workers["live"]
    assert live["live"] is True and live["running"] == 3 and live["types"] == ["echo", "sql"]
    assert (live["host"], live["pid"]) == ("h1", 11) and live["last_heartbeat_at"].endswith("Z")
    assert workers["stopped"]["live"] is False and workers["stopped"]["stopped_at"] is not None
    assert workers["silent"]["live"] is False


async def test_preview_endpoint(api: Client) -> None:
    resp = await api.get("/v1/schedule/preview", params={"cron": "0 9 * * MON-FRI"})
    data = await resp.json()
    assert resp.status == 200 and len(data["instants"]) == 10 and data["timezone"] == "UTC"
    # An unencoded '+' of an offset arrives as a space; it is understood all the same.
    resp = await api.get("/v1/runs?scheduled_after=2026-01-01T00:00:00+01:00")
    assert resp.status == 200, await resp.text()


EXTREME_INSTANTS = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59.999999-14:00"]


@pytest.mark.parametrize("filters", ["none", "status", "job"])
@pytest.mark.parametrize("instant", EXTREME_INSTANTS)
async def test_forged_cursor_with_an_extreme_instant_is_422(
    api: Client, store: Store, filters: str, instant: str
) -> None:
    """Issue 11: a well-formed cursor for the right filters whose instant PostgreSQL (or
    Python's UTC conversion) cannot hold answered 500; it is a 422 naming the cursor."""
    a = await _job(store, "alpha")
    await insert_runs(store, a, 3, status="dead")
    params = {"none": {}, "status": {"status": "dead"}, "job": {"job_id": str(a)}}[filters]
    first = await (await api.get("/v1/runs", params={**params, "limit": "1"})).json()
    raw = json.loads(base64.urlsafe_b64decode(first["next_cursor"] + "=="))
    for key in (instant, "0001-01-01T00:00:00+00:00", "9999-12-31T23:59:59.999999+00:00"):
        forged = cursor.encode([key, raw["k"][1]], raw["f"])
        resp = await api.get("/v1/runs", params={**params, "cursor": forged})
        assert resp.status == 422, (key, await resp.text())
        problem = await resp.json(content_type=None)
        assert [e["field"] for e in problem["errors"]] == ["cursor"], problem


@pytest.mark.parametrize("name", ["scheduled_after", "scheduled_before", "finished_before"])
@pytest.mark.parametrize("instant", [*EXTREME_INSTANTS, "0001-01-01T00:00:00Z"])
async def test_instant_filters_out_of_range_are_422(api: Client, name: str, instant: str) -> None:
    resp = await api.get("/v1/runs", params={name: instant})
    assert resp.status == 422, await resp.text()
    problem = await resp.json(content_type=None)
    [error] = problem["errors"]
    assert error["field"] == name and "out of the supported range" in error["message"]


AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}  # unlisted routes need a token too


async def test_database_data_errors_are_4xx_problems_not_500(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safety net: a value that slips past validation and that PostgreSQL (or asyncpg's
    encoder) refuses is the client's error, answered as a problem, never a 500. The Store
    turns the driver's data error into RefusedValue; the API answers that."""
    routes = web.RouteTableDef()

    @routes.get("/probe/{kind}")
    async def probe(request: web.Request) -> web.Response:
        kind = request.match_info["kind"]
        if kind == "nul":  # 22021 character_not_in_repertoire
            await store.get_job_by_name("a\x00b")
        elif kind == "range":  # 22008 interval out of range, from make_interval
            await store.prune_runs(1e300, 1e300, 1, None)
        elif kind == "encode":  # asyncpg cannot encode the argument (not a bigint)
            await store.get_run_detail(2**70)
        return web.json_response({})

    monkeypatch.setitem(TABLE, ("GET", "/probe/{kind}"), "admin")  # default deny otherwise
    app = create_app(config(api_tokens=TOKENS), store, extra_routes=list(routes))
    async with TestClient(TestServer(app, host="127.0.0.1"), headers=AS_ADMIN) as api:
        for kind in ("nul", "range", "encode"):
            resp = await api.get(f"/probe/{kind}")
            assert resp.status == 422, (kind, await resp.text())
            assert resp.content_type == "application/problem+json"
            problem = await resp.json(content_type=None)
            assert problem["errors"][0]["field"] == "query", problem


async def test_a_read_only_server_answers_503_not_500(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failover a connection may still sit on the old primary, now read-only
    (25006): the API says "retry later", as for a lost database."""
    routes = web.RouteTableDef()

    @routes.post("/probe/write")
    async def probe(request: web.Request) -> web.Response:
        async with store.transaction() as tx:
            # A refused write inside the Store's transaction: the point of the test.
            await sql(tx, "SET TRANSACTION READ ONLY")
            await sql(tx, "CREATE TEMP TABLE refused ()")
        return web.json_response({})

    monkeypatch.setitem(TABLE, ("POST", "/probe/write"), "admin")  # default deny otherwise
    app = create_app(config(api_tokens=TOKENS), store, extra_routes=list(routes))
    async with TestClient(TestServer(app, host="127.0.0.1"), headers=AS_ADMIN) as api:
        resp = await api.post("/probe/write")
        assert resp.status == 503, await resp.text()
        assert resp.headers["Retry-After"] == "1"
        assert resp.content_type == "application/problem+json"
