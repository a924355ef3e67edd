"""The heartbeater service: renews the leases of in-flight runs every TTL/3, fenced by token.

A run missing from the renewal result is no longer ours (reaped, cancelled, requeued) and
its child is killed at once. When the database cannot be reached it keeps retrying quickly;
the executor's fence check kills children before their leases can expire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from supervisor import lease
from supervisor.core.store import Store
from supervisor.faces import Leases
from supervisor.loop import Loop, Pass


@dataclass(frozen=True)
class RenewPass(Pass):
    renewed: int = 0  # leases the database extended
    missing: int = 0  # leases it no longer had for us (their children are killed)


class Heartbeater(Loop):
    name = "heartbeater"

    def __init__(
        self,
        store: Store,
        *,
        owner: str,
        lease_ttl: float,
        holder: Leases,
        on_renewed: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(lease_ttl * lease.RENEW, jitter=0.05, max_backoff=lease_ttl / 8)
        self.store = store
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.holder = holder
        self.on_renewed = on_renewed  # how many leases a round renewed
        self.failures = 0

    async def run_once(self) -> RenewPass:
        leases = self.holder.leases()
        sent_at = time.monotonic()
        try:
            # One stalled connection must not hold every lease hostage until the fence kills
            # all children: give up after one heartbeat interval and retry on another.
            async with asyncio.timeout(self.lease_ttl * lease.RENEW):
                ok = await self.store.renew_leases(leases, self.owner, self.lease_ttl)
            # Apply the renewal before anything else can fail: a lost worker touch must not
            # throw away leases the database just extended (the fence would act on stale ones).
            self.holder.renewed(leases, ok, sent_at)
            if self.on_renewed:
                self.on_renewed(len(ok))
            await self.store.touch_worker(self.owner, self.holder.in_flight())
        except Exception:
            self.failures += 1
            raise
        return RenewPass(renewed=len(ok), missing=len(leases) - len(ok))
