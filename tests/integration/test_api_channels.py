"""/v1/channels, /v1/deliveries and a job's `notify` field over HTTP on a real PostgreSQL:
success paths, the validation matrix (problem+json naming the field, nothing written) and
secrets that never come back."""

from __future__ import annotations

import base64
from typing import Any

from aiohttp.test_utils import TestClient

from supervisor.core.store import Store

from ..api_support import ADMIN, READER, TOKENS, api_client
from ..factory import count

Client = TestClient[Any, Any]
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
SLACK_URL = "https://hooks.slack.example/services/T000/B000/XXXXSECRETPATH"
HOOK = {"name": "ops", "url": "https://hooks.example.com/punchclock?token=QUERYSECRET",
        "secret": SECRET, "headers": {"X-Api-Key": "HEADERSECRET"}}  # fmt: skip
JOB = {"name": "nightly", "type": "echo", "cron": "30 2 * * *"}


async def _problem(resp: Any, status: int) -> list[str]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/problem+json"
    data = await resp.json(content_type=None)
    return [e["field"] for e in data.get("errors", [])]


def _no_secrets(text: str) -> None:
    for secret in (SECRET, SECRET[6:], "HEADERSECRET", "QUERYSECRET", "XXXXSECRETPATH"):
        assert secret not in text


async def test_channel_lifecycle_never_returns_a_secret(api: Client, store: Store) -> None:
    resp = await api.post("/v1/channels", json={**HOOK, "all_jobs": ["worker_lost"]})
    assert resp.status == 201, await resp.text()
    texts = [await resp.text()]
    created = await resp.json()
    assert resp.headers["Location"] == f"/v1/channels/{created['id']}"
    assert created["destination"] == "https://hooks.example.com"
    assert created["secret_set"] is True and created["header_names"] == ["X-Api-Key"]
    assert created["all_jobs"] == ["worker_lost"] and created["format"] == "punchclock"
    assert created["include_payload"] is False  # payloads are opt-in
    slack = await api.post(
        "/v1/channels", json={"name": "chat", "url": SLACK_URL, "format": "slack"}
    )
    assert slack.status == 201
    texts.append(await slack.text())
    cid = created["id"]
    for path in ("/v1/channels", f"/v1/channels/{cid}"):
        got = await api.get(path)
        assert got.status == 200
        texts.append(await got.text())
    patched = await api.patch(f"/v1/channels/{cid}", json={"name": "ops2", "all_jobs": []})
    assert patched.status == 200
    texts.append(await patched.text())
    assert (await patched.json())["secret_set"] is True  # a PATCH keeps what it does not name
    test = await api.post(f"/v1/channels/{cid}/test")
    assert test.status == 202
    delivery = (await test.json())["delivery_id"]
    listed = await api.get("/v1/deliveries", params={"channel_id": str(cid)})
    texts.append(await listed.text())
    rows = (await listed.json())["deliveries"]
    assert [(d["id"], d["event"], d["status"]) for d in rows] == [(delivery, "test", "pending")]
    for text in texts:
        _no_secrets(text)
    gone = await api.delete(f"/v1/channels/{cid}")
    assert (await gone.json()) == {"id": cid, "deleted": True, "unsubscribed_jobs": 0}
    assert (await api.get(f"/v1/channels/{cid}")).status == 404
    assert await count(store, "outbox") == 0  # its deliveries went with it


async def test_channel_validation_names_each_field(api: Client, store: Store) -> None:
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({**HOOK, "url": "ftp://example.com/x"}, ["url"]),
        ({**HOOK, "url": "https:///nohost"}, ["url"]),
        ({**HOOK, "url": 5}, ["url"]),
        ({**HOOK, "secret": "plain"}, ["secret"]),
        ({**HOOK, "secret": "whsec_" + base64.b64encode(b"short").decode()}, ["secret"]),
        ({k: v for k, v in HOOK.items() if k != "secret"}, ["secret"]),
        ({**HOOK, "format": "teams"}, ["format"]),
        ({**HOOK, "all_jobs": ["run_dead", "run_exploded"]}, ["all_jobs.1"]),
        ({**HOOK, "headers": {"Content-Type": "text/plain"}}, ["headers.Content-Type"]),
        ({**HOOK, "headers": {"webhook-id": "x"}}, ["headers.webhook-id"]),
        ({**HOOK, "name": ".hidden", "colour": 1}, ["colour", "name"]),
        ({"url": HOOK["url"], "secret": SECRET}, ["name"]),
        ({**HOOK, "include_payload": "yes"}, ["include_payload"]),
    ]
    for body, fields in cases:
        assert await _problem(await api.post("/v1/channels", json=body), 422) == fields, body
    assert await count(store, "channels") == 0
    await api.post("/v1/channels", json=HOOK)
    assert await _problem(await api.post("/v1/channels", json=HOOK), 409) == []


async def test_the_host_allow_list_refuses_other_destinations(store: Store) -> None:
    async with api_client(store, notify_allowed_hosts=(".example.com",)) as api:
        ok = await api.post("/v1/channels", json=HOOK)
        assert ok.status == 201
        bad = await api.post("/v1/channels", json={**HOOK, "name": "x", "url": "http://10.0.0.1/"})
        assert await _problem(bad, 422) == ["url"]
        cid = (await ok.json())["id"]
        moved = await api.patch(f"/v1/channels/{cid}", json={"url": "http://localhost:9/"})
        assert await _problem(moved, 422) == ["url"]


async def test_a_read_token_cannot_write_channels(store: Store) -> None:
    async with api_client(store, api_tokens=TOKENS) as api:
        read = {"Authorization": f"Bearer {READER}"}
        admin = {"Authorization": f"Bearer {ADMIN}"}
        assert (await api.post("/v1/channels", json=HOOK, headers=read)).status == 403
        assert (await api.post("/v1/channels", json=HOOK, headers=admin)).status == 201
        assert (await api.get("/v1/channels", headers=read)).status == 200


async def test_job_notify_is_validated_stored_and_shown(api: Client, store: Store) -> None:
    await api.post("/v1/channels", json=HOOK)
    await api.post("/v1/channels", json={"name": "chat", "url": SLACK_URL, "format": "slack"})
    bad = [
        ([{"channel": "nope", "events": ["run_dead"]}], ["notify.0.channel"]),
        ([{"channel": "ops", "events": ["run_exploded"]}], ["notify.0.events.0"]),
        ([{"channel": "ops", "events": []}], ["notify.0.events"]),
        ([{"channel": "ops"}], ["notify.0.events"]),
        ([{"channel": "ops", "events": ["run_dead"], "when": 1}], ["notify.0.when"]),
        ({"channel": "ops"}, ["notify"]),
    ]
    for notify, fields in bad:
        resp = await api.post("/v1/jobs", json={**JOB, "notify": notify})
        assert await _problem(resp, 422) == fields, notify
    assert await count(store, "jobs") == 0  # the unknown channel rolled the job back
    rules = [{"channel": "ops", "events": ["run_dead", "job_failing"]}]
    created = await api.post("/v1/jobs", json={**JOB, "notify": rules})
    assert created.status == 201, await created.text()
    job = await created.json()
    assert job["notify"] == rules
    path = f"/v1/jobs/{job['id']}"
    kept = await api.patch(path, json={"max_attempts": 2})
    assert (await kept.json())["notify"] == rules  # a PATCH without notify keeps it
    new = [
        {"channel": "chat", "events": ["run_missed"]},
        {"channel": "ops", "events": ["run_dead"]},
    ]
    replaced = await api.patch(path, json={"notify": new})
    assert (await replaced.json())["notify"] == new
    assert (await (await api.get(path)).json())["notify"] == new
    refused = await api.patch(path, json={"notify": [{"channel": "gone", "events": ["run_dead"]}]})
    assert await _problem(refused, 422) == ["notify.0.channel"]
    assert (await (await api.get(path)).json())["notify"] == new
    cid = (await (await api.get("/v1/channels")).json())["channels"][0]["id"]
    gone = await api.delete(f"/v1/channels/{cid}")
    assert (await gone.json())["unsubscribed_jobs"] == 1
    cleared = await api.patch(path, json={"notify": []})
    assert (await cleared.json())["notify"] == []


async def test_the_cli_manages_channels_without_a_secret_on_its_command_line(
    store: Store, tmp_path: Any, capsys: Any
) -> None:
    import asyncio

    from supervisor.cli import main

    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    async with api_client(store) as api:
        url = str(api.make_url("")).rstrip("/")
        base = ["--api-url", url, "--api-token", ADMIN]

        def cli(*argv: str) -> int:
            return main([*argv, *base])

        create = ["channels", "create", "--name", "ops", "--url", HOOK["url"]]
        assert await asyncio.to_thread(cli, *create, "--secret-file", str(secret_file)) == 0
        assert await asyncio.to_thread(cli, "channels", "test", "ops") == 0
        assert await asyncio.to_thread(cli, "deliveries", "--channel", "ops", "--json") == 0
        assert await asyncio.to_thread(cli, "channels", "list") == 0
        no_secret = ["channels", "create", "--name", "x", "--url", HOOK["url"]]
        assert await asyncio.to_thread(cli, *no_secret) == 2  # 422: a punchclock channel signs
    out = capsys.readouterr()
    assert "queued test delivery" in out.out and '"event": "test"' in out.out
    assert "https://hooks.example.com" in out.out and "secret:" in out.err
    _no_secrets(out.out + out.err)
