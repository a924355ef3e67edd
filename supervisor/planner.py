"""The planner service: inserts upcoming runs for jobs whose planned horizon has grown short.

Work per tick is proportional to the jobs that need planning (jobs_plan_due index), and
several planners split it with SKIP LOCKED. Inserting is idempotent (unique job+time).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from supervisor.log import log_event
from supervisor.loop import Loop
from supervisor.planning import PlanLimits, plan_jobs
from supervisor.store import Store


class Planner(Loop):
    name = "planner"

    def __init__(
        self,
        store: Store,
        limits: PlanLimits | None = None,
        *,
        interval: float = 1.0,
        batch: int = 500,
        on_planned: Callable[[int, float], None] | None = None,
    ) -> None:
        super().__init__(interval)
        self.store = store
        self.limits = limits or PlanLimits()
        self.batch = batch
        self.on_planned = on_planned

    async def run_once(self) -> float | None:
        """Plan every job that is due for planning, a batch per transaction."""
        while not self.stopping:
            started = time.perf_counter()
            async with self.store.transaction() as tx:
                jobs = await tx.pick_jobs_to_plan(self.batch)
                if not jobs:
                    return None
                inserted = await plan_jobs(tx, jobs, jobs[0]["db_now"], self.limits)
                if inserted:
                    await tx.notify_wake()
            elapsed = time.perf_counter() - started
            if self.on_planned:
                self.on_planned(inserted, elapsed)
            log_event(self.log, "planned", jobs=len(jobs), runs=inserted, seconds=round(elapsed, 4))
            if len(jobs) < self.batch:
                return None
        return None
