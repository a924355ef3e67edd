"""The reaper service: returns runs whose lease expired (host died or froze) to the queue.

Every supervisor runs one; SKIP LOCKED keeps them from fighting. A reaped attempt is
recorded as lease_lost; a run out of attempts becomes dead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from supervisor.core.log import log_event
from supervisor.core.model import RunStatus
from supervisor.core.records import Reaped
from supervisor.core.store import Store
from supervisor.loop import GATED_EVERY, Loop, Pass


@dataclass(frozen=True)
class ReapPass(Pass):
    reaped: int = 0  # runs whose lease had expired, given back or dead
    dead: int = 0  # of those, out of attempts


class Reaper(Loop):
    name = "reaper"

    def __init__(
        self,
        store: Store,
        *,
        interval: float,
        batch: int = 200,
        on_reaped: Callable[[list[Reaped]], None] | None = None,
        gate: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(interval)
        self.gate = gate or (lambda: True)  # whether this host holds the reap duty now
        self.store = store
        self.batch = batch
        self.on_reaped = on_reaped

    async def run_once(self) -> ReapPass:
        if not self.gate():
            return ReapPass(GATED_EVERY)  # woken on taking the duty
        async with self.store.transaction() as tx:
            rows = await tx.reap_expired(self.batch)
            if rows:
                await tx.notify_wake()  # any type: a freed limit may admit others
        for r in rows:
            log_event(
                self.log,
                "run_reaped",
                run_id=r.id,
                job_id=r.job_id,
                attempt=r.attempts,
                lost_by=r.lease_owner,
                status=r.status,
            )
        if rows and self.on_reaped:
            self.on_reaped(rows)
        dead = sum(1 for r in rows if r.status is RunStatus.DEAD)
        return ReapPass(0.0 if len(rows) == self.batch else None, reaped=len(rows), dead=dead)
