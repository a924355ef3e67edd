"""Outbound pings against a real PostgreSQL and a real receiver: a job's ping_url gets
/start with the claim, itself with the success and /fail with the final failure, written by
those statements; jobs without one write nothing; the heartbeat is one per minute
cluster-wide; ping_url is validated (the allow-list too) and write-only in the API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from supervisor.core import channels, jobs
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.records import Claim
from supervisor.core.runpath import Completion
from supervisor.core.store import Store
from supervisor.notifier import PING_RETRY_WINDOW, WebhookNotifier
from supervisor.planner import Planner

from ..api_support import api_client
from ..factory import age_lease, count, due_run, sql, sql_rows, sql_value
from ..notify_support import Receiver

TTL = 30.0


def _notifier(store: Store, **kw: Any) -> WebhookNotifier:
    args: dict[str, Any] = {"owner": "n1", "timeout": 5.0, "retry_window": 86400.0, **kw}
    args.setdefault("allow_private", True)  # the receiver listens on loopback
    return WebhookNotifier(channels.notifications(store), **args)


async def _deliver(store: Store) -> None:
    n = _notifier(store)
    await n.run_once()
    await n.idle()


async def _pings(store: Store) -> list[tuple[str, str, int | None]]:
    rows = await sql_rows(store, "SELECT event, url, run_id FROM outbox ORDER BY id")
    return [(r["event"], r["url"], r["run_id"]) for r in rows]


async def _claim(store: Store, run_id: int) -> Claim:
    claims = {c.id: c for c in await store.claim_runs(["echo"], 10, "w1", TTL)}
    return claims[run_id]


async def _end(store: Store, claim: Claim, status: RunStatus) -> None:
    """Complete as the executor does: with the claim's ping_url."""
    ok = status is RunStatus.SUCCEEDED
    outcome = Outcome.SUCCEEDED if ok else Outcome.FAILED
    done = Completion(
        claim.id, claim.lease_token, status, 60.0, outcome, None if ok else "exit 1",
        ping_url=claim.ping_url,
    )  # fmt: skip
    assert await store.complete_runs([done], "w1") == {claim.id}


async def test_start_success_and_final_failure_ping_the_jobs_url(
    store: Store, receiver: Receiver
) -> None:
    url = receiver.ping_url
    run = await due_run(store, "pinged", ping_url=url + "/")  # a trailing slash is fine
    job_id = int(await sql_value(store, "SELECT job_id FROM runs WHERE id = $1", run))
    plain = await due_run(store, "plain")  # no ping_url: nothing written for it, ever
    claims = {c.id: c for c in await store.claim_runs(["echo"], 10, "w1", TTL)}
    assert (claims[run].ping_url, claims[plain].ping_url) == (url + "/", None)
    assert await _pings(store) == [("ping_start", url + "/start", run)]
    await _end(store, claims[run], RunStatus.SUCCEEDED)
    await _end(store, claims[plain], RunStatus.SUCCEEDED)
    # A second run: one attempt fails (a retry follows: no ping), the next ends it dead.
    again, _ = await jobs.trigger_job(store, job_id, None, None)
    await _end(store, await _claim(store, again), RunStatus.FAILED)
    await sql(store, "UPDATE runs SET run_after = now() WHERE id = $1", again)
    await _end(store, await _claim(store, again), RunStatus.DEAD)
    assert [(e, u) for e, u, _ in await _pings(store)] == [
        ("ping_start", url + "/start"),
        ("ping_success", url + "/"),
        ("ping_start", url + "/start"),
        ("ping_start", url + "/start"),
        ("ping_fail", url + "/fail"),
    ]
    await _deliver(store)
    base = "/ping/check-1/"
    assert sorted(receiver.pings) == sorted([base, base + "fail", *[base + "start"] * 3])
    assert receiver.received == [], "pings are GETs, not webhook POSTs"
    assert await count(store, "outbox", "status = 'delivered'") == 5


async def test_a_run_reaped_dead_sends_the_fail_ping(store: Store, receiver: Receiver) -> None:
    run = await due_run(store, "lost", ping_url=receiver.ping_url, max_attempts=1)
    await _claim(store, run)
    await age_lease(store, run, -60)
    [reaped] = await store.reap_expired(10)
    assert reaped.status == "dead"
    assert [e for e, _, _ in await _pings(store)] == ["ping_start", "ping_fail"]


async def test_a_failing_ping_is_retried_briefly_then_failed(
    store: Store, receiver: Receiver
) -> None:
    run = await due_run(store, "pinged", ping_url=receiver.ping_url)
    await _claim(store, run)
    receiver.mode = "fail"
    await _deliver(store)
    [row] = await sql_rows(store, "SELECT status, attempts, last_status FROM outbox")
    assert (row["status"], row["attempts"], row["last_status"]) == ("pending", 1, 500)
    # Older than the pings' window (shorter than the webhooks' day): failed, not retried.
    await sql(
        store,
        "UPDATE outbox SET next_attempt_at = now(), created_at = now() - make_interval(secs => $1)",
        PING_RETRY_WINDOW + 1,
    )
    await _deliver(store)
    assert await sql_value(store, "SELECT status FROM outbox") == "failed"
    assert len(receiver.pings) == 2


async def test_the_heartbeat_is_one_ping_per_minute_across_planners(
    store: Store, receiver: Receiver
) -> None:
    async with store.transaction() as tx:  # one now(): the same minute for both planners
        first = await Planner(tx, heartbeat_url=receiver.ping_url).run_once()
        second = await Planner(tx, heartbeat_url=receiver.ping_url).run_once()
    assert (first.heartbeat, second.heartbeat) == (True, False)
    [row] = await sql_rows(store, "SELECT event, url, dedupe_key FROM outbox")
    minute = (await store.now()).replace(second=0, microsecond=0)
    assert (row["event"], row["url"]) == ("heartbeat", receiver.ping_url)
    assert row["dedupe_key"] in {
        f"heartbeat:{m:%Y-%m-%dT%H:%MZ}" for m in (minute, minute - timedelta(minutes=1))
    }
    # A minute later (the row aged into the past), a planner pings again.
    await sql(store, "UPDATE outbox SET dedupe_key = 'heartbeat:earlier'")
    assert (await Planner(store, heartbeat_url=receiver.ping_url).run_once()).heartbeat
    assert (await Planner(store).run_once()).heartbeat is False  # not configured
    await _deliver(store)
    assert receiver.pings == ["/ping/check-1", "/ping/check-1"]


async def test_ping_url_is_validated_against_the_allow_list_and_write_only(
    store: Store,
) -> None:
    body = {"name": "p", "type": "echo", "cron": "0 * * * *"}
    async with api_client(store, notify_allowed_hosts=("hc-ping.com",)) as api:
        resp = await api.post("/v1/jobs", json={**body, "ping_url": "https://evil.test/x"})
        assert resp.status == 422
        errors = (await resp.json())["errors"]
        assert errors == [
            {"field": "ping_url", "message": "host 'evil.test' is not in notify_allowed_hosts"}
        ]
        secret = "https://hc-ping.com/5bf66975-d4c7-4bf5-bcc8-b8d8a82ea278"
        resp = await api.post("/v1/jobs", json={**body, "ping_url": secret})
        assert resp.status == 201
        view = await resp.json()
        assert view["ping_destination"] == "https://hc-ping.com" and "ping_url" not in view
        assert "5bf66975" not in await (await api.get(f"/v1/jobs/{view['id']}")).text()
        patched = await api.patch(f"/v1/jobs/{view['id']}", json={"ping_url": None})
        assert (await patched.json())["ping_destination"] is None
