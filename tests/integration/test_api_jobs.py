"""The jobs endpoints over HTTP on a real PostgreSQL: success paths and the validation
matrix (each failure a problem+json naming the field, with nothing written)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from supervisor.core import domain, schedule
from supervisor.core.store import Store
from supervisor.planner import Planner

from ..api_support import api_client
from ..factory import count, job_rows, make_jobs_due, sql_rows

Client = TestClient[Any, Any]
BASE = {"name": "nightly", "type": "echo", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}


async def _counts(store: Store) -> tuple[int, int]:
    return await count(store, "jobs"), await count(store, "runs")


async def _problem(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/problem+json"
    data: dict[str, Any] = await resp.json(content_type=None)
    assert data["status"] == status and data["title"] and data["detail"]
    return data


async def test_create_answers_201_with_next_instants_and_plans_runs(
    api: Client, store: Store
) -> None:
    body = {
        **BASE,
        "payload": {"bucket": "b1"},
        "max_attempts": 5,
        "timeout_seconds": 600,
        "retry": {"base_seconds": 5, "cap_seconds": 60},
        "catchup": "all",
        "catchup_window_seconds": 7200,
        "overlap": "skip",
    }
    resp = await api.post("/v1/jobs", json=body)
    assert resp.status == 201, await resp.text()
    job = await resp.json()
    assert resp.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert job["name"] == "nightly" and job["payload"] == {"bucket": "b1"}
    assert job["retry"] == {"base_seconds": 5.0, "cap_seconds": 60.0}
    assert (job["catchup"], job["overlap"], job["max_attempts"]) == ("all", "skip", 5)
    assert len(job["next"]) == 5
    for instant in job["next"]:
        assert instant["utc"].endswith("Z")
        assert "T02:30:00+0" in instant["local"]  # 02:30 Berlin time, +01:00 or +02:00
    # No supervisor runs: the type is accepted with a warning.
    assert any("no live worker offers type 'echo'" in w for w in job["warnings"])
    planned = await count(store, "runs", "job_id=$1", job["id"])
    assert planned >= 1


async def test_preview_of_a_job_crosses_dst_in_local_time(api: Client, store: Store) -> None:
    resp = await api.get(
        "/v1/schedule/preview",
        params={
            "cron": "30 2 * * *",
            "timezone": "Europe/Berlin",
            "count": "3",
            "after": "2026-03-28T00:00:00Z",
        },
    )
    assert resp.status == 200, await resp.text()
    data = await resp.json()
    assert [i["utc"] for i in data["instants"]] == [
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z",  # 02:30 does not exist: fires when the clock jumps to 03:00
        "2026-03-30T00:30:00Z",
    ]
    assert data["instants"][2]["local"] == "2026-03-30T02:30:00+02:00"


async def test_no_warning_when_a_live_worker_offers_the_type(api: Client, store: Store) -> None:
    await store.upsert_worker("w1", "host", 1, ["echo"], 4, "test", 30.0)
    resp = await api.post("/v1/jobs", json=BASE)
    assert resp.status == 201
    assert (await resp.json())["warnings"] == []


async def test_one_off_job(api: Client, store: Store) -> None:
    resp = await api.post(
        "/v1/jobs", json={"name": "once", "type": "echo", "run_at": "2030-01-02T03:04:05+01:00"}
    )
    assert resp.status == 201, await resp.text()
    job = await resp.json()
    assert job["cron"] is None and job["run_at"] == "2030-01-02T02:04:05Z"
    assert job["next"] == [{"utc": "2030-01-02T02:04:05Z", "local": "2030-01-02T02:04:05+00:00"}]
    # Moving a one-off replans its single run in the same transaction.
    resp = await api.patch(f"/v1/jobs/{job['id']}", json={"run_at": "2031-05-06T07:08:09Z"})
    assert resp.status == 200, await resp.text()
    rows = await sql_rows(  # the one-off's runs, replanned
        store, "select scheduled_at, status from runs where job_id=$1", job["id"]
    )
    assert [(r["scheduled_at"].isoformat(), r["status"]) for r in rows] == [
        ("2031-05-06T07:08:09+00:00", "scheduled")
    ]


def _long(n: int) -> str:
    return "x" * n


INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    # (case, body changes, field, words in the message)
    ("minute out of range", {"cron": "61 * * * *"}, "cron", "minute field '61'"),
    ("hour out of range", {"cron": "0 24 * * *"}, "cron", "hour field '24'"),
    ("field count", {"cron": "* * *"}, "cron", "expected 5 fields"),
    ("unknown alias", {"cron": "@fortnightly"}, "cron", "not supported"),
    ("never fires", {"cron": "0 0 31 2 *"}, "cron", "never fires"),
    ("zero step", {"cron": "*/0 * * * *"}, "cron", "step"),
    ("day name in minutes", {"cron": "MON * * * *"}, "cron", "minute field"),
    ("empty cron", {"cron": ""}, "cron", "empty"),
    ("cron not a string", {"cron": 5}, "cron", "string"),
    ("unknown zone", {"timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),
    ("zone path trick", {"timezone": "Europe/../UTC"}, "timezone", "unknown time zone"),
    ("both", {"run_at": "2030-01-01T00:00:00Z"}, "cron", "not both"),
    ("neither", {"cron": None}, "cron", "exactly one"),
    ("run_at without offset", {"cron": None, "run_at": "2030-01-01T00:00:00"}, "run_at", "offset"),
    ("run_at garbage", {"cron": None, "run_at": "tomorrow"}, "run_at", "ISO-8601"),
    ("run_at a number", {"cron": None, "run_at": 5}, "run_at", "ISO-8601"),
    ("max_attempts 0", {"max_attempts": 0}, "max_attempts", "between 1 and 100"),
    ("max_attempts 101", {"max_attempts": 101}, "max_attempts", "between 1 and 100"),
    ("max_attempts fraction", {"max_attempts": 2.5}, "max_attempts", "whole number"),
    ("max_attempts string", {"max_attempts": "3"}, "max_attempts", "whole number"),
    ("max_attempts bool", {"max_attempts": True}, "max_attempts", "whole number"),
    ("timeout 0", {"timeout_seconds": 0}, "timeout_seconds", "between 1 and 604800"),
    ("timeout over a week", {"timeout_seconds": 604801}, "timeout_seconds", "between"),
    (
        "catchup window negative",
        {"catchup_window_seconds": -1},
        "catchup_window_seconds",
        "between",
    ),
    ("retry base negative", {"retry": {"base_seconds": -1}}, "retry.base_seconds", "between"),
    (
        "retry cap below base",
        {"retry": {"base_seconds": 60, "cap_seconds": 5}},
        "retry.cap_seconds",
        "at least",
    ),
    ("retry not an object", {"retry": "fast"}, "retry", "object"),
    ("retry unknown key", {"retry": {"jitter": 1}}, "retry.jitter", "unknown field"),
    ("catchup enum", {"catchup": "some"}, "catchup", "one of latest, all, none"),
    ("overlap enum", {"overlap": "ALLOW"}, "overlap", "one of allow, skip, wait"),
    ("paused string", {"paused": "yes"}, "paused", "true or false"),
    ("payload array", {"payload": [1]}, "payload", "JSON object"),
    ("payload string", {"payload": "x"}, "payload", "JSON object"),
    ("payload NUL", {"payload": {"a": "x\u0000y"}}, "payload", "NUL"),
    ("payload lone surrogate", {"payload": {"a": "\ud800"}}, "payload", "surrogate"),
    ("name with space", {"name": "has space"}, "name", "letters"),
    ("name empty", {"name": ""}, "name", "letters"),
    ("name too long", {"name": _long(201)}, "name", "1-200"),
    ("name trailing newline", {"name": "abc\n"}, "name", "letters"),
    ("name a number", {"name": 5}, "name", "letters"),
    ("type with slash", {"type": "a/b"}, "type", "letters"),
    ("unknown field", {"colour": "red"}, "colour", "unknown field"),
    ("success codes empty", {"success_exit_codes": []}, "success_exit_codes", "non-empty"),
    ("dead_on bad name", {"dead_on": [65, "segv"]}, "dead_on[1]", "oom_killed"),
    ("retry_on and dead_on", {"retry_on": [3], "dead_on": [3]}, "retry_on[0]", "dead_on"),
    ("dead_on a success", {"success_exit_codes": [0, 1], "dead_on": [1]}, "dead_on[0]", "success"),
    ("pause after 0", {"pause_after_failures": 0}, "pause_after_failures", "between 1 and 1000"),
    ("pause after 1001", {"pause_after_failures": 1001}, "pause_after_failures", "1 and 1000"),
    ("pause after text", {"pause_after_failures": "3"}, "pause_after_failures", "whole number"),
    ("failing after 0", {"job_failing_after": 0}, "job_failing_after", "between 1 and 1000"),
    ("failing after null", {"job_failing_after": None}, "job_failing_after", "cannot be null"),
    ("failing after 1.5", {"job_failing_after": 1.5}, "job_failing_after", "whole number"),
    (
        "silent after 0",
        {"expect_success_within_seconds": 0},
        "expect_success_within_seconds",
        "between 1 and 31622400",
    ),
    ("late after a year", {"late_after_seconds": 1e9}, "late_after_seconds", "1 and 604800"),
    ("ping_url ftp", {"ping_url": "ftp://hc.example/x"}, "ping_url", "http or https"),
    ("ping_url query", {"ping_url": "https://hc.example/x?a=1"}, "ping_url", "query"),
    ("ping_url number", {"ping_url": 5}, "ping_url", "http or https"),
]


@pytest.mark.parametrize(("case", "change", "field", "words"), INVALID, ids=[c[0] for c in INVALID])
async def test_create_validation_matrix(
    api: Client, store: Store, case: str, change: dict[str, Any], field: str, words: str
) -> None:
    body = {**BASE, **change}
    body = {k: v for k, v in body.items() if not (k == "cron" and v is None and "cron" in change)}
    if case == "neither":
        body.pop("cron", None)
    resp = await api.post("/v1/jobs", json=body)
    data = await _problem(resp, 422)
    fields = {e["field"]: e["message"] for e in data["errors"]}
    assert field in fields, data
    assert words in fields[field], data
    assert field in data["detail"]
    assert await _counts(store) == (0, 0), "nothing is written"


async def test_missing_required_fields_are_all_named(api: Client, store: Store) -> None:
    data = await _problem(await api.post("/v1/jobs", json={"cron": "* * * * *"}), 422)
    assert {e["field"] for e in data["errors"]} == {"name", "type"}


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"name": "x",', "malformed JSON"),
        (b"{'name': 'x'}", "malformed JSON"),
        (b'{"a": NaN}', "malformed JSON"),
        (b"\xff\xfe", "UTF-8"),
        (b"", "required"),
        (b"[" * 100_000, "malformed JSON"),
    ],
    ids=["truncated", "single quotes", "nan", "not utf-8", "empty", "deep nesting"],
)
async def test_malformed_json_is_400(api: Client, store: Store, raw: bytes, words: str) -> None:
    resp = await api.post("/v1/jobs", data=raw, headers={"Content-Type": "application/json"})
    data = await _problem(resp, 400)
    assert words in data["detail"]
    assert await _counts(store) == (0, 0)


async def test_body_not_an_object_is_422(api: Client) -> None:
    data = await _problem(await api.post("/v1/jobs", json=[BASE]), 422)
    assert data["errors"][0]["field"] == "body"


async def test_oversized_body_is_413(store: Store) -> None:
    async with api_client(store, api_max_body=2048) as api:
        body = {**BASE, "payload": {"blob": "x" * 4096}}
        data = await _problem(await api.post("/v1/jobs", json=body), 413)
        assert "2048 bytes" in data["detail"]

        async def chunks() -> Any:  # no Content-Length: the limit applies while reading
            for _ in range(8):
                yield b" " * 1024

        as_json = {"Content-Type": "application/json"}  # else 415 before the size is known
        data = await _problem(await api.post("/v1/jobs", data=chunks(), headers=as_json), 413)
        # A body just under the limit is fine.
        small = await api.post("/v1/jobs", json={**BASE, "payload": {"blob": "x" * 1000}})
        assert small.status == 201
    assert (await _counts(store))[0] == 1


async def test_duplicate_name_is_409(api: Client, store: Store) -> None:
    assert (await api.post("/v1/jobs", json=BASE)).status == 201
    counts = await _counts(store)
    data = await _problem(await api.post("/v1/jobs", json=BASE), 409)
    assert "name" in data["detail"] and "already exists" in data["detail"]
    assert await _counts(store) == counts


async def test_get_list_and_filters(api: Client, store: Store) -> None:
    for i in range(7):
        body = {
            "name": f"{'etl' if i % 2 else 'web'}-{i}",
            "type": "sql" if i < 3 else "echo",
            "cron": "0 * * * *",
            "paused": i == 6,
        }
        assert (await api.post("/v1/jobs", json=body)).status == 201
    resp = await api.get("/v1/jobs", params={"limit": "2"})
    page1 = await resp.json()
    assert [j["name"] for j in page1["jobs"]] == ["web-0", "etl-1"]
    resp = await api.get("/v1/jobs", params={"limit": "2", "cursor": page1["next_cursor"]})
    page2 = await resp.json()
    assert [j["name"] for j in page2["jobs"]] == ["web-2", "etl-3"]
    names = []
    cursor = None
    while True:
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        page = await (await api.get("/v1/jobs", params=params)).json()
        names += [j["name"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(names) == 7 == len(set(names))
    by_type = await (await api.get("/v1/jobs", params={"type": "sql"})).json()
    assert [j["name"] for j in by_type["jobs"]] == ["web-0", "etl-1", "web-2"]
    paused = await (await api.get("/v1/jobs", params={"paused": "true"})).json()
    assert [j["name"] for j in paused["jobs"]] == ["web-6"]
    prefix = await (await api.get("/v1/jobs", params={"name_prefix": "etl-"})).json()
    assert [j["name"] for j in prefix["jobs"]] == ["etl-1", "etl-3", "etl-5"]
    # A cursor only means something with the filters it was made for.
    data = await _problem(
        await api.get("/v1/jobs", params={"type": "echo", "cursor": page1["next_cursor"]}), 422
    )
    assert data["errors"][0]["field"] == "cursor"
    for bad in ("garbage!", "eyJ2IjoxfQ", "A" * 600):
        await _problem(await api.get("/v1/jobs", params={"cursor": bad}), 422)
    job_id = page1["jobs"][0]["id"]
    one = await (await api.get(f"/v1/jobs/{job_id}")).json()
    assert one["name"] == "web-0" and len(one["next"]) == 5


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs?colour=red",
        "/v1/jobs?limit=0",
        "/v1/jobs?limit=501",
        "/v1/jobs?paused=yes",
        "/v1/jobs?type=a%2Fb",
        "/v1/jobs?limit=1&limit=2",
        "/v1/jobs/1?x=1",
        "/v1/schedule/preview?cron=*%20*%20*%20*%20*&count=101",
        "/v1/schedule/preview?timezone=UTC",
        "/v1/schedule/preview?cron=bad",
        "/v1/schedule/preview?cron=*%20*%20*%20*%20*&timezone=Nowhere",
    ],
)
async def test_bad_query_parameters_are_422(api: Client, path: str) -> None:
    await _problem(await api.get(path), 422)


async def test_update_replans_and_validates(api: Client, store: Store) -> None:
    job = await (await api.post("/v1/jobs", json={**BASE, "timezone": "UTC"})).json()
    other = await (await api.post("/v1/jobs", json={**BASE, "name": "other"})).json()
    resp = await api.patch(f"/v1/jobs/{job['id']}", json={"cron": "15 * * * *", "max_attempts": 7})
    assert resp.status == 200, await resp.text()
    updated = await resp.json()
    assert updated["cron"] == "15 * * * *" and updated["max_attempts"] == 7
    assert all(i["utc"][14:16] == "15" for i in updated["next"])
    rows = await sql_rows(  # the planned runs follow the new schedule and budget
        store,
        "select scheduled_at, max_attempts from runs where job_id=$1 and status='scheduled'",
        job["id"],
    )
    assert rows and all(r["scheduled_at"].minute == 15 and r["max_attempts"] == 7 for r in rows)
    before = await _counts(store)
    data = await _problem(
        await api.patch(f"/v1/jobs/{job['id']}", json={"cron": "99 * * * *", "paused": 1}), 422
    )
    assert {e["field"] for e in data["errors"]} == {"cron", "paused"}
    await _problem(await api.patch(f"/v1/jobs/{job['id']}", json={"name": other["name"]}), 409)
    as_json = {"Content-Type": "application/json"}  # malformed JSON, not a wrong type (415)
    await _problem(await api.patch(f"/v1/jobs/{job['id']}", data=b"{", headers=as_json), 400)
    await _problem(await api.patch("/v1/jobs/999999", json={"paused": True}), 404)
    assert await _counts(store) == before
    again = await (await api.get(f"/v1/jobs/{job['id']}")).json()
    assert again["cron"] == "15 * * * *"


async def test_pause_resume_delete(api: Client, store: Store) -> None:
    job = await (await api.post("/v1/jobs", json=BASE)).json()
    paused = await (await api.post(f"/v1/jobs/{job['id']}/pause")).json()
    assert paused["paused"] is True
    assert any(w.startswith("paused:") for w in paused["warnings"])
    resumed = await (await api.post(f"/v1/jobs/{job['id']}/resume")).json()
    assert resumed["paused"] is False
    resp = await api.delete(f"/v1/jobs/{job['id']}")
    assert resp.status == 200
    deleted = await resp.json()
    assert deleted["deleted"] is True and deleted["cancelled_runs"] >= 1
    await _problem(await api.get(f"/v1/jobs/{job['id']}"), 404)
    await _problem(await api.delete(f"/v1/jobs/{job['id']}"), 404)
    await _problem(await api.post(f"/v1/jobs/{job['id']}/pause"), 404)
    # Runs stay queryable: the planned ones, now cancelled, are still ahead of now.
    params = {"job_id": str(job["id"]), "upcoming": "true"}
    runs = await (await api.get("/v1/runs", params=params)).json()
    assert runs["runs"] and {r["status"] for r in runs["runs"]} == {"cancelled"}


async def test_patch_sets_the_pause_reason_of_a_paused_job_only(api: Client, store: Store) -> None:
    job = await (await api.post("/v1/jobs", json=BASE)).json()
    url = f"/v1/jobs/{job['id']}"
    # On a running job a reason alone is refused, with nothing changed.
    data = await _problem(await api.patch(url, json={"pause_reason": "why"}), 422)
    assert data["errors"] == [
        {"field": "pause_reason", "message": "can be set only on a paused job"}
    ]
    got = await (await api.patch(url, json={"paused": True, "pause_reason": "  disk full "})).json()
    assert got["paused"] is True and got["pause_reason"] == "disk full"
    got = await (await api.patch(url, json={"max_attempts": 4})).json()
    assert got["pause_reason"] == "disk full"  # not given: kept
    got = await (await api.patch(url, json={"pause_reason": "still full"})).json()
    assert got["pause_reason"] == "still full"  # already paused: a new reason alone
    # Errors of the reason and of the other fields come in one answer; nothing is written.
    data = await _problem(
        await api.patch(url, json={"max_attempts": 0, "pause_reason": "x" * 501}), 422
    )
    assert {e["field"] for e in data["errors"]} == {"max_attempts", "pause_reason"}
    data = await _problem(await api.patch(url, json={"paused": False, "pause_reason": "x"}), 422)
    assert data["errors"][0]["field"] == "pause_reason"
    got = await (await api.get(url)).json()
    assert (got["paused"], got["pause_reason"], got["max_attempts"]) == (True, "still full", 4)
    got = await (await api.patch(url, json={"pause_reason": None})).json()
    assert got["paused"] is True and got["pause_reason"] is None
    got = await (await api.patch(url, json={"paused": False})).json()
    assert got["paused"] is False and got["pause_reason"] is None


@pytest.mark.parametrize(
    "path", ["/v1/jobs/0", "/v1/jobs/9223372036854775808", "/v1/jobs/abc", "/v1/nothing"]
)
async def test_not_found_is_a_problem(api: Client, path: str) -> None:
    await _problem(await api.get(path), 404)


async def test_wrong_method_is_405_with_allow(api: Client) -> None:
    resp = await api.put("/v1/jobs")
    data = await _problem(resp, 405)
    assert "GET" in resp.headers["Allow"] and "POST" in resp.headers["Allow"]
    assert "PUT" in data["detail"]


NOT_NULLABLE = [
    "name",
    "type",
    "payload",
    "timezone",
    "max_attempts",
    "retry",
    "catchup",
    "catchup_window_seconds",
    "overlap",
    "paused",
]


async def test_null_is_refused_for_a_field_that_cannot_be_null(api: Client, store: Store) -> None:
    """Issue 11: PATCH {"cron": null} answered 200 and changed nothing. null means "remove",
    so it is a 422 naming the field wherever the field cannot be absent; cron and run_at may
    only be removed by giving the other one in the same request."""
    cron_job = await (await api.post("/v1/jobs", json=BASE)).json()
    one_off = await (
        await api.post(
            "/v1/jobs", json={"name": "once", "type": "echo", "run_at": "2030-01-01T00:00:00Z"}
        )
    ).json()
    before = await _counts(store)
    rows = await job_rows(store)
    cases: list[tuple[int, dict[str, Any], str, str]] = [
        (cron_job["id"], {"cron": None}, "cron", "cannot be null unless run_at is given"),
        (one_off["id"], {"run_at": None}, "run_at", "cannot be null unless cron is given"),
        (one_off["id"], {"cron": None}, "cron", "cannot be null unless run_at is given"),
        (cron_job["id"], {"cron": None, "run_at": None}, "cron", "cannot be null unless"),
        (cron_job["id"], {"retry": {"base_seconds": None}}, "retry.base_seconds", "cannot be null"),
        *((cron_job["id"], {f: None}, f, "cannot be null") for f in NOT_NULLABLE),
    ]
    for job_id, body, field, words in cases:
        data = await _problem(await api.patch(f"/v1/jobs/{job_id}", json=body), 422)
        assert [(e["field"], words in e["message"]) for e in data["errors"]] == [(field, True)], (
            body,
            data,
        )
    for field in NOT_NULLABLE:  # the same rule on create
        data = await _problem(await api.post("/v1/jobs", json={**BASE, field: None}), 422)
        assert field in {e["field"] for e in data["errors"]}, data
    assert await job_rows(store) == rows, "nothing changed"
    assert await _counts(store) == before
    # Switching schedules: null for one together with the other.
    resp = await api.patch(
        f"/v1/jobs/{cron_job['id']}", json={"cron": None, "run_at": "2031-01-01T00:00:00Z"}
    )
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["cron"] is None
    resp = await api.patch(f"/v1/jobs/{one_off['id']}", json={"run_at": None, "cron": "0 * * * *"})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["run_at"] is None
    # timeout_seconds is nullable: null removes the job's own timeout.
    resp = await api.patch(f"/v1/jobs/{one_off['id']}", json={"timeout_seconds": 60})
    assert (await resp.json())["timeout_seconds"] == 60
    resp = await api.patch(f"/v1/jobs/{one_off['id']}", json={"timeout_seconds": None})
    assert resp.status == 200 and (await resp.json())["timeout_seconds"] is None


@pytest.mark.parametrize("value", [".", "..", "...", ".hidden"])
@pytest.mark.parametrize("field", ["name", "type"])
async def test_names_and_types_are_names_not_paths(
    api: Client, store: Store, field: str, value: str
) -> None:
    """Issue 11: a handler type named '..' was accepted. Names may hold dots, but not start
    with one: '.', '..' and hidden-file names are refused on create, update and in filters."""
    data = await _problem(await api.post("/v1/jobs", json={**BASE, field: value}), 422)
    assert [e["field"] for e in data["errors"]] == [field]
    assert "must not start with a dot" in data["errors"][0]["message"]
    job = await (await api.post("/v1/jobs", json=BASE)).json()
    data = await _problem(await api.patch(f"/v1/jobs/{job['id']}", json={field: value}), 422)
    assert [e["field"] for e in data["errors"]] == [field]
    query = {"name": "name_prefix", "type": "type"}[field]
    data = await _problem(await api.get("/v1/jobs", params={query: value}), 422)
    assert [e["field"] for e in data["errors"]] == [query]
    assert (await api.post("/v1/jobs", json={**BASE, "name": "a..b", "type": "x.y"})).status == 201


@pytest.mark.parametrize(
    "run_at", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00+14:00"]
)
async def test_run_at_out_of_range_is_422(api: Client, store: Store, run_at: str) -> None:
    """0001-01-01T00:00Z is what asyncpg sends as -infinity: it answered 500."""
    body = {"name": "once", "type": "echo", "run_at": run_at}
    data = await _problem(await api.post("/v1/jobs", json=body), 422)
    [error] = data["errors"]
    assert error["field"] == "run_at" and "out of the supported range" in error["message"]
    assert await _counts(store) == (0, 0)


async def test_a_schedule_is_parsed_once_from_create_to_plan_to_view(
    api: Client, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Any, ...]] = []
    real = schedule.parse_cron

    def counting(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(schedule, "parse_cron", counting)
    domain.cron_schedule.cache_clear()
    resp = await api.post("/v1/jobs", json={**BASE, "cron": "17 3 * * *"})  # validate, plan, view
    assert resp.status == 201, await resp.text()
    created = await resp.json()
    assert len(created["next"]) == 5
    await make_jobs_due(store)
    assert (await Planner(store).run_once()).jobs == 1  # reads the row back, plans it
    resp = await api.get(f"/v1/jobs/{created['id']}")
    assert (await resp.json())["next"] == created["next"]
    assert [j["cron"] for j in (await (await api.get("/v1/jobs")).json())["jobs"]] == ["17 3 * * *"]
    assert calls == [("17 3 * * *", "Europe/Berlin")]


async def test_exit_policy_is_stored_shown_and_patched(api: Client, store: Store) -> None:
    body = {**BASE, "success_exit_codes": [0, 3], "dead_on": [2, "timeout"], "retry_on": [75, 1]}
    resp = await api.post("/v1/jobs", json=body)
    assert resp.status == 201, await resp.text()
    job = await resp.json()
    policy = {k: job[k] for k in ("success_exit_codes", "dead_on", "retry_on")}
    assert policy == {"success_exit_codes": [0, 3], "dead_on": [2, "timeout"], "retry_on": [75, 1]}
    resp = await api.patch(f"/v1/jobs/{job['id']}", json={"retry_on": None})
    assert resp.status == 200, await resp.text()
    patched = await resp.json()
    assert (patched["retry_on"], patched["dead_on"]) == (None, [2, "timeout"])
    # A job created without a policy has the defaults (exit 0 succeeds, 65 is dead at once).
    resp = await api.post("/v1/jobs", json={**BASE, "name": "plain"})
    plain = await resp.json()
    assert (plain["success_exit_codes"], plain["dead_on"], plain["retry_on"]) == ([0], [65], None)
