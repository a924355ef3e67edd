"""The heartbeater service: renews the leases of in-flight runs every TTL/3, fenced by token.

A run missing from the renewal result is no longer ours (reaped, cancelled, requeued) and
its child is killed at once. When the database cannot be reached it keeps retrying quickly;
the executor's fence check kills children before their leases can expire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from supervisor import lease
from supervisor.loop import Loop
from supervisor.store import Store


class Heartbeater(Loop):
    name = "heartbeater"

    def __init__(
        self,
        store: Store,
        *,
        owner: str,
        lease_ttl: float,
        leases: Callable[[], list[tuple[int, int]]],
        renewed: Callable[[list[tuple[int, int]], set[int], float], None],
        running: Callable[[], int],
    ) -> None:
        super().__init__(lease_ttl * lease.RENEW, jitter=0.05, max_backoff=lease_ttl / 8)
        self.store = store
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.leases = leases
        self.renewed = renewed
        self.running = running
        self.failures = 0

    async def run_once(self) -> float | None:
        leases = self.leases()
        sent_at = time.monotonic()
        try:
            # One stalled connection must not hold every lease hostage until the fence kills
            # all children: give up after one heartbeat interval and retry on another.
            async with asyncio.timeout(self.lease_ttl * lease.RENEW):
                ok = await self.store.renew_leases(leases, self.owner, self.lease_ttl)
            # Apply the renewal before anything else can fail: a lost worker touch must not
            # throw away leases the database just extended (the fence would act on stale ones).
            self.renewed(leases, ok, sent_at)
            await self.store.touch_worker(self.owner, self.running())
        except Exception:
            self.failures += 1
            raise
        return None
