"""Notifications against a real PostgreSQL and a real receiver on loopback: each event is
written with its cause (and only then), delivered signed, retried, and failed after the
retry window; a rolled-back change emits nothing."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from supervisor.core import channels, webhooks
from supervisor.core.events import ChannelSpec, NotifyRule
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.runpath import Completion
from supervisor.core.store import PlannedRuns, Store
from supervisor.notifier import WebhookNotifier
from supervisor.reaper import Reaper

from ..api_support import api_client
from ..factory import age_lease, count, due_run, set_run, sql, sql_rows, sql_value, status
from ..notify_support import SECRET, Receiver, verify

TTL = 30.0
ALL = ("run_dead", "run_failed", "job_failing", "job_recovered", "worker_lost")


async def _channel(store: Store, url: str, name: str = "ops", **kw: Any) -> int:
    spec = ChannelSpec(name=name, url=url, secret=kw.pop("secret", SECRET), **kw)
    return (await channels.create_channel(store, spec)).id


def _notifier(store: Store, **kw: Any) -> WebhookNotifier:
    args: dict[str, Any] = {"owner": "n1", "timeout": 5.0, "retry_window": 3600.0, **kw}
    args.setdefault("allow_private", True)  # the receiver listens on loopback
    return WebhookNotifier(channels.notifications(store), **args)


async def _deliver(n: WebhookNotifier) -> None:
    """One pass and every delivery it started."""
    await n.run_once()
    await n.idle()


async def _outbox(store: Store) -> list[tuple[str, int | None]]:
    rows = await sql_rows(store, "SELECT event, run_id FROM outbox ORDER BY id")
    return [(r["event"], r["run_id"]) for r in rows]


async def _finish(store: Store, ends: dict[int, RunStatus], owner: str = "w1") -> None:
    """Claim what is due and complete the runs `ends` names as it says, in one batch."""
    claims = {c.id: c for c in await store.claim_runs(["echo"], 10, owner, TTL)}
    done = []
    for run_id, st in ends.items():
        ok = st is RunStatus.SUCCEEDED
        outcome, error = (Outcome.SUCCEEDED, None) if ok else (Outcome.FAILED, "exit 1")
        token = claims[run_id].lease_token
        done.append(Completion(run_id, token, st, 60.0, outcome, error, exit_code=0 if ok else 1))
    assert await store.complete_runs(done, owner) == set(ends)


async def test_fenced_completion_events_fire_once_for_their_cause(
    store: Store, receiver: Receiver
) -> None:
    await _channel(store, receiver.url)
    watched = [NotifyRule("ops", ALL)]
    a = await due_run(store, "a", notify=tuple(watched))
    quiet = await due_run(store, "quiet")  # no subscription: no outbox rows
    await _finish(store, {a: RunStatus.DEAD, quiet: RunStatus.DEAD})
    assert sorted(await _outbox(store)) == [("job_failing", a), ("run_dead", a)]
    n = _notifier(store)
    await _deliver(n)
    assert sorted(receiver.events()) == ["job_failing", "run_dead"]
    assert all(r.verified for r in receiver.received)
    [first] = [r.json for r in receiver.received if r.json["type"] == "run_dead"]
    assert first["data"]["job"]["name"] == "a" and first["data"]["run"]["exit_code"] == 1
    assert first["id"] in receiver.ids()  # webhook-id names the event in the body
    # A second dead run of the same streak: run_dead again, no second job_failing.
    job_id = (await sql_rows(store, "SELECT job_id FROM runs WHERE id = $1", a))[0]["job_id"]
    again = await _trigger(store, job_id)
    await _finish(store, {again: RunStatus.DEAD})
    ok = await _trigger(store, job_id)
    await _finish(store, {ok: RunStatus.SUCCEEDED})
    ok2 = await _trigger(store, job_id)
    await _finish(store, {ok2: RunStatus.SUCCEEDED})  # recovered once, not per success
    await _deliver(n)
    assert receiver.events()[2:] == ["run_dead", "job_recovered"]
    recovered = receiver.received[3].json["data"]
    assert (recovered["streak"], recovered["run"]["id"]) == (2, ok)
    assert await count(store, "delivery_attempts") == 4
    assert await count(store, "outbox", "status = 'delivered'") == 4


async def _trigger(store: Store, job_id: int) -> int:
    from supervisor.core import jobs

    run_id, _ = await jobs.trigger_job(store, job_id, None, None)
    return run_id


async def test_a_rolled_back_completion_emits_nothing(store: Store, receiver: Receiver) -> None:
    await _channel(store, receiver.url)
    run_id = await due_run(store, "a", notify=(NotifyRule("ops", ALL),))
    [claim] = await store.claim_runs(["echo"], 10, "w1", TTL)
    done = Completion(run_id, claim.lease_token, RunStatus.DEAD, 0.0, Outcome.FAILED, "x")
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            assert await tx.complete_runs([done], "w1") == {run_id}
            assert await count(tx, "outbox") == 2  # written with the change...
            raise RuntimeError("fault between the change and its commit")
    assert await count(store, "outbox") == 0  # ...and gone with it
    assert await count(store, "job_streaks") == 0
    assert await status(store, run_id) == "running"


async def test_reaped_runs_raise_run_failed_and_one_worker_lost(
    store: Store, receiver: Receiver
) -> None:
    await _channel(store, receiver.url, all_jobs=("worker_lost",))
    ids = [await due_run(store, f"r{i}", notify=(NotifyRule("ops", ALL),)) for i in range(3)]
    await store.upsert_worker("w9", "host9", 9, ["echo"], 4, "t", TTL)
    await store.claim_runs(["echo"], 10, "w9", TTL)
    await age_lease(store, ids[0], -60)
    await age_lease(store, ids[1], -60)
    reaper = Reaper(store, interval=1.0)
    assert (await reaper.run_once()).reaped == 2
    await age_lease(store, ids[2], -60)
    assert (await reaper.run_once()).reaped == 1  # same worker, a later pass
    events = await _outbox(store)
    assert sorted(e for e, _ in events) == ["run_failed"] * 3 + ["worker_lost"]
    await _deliver(_notifier(store))
    [lost] = [r.json for r in receiver.received if r.json["type"] == "worker_lost"]
    assert lost["data"]["worker_id"] == "w9" and lost["data"]["host"] == "host9"


async def test_skips_raise_run_missed_and_overlap_events(store: Store) -> None:
    await _channel(store, "http://127.0.0.1:9/hook")
    rule = (NotifyRule("ops", ("run_missed", "run_overlap_skipped")),)
    missed = await due_run(store, "old", notify=rule, catchup="none")
    await set_run(
        store, missed, scheduled_at=await _ago(store, 600), run_after=await _ago(store, 600)
    )
    skipped = (await store.skip_missed_runs(60.0, 100)).skipped
    assert [s.id for s in skipped] == [missed]
    assert await _outbox(store) == [("run_missed", missed)]
    assert (await store.skip_missed_runs(60.0, 100)).skipped == []  # once
    assert await _outbox(store) == [("run_missed", missed)]
    # The planner's own missed rows (a gap older than the catch-up window) raise it too.
    job_id = await sql_value(store, "SELECT job_id FROM runs WHERE id = $1", missed)
    at = await _ago(store, 7200)
    planned = PlannedRuns()
    planned.add(job_id, "echo", False, 3, [at, at + timedelta(minutes=1)], missed=1)
    assert await store.insert_planned_runs(planned) == 2
    assert await store.insert_planned_runs(planned) == 0  # planned twice: nothing new
    [(event, run_id)] = (await _outbox(store))[1:]
    assert event == "run_missed" and await status(store, run_id) == "skipped"


async def _ago(store: Store, seconds: float) -> Any:
    return await store.now() - timedelta(seconds=seconds)


async def test_a_failing_receiver_is_retried_then_delivered(
    store: Store, receiver: Receiver
) -> None:
    cid = await _channel(store, receiver.url)
    receiver.mode = "fail"
    async with api_client(store) as api:
        delivery = (await (await api.post(f"/v1/channels/{cid}/test")).json())["delivery_id"]
        n = _notifier(store)
        await _deliver(n)
        row = (await sql_rows(store, "SELECT * FROM outbox WHERE id = $1", delivery))[0]
        assert (row["status"], row["attempts"], row["last_status"]) == ("pending", 1, 500)
        assert 2.5 <= (row["next_attempt_at"] - await store.now()).total_seconds() <= 5
        await _deliver(n)  # not due yet: nothing sent
        assert len(receiver.received) == 1
        receiver.mode = "ok"
        await sql(store, "UPDATE outbox SET next_attempt_at = now() WHERE id = $1", delivery)
        await _deliver(n)
        assert receiver.ids() == [f"msg_{delivery}"] * 2  # the same id on every attempt
        listed = await (await api.get("/v1/deliveries", params={"status": "delivered"})).json()
        [shown] = listed["deliveries"]
        assert [a["status_code"] for a in shown["history"]] == [500, 204]
        assert n.outcomes == {("ops", "retry"): 1, ("ops", "delivered"): 1}


async def test_a_delivery_whose_record_fails_is_counted_and_sent_again_after_its_lease(
    store: Store, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database fails the write of a sent delivery's result: the error counts as the
    notifier's (punchclock_db_errors), nothing is recorded, and the row is due again once
    its lease lapses: at-least-once, under the same message id."""
    cid = await _channel(store, receiver.url)
    async with api_client(store) as api:
        delivery = (await (await api.post(f"/v1/channels/{cid}/test")).json())["delivery_id"]
    n = _notifier(store)
    record = n.n.record_delivery

    async def lost(*args: Any, **kwargs: Any) -> bool:
        raise asyncpg.PostgresConnectionError("connection was closed in the middle of operation")

    monkeypatch.setattr(n.n, "record_delivery", lost)
    await _deliver(n)
    assert (n.errors, n.outcomes) == (1, {("ops", "unrecorded"): 1})
    row = (await sql_rows(store, "SELECT * FROM outbox WHERE id = $1", delivery))[0]
    assert (row["status"], row["attempts"], row["last_status"]) == ("pending", 1, None)
    monkeypatch.setattr(n.n, "record_delivery", record)
    await sql(store, "UPDATE outbox SET next_attempt_at = now() WHERE id = $1", delivery)
    await _deliver(n)
    assert receiver.ids() == [f"msg_{delivery}"] * 2
    row = (await sql_rows(store, "SELECT * FROM outbox WHERE id = $1", delivery))[0]
    assert (row["status"], row["attempts"], n.errors) == ("delivered", 2, 1)


async def test_timeouts_and_a_down_receiver_fail_after_the_window(
    store: Store, receiver: Receiver
) -> None:
    await _channel(store, receiver.url)
    receiver.mode = "hold"  # never answers within the timeout
    async with api_client(store) as api:
        cid = (await (await api.get("/v1/channels")).json())["channels"][0]["id"]
        await api.post(f"/v1/channels/{cid}/test")
        n = _notifier(store, timeout=0.3, retry_window=3600.0)
        await _deliver(n)
        [row] = await sql_rows(store, "SELECT * FROM delivery_attempts")
        assert row["error"] == "timed out after 0.3 s" and row["status_code"] is None
        await receiver.stop()  # down: connection refused
        await sql(
            store,
            "UPDATE outbox SET next_attempt_at = now(), created_at = now() - interval '2 hours'",
        )
        n.retry_window = 3600.0  # the event is older than the window: this try is the last
        await _deliver(n)
        failed = await (await api.get("/v1/deliveries", params={"status": "failed"})).json()
        [shown] = failed["deliveries"]
        assert shown["attempts"] == 2 and "ClientConnectorError" in shown["last_error"]
        assert shown["finished_at"] is not None


async def test_redirects_are_not_followed_and_slack_bodies_are_plain(
    store: Store, receiver: Receiver
) -> None:
    await _channel(store, receiver.url, name="chat", format="slack", secret=None)
    async with api_client(store) as api:
        await api.post("/v1/channels/1/test")
        n = _notifier(store)
        receiver.mode = "redirect"
        await _deliver(n)
        [row] = await sql_rows(store, "SELECT * FROM outbox")
        assert (row["status"], row["last_status"]) == ("pending", 302)
    [got] = receiver.received
    assert "webhook-signature" not in got.headers  # no secret: unsigned
    assert set(got.json) == {"text"} and "test notification" in got.json["text"]


def test_signatures_fail_for_tampering_a_wrong_secret_and_old_timestamps() -> None:
    body = b'{"type":"run_dead"}'
    now = int(time.time())
    good = webhooks.headers(SECRET, "msg_1", now, body)
    headers = {k.lower(): v for k, v in good.items()}
    assert verify(SECRET, headers, body) and webhooks.verify(SECRET, headers, body, now)
    assert not verify(SECRET, headers, body + b" ")
    other = "whsec_" + "b" * 43 + "="
    assert not verify(other, headers, body)
    old = {k.lower(): v for k, v in webhooks.headers(SECRET, "msg_1", now - 600, body).items()}
    assert not verify(SECRET, old, body) and not webhooks.verify(SECRET, old, body, now)
    assert not webhooks.verify(SECRET, {**headers, "webhook-id": "msg_2"}, body, now)


async def test_run_late_is_raised_once_per_late_run(store: Store) -> None:
    await _channel(store, "http://127.0.0.1:9/hook")
    late = await due_run(store, "late", notify=(NotifyRule("ops", ("run_late",)),))
    quiet = await due_run(store, "quiet", notify=(NotifyRule("ops", ("run_dead",)),))
    n = _notifier(store, late_after=60.0)
    assert await n.check_late() == 0  # due, but not late yet
    for run_id in (late, quiet):  # time moves through the data
        await set_run(store, run_id, run_after=await _ago(store, 120))
    assert await n.check_late() == 1
    assert await _notifier(store, owner="n2", late_after=60.0).check_late() == 0  # once
    [row] = await sql_rows(store, "SELECT event, run_id, data FROM outbox")
    assert (row["event"], row["run_id"]) == ("run_late", late)
    assert row["data"]["run"]["late_seconds"] >= 120


async def test_only_a_channel_that_opts_in_receives_the_run_payload(store: Store) -> None:
    plain, opted = Receiver(), Receiver()
    for r in (plain, opted):
        await r.start()
    try:
        await _channel(store, plain.url, "plain")
        await _channel(store, opted.url, "opted", include_payload=True)
        rules = (NotifyRule("plain", ("run_dead",)), NotifyRule("opted", ("run_dead",)))
        run_id = await due_run(store, "a", payload={"token": "s3cret"}, notify=rules)
        await _finish(store, {run_id: RunStatus.DEAD})
        await _deliver(_notifier(store))
        [p], [o] = plain.received, opted.received
        assert "payload" not in p.json["data"] and b"s3cret" not in p.body
        assert o.json["data"]["payload"] == {"token": "s3cret"} and o.verified
        rows = await sql_rows(store, "SELECT data FROM outbox")
        assert all("payload" not in r["data"] for r in rows), "never stored in the outbox"
    finally:
        for r in (plain, opted):
            await r.stop()


async def test_delivery_latency_is_a_histogram_by_channel(store: Store, receiver: Receiver) -> None:
    from supervisor.core.metrics import Metrics

    cid = await _channel(store, receiver.url)
    await channels.test_channel(store, cid)
    await sql(store, "UPDATE outbox SET created_at = now() - interval '90 seconds'")
    n, m = _notifier(store), Metrics("test")
    n.instrument(m)
    await _deliver(n)
    await n.close()
    text = m.render().decode()
    assert 'punchclock_notify_delivery_latency_seconds_count{channel="ops"} 1.0' in text
    assert 'punchclock_notify_delivery_latency_seconds_bucket{channel="ops",le="60"} 0.0' in text
    assert 'punchclock_notify_delivery_latency_seconds_bucket{channel="ops",le="120"} 1.0' in text


async def test_readyz_warns_of_channels_whose_deliveries_failed_for_an_hour(
    store: Store, pool: Any
) -> None:
    from supervisor.core.health import readiness

    down = await _channel(store, "http://127.0.0.1:9/hook", "down")
    flaky = await _channel(store, "http://127.0.0.1:9/hook", "flaky")
    for cid in (down, flaky):  # an event tried and undelivered for two hours
        await channels.test_channel(store, cid)
    await sql(store, "UPDATE outbox SET attempts = 1, created_at = now() - interval '2 hours'")
    fresh = await channels.test_channel(store, flaky)  # flaky delivered one ten minutes ago
    await sql(
        store,
        "UPDATE outbox SET status = 'delivered', finished_at = now() - interval '10 minutes'"
        " WHERE id = $1",
        fresh,
    )
    ok, body = await readiness(pool, 60.0)
    assert ok, "a warning, not unreadiness"
    [warning] = body["failing_channels"]
    assert (warning["channel_name"], warning["pending_deliveries"]) == ("down", 1)
    await sql(store, "UPDATE outbox SET created_at = now() - interval '5 minutes'")
    assert "failing_channels" not in (await readiness(pool, 60.0))[1]
