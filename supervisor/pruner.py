"""The pruner service: deletes finished runs past their retention, a small batch at a time.

Succeeded and skipped runs are kept `retention_succeeded_days`, dead and cancelled ones
`retention_failed_days`; planned, retrying and running runs are never pruned. Delivered and
failed notification deliveries are kept `retention_deliveries_days`; pending ones never go.
Batches use SKIP LOCKED and commit separately, so several hosts share the work and no lock
lasts long.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from supervisor.core.log import log_event
from supervisor.core.store import Store
from supervisor.loop import GATED_EVERY, Loop, Pass

DAY = 86400.0


@dataclass(frozen=True)
class PrunePass(Pass):
    pruned: int = 0  # finished runs deleted past retention
    deliveries: int = 0  # finished deliveries deleted past retention


class Pruner(Loop):
    name = "pruner"

    def __init__(
        self,
        store: Store,
        *,
        keep_succeeded_days: float,
        keep_failed_days: float,
        keep_deliveries_days: float = 30.0,
        interval: float = 60.0,
        batch: int = 500,
        gate: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(interval, jitter=0.2)
        self.gate = gate or (lambda: True)  # whether this host holds the prune duty now
        self.store = store
        self.keep_succeeded = keep_succeeded_days * DAY
        self.keep_failed = keep_failed_days * DAY
        self.keep_deliveries = keep_deliveries_days * DAY
        self.batch = batch
        self.pruned = 0
        self._reached: datetime | None = None  # where this sweep's last full batch ended
        self.pruned_deliveries = 0

    async def run_once(self) -> PrunePass:
        if not self.gate():
            return PrunePass(GATED_EVERY)  # woken on taking the duty
        deleted, reached = await self.store.prune_runs(
            self.keep_succeeded, self.keep_failed, self.batch, self._reached
        )
        # A full batch: the next one goes on from here; else the sweep is over.
        self._reached = reached if deleted == self.batch else None
        self.pruned += deleted
        if deleted:
            log_event(self.log, "runs_pruned", runs=deleted)
        gone = await self.store.prune_deliveries(self.keep_deliveries, self.batch)
        self.pruned_deliveries += gone
        if gone:
            log_event(self.log, "deliveries_pruned", deliveries=gone)
        # A full batch means more is waiting: continue at once, between transactions.
        more = self.batch in (deleted, gone)
        return PrunePass(0.0 if more else None, pruned=deleted, deliveries=gone)
