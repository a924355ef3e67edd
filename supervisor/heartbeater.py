"""The heartbeater service: renews the leases of in-flight runs every TTL/3, fenced by token,
and beats for this host (one statement: its worker row, its duties, its seats; duties.py).

A run missing from the renewal result is no longer ours (reaped, cancelled, requeued) and
its child is killed at once. When the database cannot be reached it keeps retrying quickly;
the executor's fence check kills children before their leases can expire. An idle host
sends only the beat, and in a large fleet less often (IDLE_BEAT_GAP).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from supervisor import lease
from supervisor.core.fleet import fleet
from supervisor.core.store import Store
from supervisor.duties import Duties
from supervisor.faces import Leases
from supervisor.loop import Loop, Pass

# While duties are free, the next beat comes this soon: a host starting alone takes them
# all within a second or two, one per beat.
TAKE_AGAIN = 0.2
# A host that holds no lease and no duty beats every TTL/3, or less often in a fleet: the
# fleet's idle beats stay this many seconds apart (about 20 a second) however many hosts
# it has. Leases and duties are renewed every TTL/3 whatever the fleet's size.
IDLE_BEAT_GAP = 0.05


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
        duties: Duties | None = None,
    ) -> None:
        super().__init__(lease_ttl * lease.RENEW, jitter=0.05, max_backoff=lease_ttl / 8)
        self.store = store
        self.fleet = fleet(store)
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.holder = holder
        self.on_renewed = on_renewed  # how many leases a round renewed
        self.duties = duties or Duties(lease_ttl)
        self.failures = 0
        self._beat_at: float | None = None  # monotonic, of the last beat answered

    def beat_age(self) -> float | None:
        """Seconds since the last beat the database answered (None before the first): the
        side door's /readyz, without a query."""
        return None if self._beat_at is None else time.monotonic() - self._beat_at

    def stale_after(self) -> float:
        """A beat older than this means the database fails this host: a lease's life, or two
        idle beats' gap in a large fleet (an idle host beats less often)."""
        return max(self.lease_ttl, 2 * self.idle_every())

    def idle_every(self) -> float:
        """Seconds between beats while this host holds no lease and no duty."""
        return max(self.interval, IDLE_BEAT_GAP * self.duties.fleet_size())

    async def run_once(self) -> RenewPass:
        leases = self.holder.leases()
        sent_at = time.monotonic()
        idle = not leases and not self.duties.held() and self.duties.free == 0
        if idle and self._beat_at is not None and sent_at - self._beat_at < self.idle_every():
            return RenewPass()  # checked every TTL/3: a lease taken meanwhile waits no longer
        try:
            # A renewal is given up (cancelled) only once its answer could save no lease: a
            # stalled connection is left then, and the next round goes on another. Giving up
            # sooner (after TTL/3) threw away the lease time a slow answer still buys and
            # cost the server a connection for each CancelRequest: on a starved 2-core host
            # of 100 supervisors every renewal was cancelled, and every run ended lease_lost.
            async with asyncio.timeout(self.lease_ttl * (1 - lease.SELF_FENCE)):
                ok = await self.store.renew_leases(leases, self.owner, self.lease_ttl)
            # Apply the renewal before anything else can fail: a lost beat must not throw
            # away leases the database just extended (the fence would act on stale ones).
            self.holder.renewed(leases, ok, sent_at)
            if self.on_renewed:
                self.on_renewed(len(ok))
            beat_at = time.monotonic()
            beat = await self.fleet.beat(
                self.owner,
                self.holder.in_flight(),
                self.lease_ttl,
                self.duties.held(),
                self.interval,
                self.idle_every(),
                self.duties.surplus(),
            )
            self.duties.beaten(beat, beat_at)
            self._beat_at = beat_at
        except Exception:
            self.failures += 1
            raise
        # The next round is due an interval after this one was sent, not after it returned:
        # a slow answer must not stretch the gap between renewals past the lease.
        due = self.jittered_interval() - (time.monotonic() - sent_at)
        again = max(0.0, min(due, TAKE_AGAIN) if beat.free > 0 else due)
        return RenewPass(again, renewed=len(ok), missing=len(leases) - len(ok))
