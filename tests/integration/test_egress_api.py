"""SSRF through the API (issue 62, item 4): the issue's exact channel and ping URLs are
refused with the field named and nothing written; notify_allow_private admits private ones;
and /v1/deliveries shows a read token coarse outcomes only, never the network error text,
status code or timing an admin sees."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from supervisor.core import channels
from supervisor.core.events import ChannelSpec
from supervisor.core.store import Store
from supervisor.notifier import WebhookNotifier

from ..api_support import READER, TOKENS, api_client
from ..factory import count, sql_rows
from ..notify_support import ISSUE_CHANNEL_URLS, ISSUE_PING_URLS, SECRET

Client = TestClient[Any, Any]
JOB = {"name": "p", "type": "echo", "cron": "0 * * * *"}
TABLES = ("channels", "jobs", "runs", "outbox")


async def _counts(store: Store) -> dict[str, int]:
    return {t: await count(store, t) for t in TABLES}


async def _refused(resp: Any, field: str) -> str:
    assert resp.status == 422, await resp.text()
    [error] = (await resp.json())["errors"]
    assert error["field"] == field
    return str(error["message"])


async def test_the_issue_channel_urls_are_refused_and_nothing_is_written(
    api: Client, store: Store
) -> None:
    before = await _counts(store)
    for url in ISSUE_CHANNEL_URLS:
        body = {"name": "scan", "url": url, "format": "slack"}
        message = await _refused(await api.post("/v1/channels", json=body), "url")
        assert "address" in message, (url, message)
        assert "notify_allow_private" in message or "cloud metadata" in message, message
    # Nor can a channel be moved there: PATCH is validated the same way.
    ok = {"name": "ops", "url": "https://hooks.example.com/x", "secret": SECRET}
    cid = (await (await api.post("/v1/channels", json=ok)).json())["id"]
    for url in ISSUE_CHANNEL_URLS:
        await _refused(await api.patch(f"/v1/channels/{cid}", json={"url": url}), "url")
    [row] = await sql_rows(store, "SELECT url FROM channels")
    assert row["url"] == ok["url"]
    assert await _counts(store) == {**before, "channels": 1}


async def test_the_issue_ping_urls_are_refused_and_nothing_is_written(
    api: Client, store: Store
) -> None:
    before = await _counts(store)
    for url in ISSUE_PING_URLS:
        message = await _refused(
            await api.post("/v1/jobs", json={**JOB, "ping_url": url}), "ping_url"
        )
        assert url.split("/")[2].split(":")[0] in message
    created = await api.post("/v1/jobs", json=JOB)
    job_id = (await created.json())["id"]
    for url in ISSUE_PING_URLS:
        await _refused(await api.patch(f"/v1/jobs/{job_id}", json={"ping_url": url}), "ping_url")
    [row] = await sql_rows(store, "SELECT ping_url FROM jobs")
    assert row["ping_url"] is None
    assert (await _counts(store))["jobs"] == before["jobs"] + 1


async def test_allowing_private_destinations_is_explicit(store: Store) -> None:
    async with api_client(store, notify_allow_private=True) as api:
        for i, url in enumerate(ISSUE_CHANNEL_URLS):
            body = {"name": f"c{i}", "url": url, "format": "slack"}
            resp = await api.post("/v1/channels", json=body)
            if "169.254.169.254" in url or url == "http://2130706433/":
                await _refused(resp, "url")  # metadata: never; a legacy spelling: write a.b.c.d
            else:
                assert resp.status == 201, await resp.text()
        resp = await api.post("/v1/jobs", json={**JOB, "ping_url": "http://127.0.0.1:9/"})
        assert resp.status == 201


async def test_a_read_token_sees_no_network_error_text_status_or_timing(store: Store) -> None:
    """The port scanner: a channel to an inner port (stored as before the upgrade), tried by
    a notifier that allows private destinations. Admin sees the connection error naming
    the address; a read token sees "connection error" and nothing more."""
    spec = ChannelSpec(name="scan", url="http://127.0.0.1:9/", secret=SECRET)
    cid = (await channels.create_channel(store, spec)).id
    await channels.test_channel(store, cid)
    n = WebhookNotifier(
        channels.notifications(store), owner="n1", timeout=5, retry_window=3600, allow_private=True
    )
    await n.run_once()
    await n.idle()
    await n.close()
    async with api_client(store, api_tokens=TOKENS) as api:
        read = await api.get("/v1/deliveries", headers={"Authorization": f"Bearer {READER}"})
        assert read.status == 200
        text = await read.text()
        [d] = (await read.json())["deliveries"]
    assert "127.0.0.1" not in text and "Connect" not in text and ":9" not in text
    assert d["last_error"] == "connection error" and d["last_status_code"] is None
    [a] = d["history"]
    assert a["error"] == "connection error" and a["status_code"] is None
    assert a["duration_seconds"] == float(round(a["duration_seconds"]))
    async with api_client(store) as admin:
        [d] = (await (await admin.get("/v1/deliveries")).json())["deliveries"]
    assert "127.0.0.1" in d["last_error"] and "ClientConnectorError" in d["last_error"]
