"""The notifier against hostile destinations (issue 62): inner addresses refused where the
connection is made (stored URLs, names resolving or rebinding inward), response bodies
read at most 4 KiB, the Standard Webhooks retry rules per status (410 disables, 429/503
honour Retry-After, other 4xx give up), and Slack mrkdwn from a handler's stderr escaped."""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Any

import pytest

from supervisor import outbound
from supervisor.core import channels
from supervisor.core.events import ChannelSpec, NotifyRule
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.runpath import Completion
from supervisor.core.store import Store
from supervisor.notifier import WebhookNotifier

from ..api_support import api_client
from ..factory import due_run, sql, sql_rows, sql_value
from ..notify_support import ISSUE_CHANNEL_URLS, ISSUE_PING_URLS, SECRET, Receiver

# The issue's URLs, as rows written before the upgrade (never validated).
STORED_INNER, STORED_PINGS = ISSUE_CHANNEL_URLS, ISSUE_PING_URLS


def _notifier(store: Store, **kw: Any) -> WebhookNotifier:
    args: dict[str, Any] = {"owner": "n1", "timeout": 5.0, "retry_window": 86400.0, **kw}
    return WebhookNotifier(channels.notifications(store), **args)


async def _pass(n: WebhookNotifier) -> None:
    await n.run_once()
    await n.idle()


async def _channel(store: Store, url: str, name: str = "ops", **kw: Any) -> int:
    spec = ChannelSpec(name=name, url=url, secret=kw.pop("secret", SECRET), **kw)
    return (await channels.create_channel(store, spec)).id


async def _rows(store: Store) -> list[Any]:
    return await sql_rows(store, "SELECT * FROM outbox ORDER BY id")


async def _due(store: Store) -> None:
    await sql(store, "UPDATE outbox SET next_attempt_at = now() WHERE status = 'pending'")


async def test_stored_inner_urls_are_refused_at_connect_time(
    store: Store, receiver: Receiver
) -> None:
    for i, url in enumerate([*STORED_INNER, receiver.url]):
        await channels.test_channel(store, await _channel(store, url, f"c{i}"))
    for url in STORED_PINGS:
        await sql(
            store, "INSERT INTO outbox (url, event, data) VALUES ($1, 'heartbeat', '{}')", url
        )
    n = _notifier(store)  # the default: notify_allow_private off
    await _pass(n)
    await n.close()
    rows = await _rows(store)
    assert len(rows) == len(STORED_INNER) + 1 + len(STORED_PINGS)
    for row in rows:  # failed at once, never retried, no connection made
        assert (row["status"], row["attempts"]) == ("failed", 1), row
        assert row["last_error"].startswith("refused"), row["last_error"]
    assert receiver.received == [] and receiver.pings == []


async def test_a_name_resolving_or_rebinding_inward_is_refused(
    store: Store, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hooks.example.test passes validation (a name); at send time it resolves to the
    receiver on 127.0.0.1 (DNS rebinding): refused, unless private destinations are allowed."""

    class Rebound:
        async def resolve(self, host: str, port: int = 0, family: Any = 0) -> list[Any]:
            return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": 2,
                     "proto": 0, "flags": 0}]  # fmt: skip

        async def close(self) -> None:
            pass

    monkeypatch.setattr(outbound, "DefaultResolver", Rebound)
    url = f"http://hooks.example.test:{receiver.port}/hook"
    async with api_client(store) as api:
        created = await api.post("/v1/channels", json={"name": "ops", "url": url, "secret": SECRET})
        assert created.status == 201
        cid = (await created.json())["id"]
        await api.post(f"/v1/channels/{cid}/test")
    n = _notifier(store)
    await _pass(n)
    await n.close()
    [row] = await _rows(store)
    assert row["status"] == "failed" and "resolves to 127.0.0.1 is a loopback" in row["last_error"]
    assert receiver.received == []
    await channels.test_channel(store, cid)  # the same name, private destinations allowed:
    allowed = _notifier(store, allow_private=True)  # the fake resolver is what connects
    await _pass(allowed)
    await allowed.close()
    assert [r["status"] for r in await _rows(store)] == ["failed", "delivered"]
    assert len(receiver.received) == 1


async def test_an_endless_response_body_is_not_read(store: Store, receiver: Receiver) -> None:
    receiver.mode = "endless"
    await channels.test_channel(store, await _channel(store, receiver.url))
    await sql(store, "INSERT INTO outbox (url, event, data) VALUES ($1, 'heartbeat', '{}')",
              receiver.ping_url)  # fmt: skip
    n = _notifier(store, timeout=60.0, allow_private=True)
    started = time.monotonic()
    await _pass(n)
    await n.close()
    elapsed = time.monotonic() - started
    rows = await _rows(store)
    assert [(r["status"], r["last_status"]) for r in rows] == [("delivered", 200)] * 2
    durations = await sql_rows(store, "SELECT duration_seconds FROM delivery_attempts")
    # Far below the 60 s timeout: 4 KiB were read and the connection dropped.
    assert elapsed < 10 and all(d["duration_seconds"] < 5 for d in durations)
    assert receiver.streamed < 64 * 1024 * 1024  # what the kernel buffered, no more


async def test_410_disables_the_channel_until_it_is_updated(
    store: Store, receiver: Receiver
) -> None:
    receiver.mode, receiver.status = "status", 410
    cid = await _channel(store, receiver.url)
    await channels.test_channel(store, cid)
    n = _notifier(store, allow_private=True)
    await _pass(n)
    [row] = await _rows(store)
    assert (row["status"], row["last_status"]) == ("failed", 410)
    reason = await sql_value(store, "SELECT disabled_reason FROM channels WHERE id = $1", cid)
    assert "410" in reason
    await channels.test_channel(store, cid)
    await _pass(n)  # not sent: the receiver sees no second request
    assert len(receiver.received) == 1
    assert (await _rows(store))[1]["last_error"].startswith("not sent: the channel is disabled")
    async with api_client(store) as api:  # the API says so; an admin's update enables it
        shown = await (await api.get(f"/v1/channels/{cid}")).json()
        assert shown["disabled_at"] and "410" in shown["disabled_reason"]
        patched = await api.patch(f"/v1/channels/{cid}", json={"all_jobs": []})
        assert patched.status == 200 and (await patched.json())["disabled_at"] is None
    receiver.mode = "ok"
    await channels.test_channel(store, cid)
    await _pass(n)
    await n.close()
    assert (await _rows(store))[2]["status"] == "delivered" and len(receiver.received) == 2


async def test_a_ping_url_answering_410_is_not_pinged_again(
    store: Store, receiver: Receiver
) -> None:
    receiver.mode, receiver.status = "status", 410
    n = _notifier(store, allow_private=True)
    for minute in ("a", "b"):  # the heartbeat of two minutes
        await sql(
            store,
            "INSERT INTO outbox (url, event, data, dedupe_key) VALUES ($1, 'heartbeat', '{}', $2)",
            receiver.ping_url,
            minute,
        )
        await _pass(n)
    await n.close()
    rows = await _rows(store)
    assert [(r["status"], r["last_status"]) for r in rows] == [("failed", 410), ("failed", None)]
    assert rows[1]["last_error"].startswith("not sent") and receiver.pings == ["/ping/check-1"]


@pytest.mark.parametrize(
    ("status", "retry_after", "least", "most"),
    [
        (429, "120", 119.0, 121.0),
        (503, "date:300", 290.0, 301.0),
        (429, "86400000", 3590.0, 3601.0),  # capped at an hour
        (502, None, 0.0, 5.0),  # no Retry-After: the backoff (attempt 1: 2.5-5 s)
        (504, None, 0.0, 5.0),
        (500, None, 0.0, 5.0),
    ],
)
async def test_back_off_statuses_honour_retry_after(
    store: Store,
    receiver: Receiver,
    status: int,
    retry_after: str | None,
    least: float,
    most: float,
) -> None:
    receiver.mode, receiver.status = "status", status
    if retry_after is not None:
        value = retry_after
        if value.startswith("date:"):
            value = formatdate(time.time() + float(value[5:]), usegmt=True)
        receiver.answer_headers = {"Retry-After": value}
    await channels.test_channel(store, await _channel(store, receiver.url))
    n = _notifier(store, allow_private=True)
    await _pass(n)
    await n.close()
    wait = await sql_value(
        store, "SELECT EXTRACT(EPOCH FROM next_attempt_at - now())::float8 FROM outbox"
    )
    [row] = await _rows(store)
    assert (row["status"], row["last_status"]) == ("pending", status)
    assert least <= wait <= most, wait


@pytest.mark.parametrize("status", [400, 401, 404, 302])
async def test_other_client_errors_give_up_after_three_attempts(
    store: Store, receiver: Receiver, status: int
) -> None:
    receiver.mode, receiver.status = "status", status
    await channels.test_channel(store, await _channel(store, receiver.url))
    n = _notifier(store, allow_private=True)
    for _ in range(3):
        await _due(store)
        await _pass(n)
    await _due(store)
    await _pass(n)  # nothing left to send
    await n.close()
    [row] = await _rows(store)
    assert (row["status"], row["attempts"], row["last_status"]) == ("failed", 3, status)
    assert len(receiver.received) == 3


async def test_a_handlers_stderr_cannot_mention_or_link_in_slack(
    store: Store, receiver: Receiver
) -> None:
    await _channel(store, receiver.url, "chat", format="slack", secret=None)
    run_id = await due_run(store, "nightly", notify=(NotifyRule("chat", ("run_dead",)),))
    [claim] = await store.claim_runs(["echo"], 1, "w1", 30.0)
    # The error as verdict.py builds it from a handler that wrote this to stderr.
    error = "exited with status 1\nstderr: <!channel> <http://evil|click>"
    done = Completion(run_id, claim.lease_token, RunStatus.DEAD, 0.0, Outcome.FAILED, error,
                      exit_code=1)  # fmt: skip
    assert await store.complete_runs([done], "w1") == {run_id}
    n = _notifier(store, allow_private=True)
    await _pass(n)
    await n.close()
    [got] = receiver.received
    text = got.json["text"]
    assert "<!channel>" not in text and "<http://evil|click>" not in text
    assert "```exited with status 1\nstderr: &lt;!channel&gt; &lt;http://evil|click&gt;```" in text
