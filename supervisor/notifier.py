"""The notifier service: delivers outbox rows (notification events) to their channels.

Every supervisor runs one. A pass claims due deliveries (SKIP LOCKED, under a lease of one
request timeout plus slack) and sends each in its own task, so a slow receiver holds one of
`concurrency` slots, never a database connection, and never the claimer or the completer.
Each attempt is recorded (status code, error, duration). The retry rules follow Standard
Webhooks (outbound.judge): a network error, a 5xx, 429 or 408 is retried with exponential
backoff and jitter (never sooner than a Retry-After asks) until `retry_window` has passed
since the event; another 3xx/4xx fails after a few attempts; 410 Gone fails and disables the
channel (a ping URL: not sent again from here for an hour). Redirects are not followed; no
connection reaches a refused address (outbound.py); a response body is read up to 4 KiB.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from supervisor import outbound
from supervisor.core import webhooks
from supervisor.core.channels import Delivery, Notifications
from supervisor.core.db import DB_ERRORS
from supervisor.core.events import host_allowed
from supervisor.core.log import log_event
from supervisor.core.metrics import Metrics
from supervisor.loop import GATED_EVERY, Loop, Pass

RETRY_BASE = 5.0  # seconds before the second attempt (then doubling, equal jitter)
RETRY_CAP = 3600.0
LEASE_SLACK = 5.0  # a claim lasts the request timeout plus this
DEPTH_EVERY = 15.0  # seconds between outbox depth reads (a gauge)
ERROR_MAX = 500
LATE_BATCH = 1000  # the oldest late runs looked at per check
# Pings (a job's ping_url, the heartbeat) are retried this long at most: a ping that arrives
# much later would tell an outside monitor of a life that has since ended.
PING_RETRY_WINDOW = 600.0
GONE_FOR = 3600.0  # a ping URL that answered 410 is not sent again from here for this long
GONE_MAX = 10000  # ping URLs remembered as gone (the oldest forgotten first)


@dataclass(frozen=True)
class NotifyPass(Pass):
    claimed: int = 0  # deliveries started in this pass


def retry_delay(attempt: int) -> float:
    """Seconds before the next attempt after `attempt` failed: uniform(b/2, b)."""
    b = min(RETRY_CAP, RETRY_BASE * 2 ** min(attempt - 1, 20))
    return random.uniform(b / 2, b)


class WebhookNotifier(Loop):
    name = "notifier"

    def __init__(
        self,
        notifications: Notifications,
        *,
        owner: str,
        timeout: float,
        retry_window: float,
        allowed_hosts: tuple[str, ...] = (),
        allow_private: bool = False,
        late_after: float = 60.0,
        interval: float = 1.0,
        concurrency: int = 16,
        gate: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(interval)
        self.gate = gate or (lambda: True)  # whether this host holds a notify duty now
        self.n = notifications
        self.owner = owner
        self.timeout = timeout
        self.retry_window = retry_window
        self.allowed_hosts = allowed_hosts
        self.allow_private = allow_private  # notify_allow_private: loopback, private, ...
        self._gone: dict[str, float] = {}  # ping URL -> monotonic time it answered 410
        self.late_after = late_after  # run_late unless a job says: ready_max_lag
        self.concurrency = concurrency
        self._session: aiohttp.ClientSession | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._depth_at = 0.0
        # Read by the metrics: deliveries by (channel, outcome), events by kind (counted at
        # their first attempt), the outbox depth and its oldest pending age.
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.events: Counter[str] = Counter()
        self.depth = (0, 0.0)
        self._latency: Any = None  # Metrics.delivery_latency once instrumented

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = outbound.session(self.timeout, self.concurrency, self.allow_private)
        return self._session

    def instrument(self, m: Metrics) -> None:
        """Notification metrics, read at scrape time from what this service counts, and the
        delivery latency histogram, recorded per delivery."""
        self._latency = m.delivery_latency
        m.counter(
            "punchclock_notify_events",
            "Notification events by kind (counted at their first delivery attempt here)",
            lambda: [(n, {"event": e}) for e, n in self.events.items()],
        )
        m.counter(
            "punchclock_notify_deliveries",
            "Delivery attempts by channel and outcome (delivered, retry, failed, lease_lost)",
            lambda: [(n, {"channel": c, "outcome": o}) for (c, o), n in self.outcomes.items()],
        )
        m.gauge(
            "punchclock_notify_outbox_depth",
            "Pending notification deliveries (all channels, read every 15 s)",
            lambda: [(self.depth[0], {})],
        )
        m.gauge(
            "punchclock_notify_outbox_oldest_seconds",
            "Age of the oldest pending notification delivery",
            lambda: [(self.depth[1], {})],
        )

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            await self.close()

    async def close(self) -> None:
        """Let deliveries in flight end (each is bounded by the timeout), then close."""
        if self._inflight:
            await asyncio.wait(self._inflight, timeout=self.timeout + 1)
        for task in self._inflight:
            task.cancel()
        if self._session is not None:
            await self._session.close()

    async def idle(self) -> None:
        """Wait until no delivery is in flight (tests)."""
        while self._inflight:
            await asyncio.wait(set(self._inflight))

    async def run_once(self) -> NotifyPass:
        if not self.gate():
            return NotifyPass(GATED_EVERY)  # woken on taking the duty
        await self._read_depth()
        free = self.concurrency - len(self._inflight)
        if free <= 0:
            return NotifyPass(self.interval)  # a finishing delivery wakes us
        rows = await self.n.claim_deliveries(free, self.owner, self.timeout + LEASE_SLACK)
        for d in rows:
            if d.attempts == 1:
                self.events[d.event] += 1
            task = asyncio.create_task(self._deliver(d))
            self._inflight.add(task)
            task.add_done_callback(self._finished)
        return NotifyPass(0.0 if rows and len(rows) == free else None, claimed=len(rows))

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self.wake()

    async def _read_depth(self) -> None:
        """Every DEPTH_EVERY seconds: the outbox gauge, and the time-based events."""
        if time.monotonic() - self._depth_at >= DEPTH_EVERY:
            self._depth_at = time.monotonic()
            await self.check_late()
            await self.check_silent()
            self.depth = await self.n.outbox_depth()

    async def check_late(self) -> int:
        """Raise run_late for due runs that waited longer than `late_after` (once per run)."""
        return await self.n.raise_late_runs(self.late_after, LATE_BATCH)

    async def check_silent(self) -> int:
        """Raise job_silent for jobs without a success for their expect_success_within_seconds
        (once until the next success)."""
        return await self.n.raise_silent_jobs()

    async def _send(self, d: Delivery) -> tuple[int | None, str | None, Any]:
        """(status code, error, response headers): error None means delivered."""
        if d.format == "ping":  # a GET of the ping's own URL: no body, nothing to sign
            request = self.session.get(d.url, allow_redirects=False)
        else:
            msg_id = webhooks.message_id(d.id)
            body = webhooks.body(d.format, msg_id, d.event, d.created_at, d.data)
            headers = {**d.headers, **webhooks.headers(d.secret, msg_id, int(time.time()), body)}
            request = self.session.post(d.url, data=body, headers=headers, allow_redirects=False)
        try:
            async with request as resp:
                await outbound.read_bounded(resp)  # a hostile receiver's body stays unread
                if 200 <= resp.status < 300:
                    return resp.status, None, resp.headers
                return resp.status, f"HTTP {resp.status}", resp.headers
        except TimeoutError:
            return None, f"timed out after {self.timeout:g} s", {}
        except aiohttp.InvalidUrlClientError as exc:  # e.g. a legacy IPv4 spelling: permanent
            return None, f"refused: not a valid URL to send to ({exc})"[:ERROR_MAX], {}
        except aiohttp.ClientError as exc:
            refused = outbound.refused_in(exc)
            if refused is not None:
                return None, str(refused)[:ERROR_MAX], {}
            return None, f"{type(exc).__name__}: {exc}"[:ERROR_MAX], {}

    def _not_sent(self, d: Delivery) -> str | None:
        """Why this delivery is failed without a request, if it is."""
        if d.disabled is not None:
            return f"not sent: the channel is disabled ({d.disabled}); update it to enable it"
        gone = self._gone.get(d.url)
        if gone is not None and time.monotonic() - gone < GONE_FOR:
            return "not sent: this ping URL answered 410 Gone within the hour"
        try:
            host = URL(d.url).host or ""
        except ValueError:
            return "not sent: the URL is not valid"
        # Checked again here: the allow-list may have shrunk since the URL was stored.
        if not host_allowed(host, self.allowed_hosts):
            return f"not sent: host {host!r} is not in notify_allowed_hosts"
        return None

    async def _stop_sending(self, d: Delivery) -> str:
        """A 410 Gone: stop sending there (Standard Webhooks); the error to record."""
        if d.channel_id is not None:
            await self.n.disable_channel(d.channel_id, "its receiver answered 410 Gone")
            log_event(self.log, "channel_disabled", level=logging.WARNING,
                      channel=d.channel_name, reason="410 Gone")  # fmt: skip
            return "HTTP 410: the channel is disabled (410 Gone)"
        if len(self._gone) >= GONE_MAX:
            del self._gone[next(iter(self._gone))]
        self._gone[d.url] = time.monotonic()
        return "HTTP 410: this ping URL is not sent again for an hour (410 Gone)"

    async def _deliver(self, d: Delivery) -> None:
        started = time.monotonic()
        status: int | None = None
        retry_in, wait = 0.0, 0.0
        error = self._not_sent(d)
        if error is not None:
            action = "give_up"
        else:
            status, error, headers = await self._send(d)
            verdict = outbound.judge(status, headers, d.attempts)
            action, wait = verdict.action, verdict.wait
            if error is not None and error.startswith("refused"):
                action = "give_up"  # a refused destination stays refused: no retry
        duration = time.monotonic() - started
        if action == "delivered":
            outcome = "delivered"
        elif action == "retry":
            retry_in = max(retry_delay(d.attempts), wait)  # never sooner than Retry-After
            window = self.retry_window
            if d.format == "ping":
                window = min(window, PING_RETRY_WINDOW)
            late = d.age_seconds + duration + retry_in > window
            outcome = "failed" if late else "pending"
        else:
            outcome = "failed"
        try:
            if action == "gone":
                error = await self._stop_sending(d)
            kept = await self.n.record_delivery(
                d, self.owner, status, error, outcome, retry_in, duration
            )
        except DB_ERRORS as exc:  # the lease lapses and another attempt follows
            kept, outcome = False, "unrecorded"
            self.db_error(exc)
        except Exception as exc:  # one delivery never stops the service
            kept, outcome = False, "unrecorded"
            log_event(self.log, "delivery_unrecorded", level=logging.ERROR, error=repr(exc))
        if not kept and outcome != "unrecorded":
            outcome = "lease_lost"
        shown = "retry" if outcome == "pending" else outcome
        self.outcomes[(d.channel_name, shown)] += 1
        if outcome == "delivered" and self._latency is not None:
            self._latency.record(d.age_seconds + duration, {"channel": d.channel_name})
        log_event(
            self.log,
            "delivery_attempt",
            level=logging.INFO if error is None else logging.WARNING,
            delivery_id=d.id,
            channel=d.channel_name,
            kind=d.event,
            attempt=d.attempts,
            status_code=status,
            outcome=shown,
            duration_ms=round(duration * 1000, 1),
            retry_in=round(retry_in, 1) if outcome == "pending" else None,
            error=error,
        )
