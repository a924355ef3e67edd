"""The planner service: inserts upcoming runs for jobs whose planned horizon has grown short.

Work per tick is proportional to the jobs that need planning (jobs_plan_due index), and
several planners split it with SKIP LOCKED. Inserting is idempotent (unique job+time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

from supervisor.core.log import log_event
from supervisor.core.planning import PLAN_RETRY, PlanFailure, PlanLimits, plan_jobs
from supervisor.core.store import Store
from supervisor.loop import GATED_EVERY, Loop, Pass


@dataclass(frozen=True)
class PlanPass(Pass):
    jobs: int = 0  # jobs planned
    runs: int = 0  # run rows inserted
    failed: int = 0  # jobs this host could not plan (see `unplannable`)
    heartbeat: bool = False  # this pass wrote the minute's heartbeat ping

    def plus(self, other: PlanPass) -> PlanPass:
        return replace(
            self,
            jobs=self.jobs + other.jobs,
            runs=self.runs + other.runs,
            failed=self.failed + other.failed,
            heartbeat=self.heartbeat or other.heartbeat,
        )


HEARTBEAT_EVERY = 10.0  # seconds between this planner's heartbeat writes
# A planner step holds off while a child start of this host is near (`hold_off`), at most
# this long per step: planning slows down around starts but never stops.
MAX_HOLD = 0.05
# Batches in flight in a planning wave (supervisors use this; see Planner.run_once).
PLAN_LANES = 2
BATCH = 500  # jobs per planning transaction


class Planner(Loop):
    name = "planner"

    def __init__(
        self,
        store: Store,
        limits: PlanLimits | None = None,
        *,
        interval: float = 1.0,
        batch: int = BATCH,
        on_planned: Callable[[int, float], None] | None = None,
        heartbeat_url: str = "",
        hold_off: Callable[[], float] | None = None,
        lanes: int = 1,
        idle: Callable[[], bool] | None = None,
        gate: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(interval)
        # Whether this host holds a planning duty now (duties.py); None: always.
        self.gate = gate or (lambda: True)
        # Seconds until no child start of this host is near, else 0 (Executor.hold_off).
        self.hold_off = hold_off
        self.store = store
        # The deployment's heartbeat ping: written at most every HEARTBEAT_EVERY s here, and
        # once per minute cluster-wide (heartbeat_ping's unique key).
        self.heartbeat_url = heartbeat_url
        self._heartbeat_at = -HEARTBEAT_EVERY
        self.limits = limits or PlanLimits()
        self.batch = batch
        # Batches in flight during a planning wave; more than 1 needs a pool-backed store.
        self.lanes = lanes
        # Whether this host runs nothing now (Executor: nothing in flight). Lanes beyond the
        # first plan only then: a wave's full speed costs CPU that this host's starts need.
        self.idle = idle or (lambda: True)
        # Batches writing now, and their turns while this host runs something (_write_turn).
        self._writers = 0
        self._turns = asyncio.Condition()
        self.on_planned = on_planned
        # Jobs this host could not plan, by id, until one of its passes plans them again.
        self.unplannable: dict[int, PlanFailure] = {}
        self.plan_failures = 0

    def details(self) -> dict[str, Any]:
        """For /readyz: the jobs this host could not plan on its last pass over them."""
        if not self.unplannable:
            return {}
        return {
            "unplannable_jobs": [
                {"job_id": f.job_id, "job_name": f.job_name, "error": f.error}
                for f in self.unplannable.values()
            ]
        }

    async def run_once(self) -> PlanPass:
        """Plan every job that is due for planning, a batch per transaction.

        After a full first batch (a planning wave: first planning, a mass resume) `lanes`
        batches run at once, each in its own transaction on its own connection (SKIP LOCKED
        gives them disjoint jobs); their writes take turns while this host runs something
        (_write_turn). A quiet tick stays one short transaction.
        """
        if not self.gate():
            return PlanPass(GATED_EVERY)  # woken on taking the duty
        total = PlanPass(heartbeat=await self.heartbeat())
        if self.stopping:
            return total
        first, more = await self._batch()
        total = total.plus(first)
        if more:
            # Each lane runs until a batch comes back short; an error in one stops the others
            # after their current batch (no transaction is cut by cancellation), then is raised.
            halt = asyncio.Event()
            results = await asyncio.gather(
                *(self._lane(halt, i > 0) for i in range(max(1, self.lanes))),
                return_exceptions=True,
            )
            for r in results:
                if isinstance(r, BaseException):
                    raise r
                total = total.plus(r)
        return total

    async def _lane(self, halt: asyncio.Event, extra: bool) -> PlanPass:
        total = PlanPass()
        more = True
        try:
            while more and not self.stopping and not halt.is_set():
                if extra and not self.idle():
                    break
                done, more = await self._batch()
                total = total.plus(done)
        except BaseException:
            halt.set()
            raise
        return total

    async def _batch(self) -> tuple[PlanPass, bool]:
        """One batch in one transaction; True when it was full (more may be due)."""
        started = time.perf_counter()
        failures: list[PlanFailure] = []
        async with self.store.transaction() as tx:
            jobs, db_now = await tx.pick_jobs_to_plan(self.batch)
            if db_now is None:
                return PlanPass(), False
            inserted = await plan_jobs(
                tx, jobs, db_now, self.limits, failures, self._pause, self._write_turn()
            )
            if inserted:
                await tx.notify_wake(sorted({j.spec.type for j in jobs}))
        for job in jobs:
            self.unplannable.pop(job.id, None)
        for f in failures:
            self.unplannable[f.job_id] = f
            self.plan_failures += 1
            log_event(
                self.log,
                "plan_failed",
                level=logging.ERROR,
                job_id=f.job_id,
                job_name=f.job_name,
                error=f.error,
                retry_in=PLAN_RETRY.total_seconds(),
            )
        elapsed = time.perf_counter() - started
        if self.on_planned:
            self.on_planned(inserted, elapsed)
        log_event(self.log, "planned", jobs=len(jobs), runs=inserted, seconds=round(elapsed, 4))
        done = PlanPass(jobs=len(jobs) - len(failures), runs=inserted, failed=len(failures))
        return done, len(jobs) == self.batch

    @contextlib.asynccontextmanager
    async def _write_turn(self) -> AsyncIterator[None]:
        """Around a batch's writes. While this host runs something, lanes write one at a
        time and the others compute meanwhile: a second insert would delay this host's
        claims and starts (bench lateness, during a planning wave). An idle host's lanes
        write together, one PostgreSQL backend each (bench planner: first planning). A write
        started while idle counts too: once the host is busy, the next waits for it."""
        async with self._turns:
            await self._turns.wait_for(lambda: self._writers == 0 or self.idle())
            self._writers += 1
        try:
            yield
        finally:
            async with self._turns:
                self._writers -= 1
                self._turns.notify_all()

    async def _pause(self) -> None:
        """Between planning steps: one loop turn, or longer while a start is near."""
        hold = min(self.hold_off(), MAX_HOLD) if self.hold_off else 0.0
        await asyncio.sleep(hold)

    async def heartbeat(self) -> bool:
        """Write this minute's heartbeat ping unless another planner has; True if we did."""
        if not self.heartbeat_url or time.monotonic() - self._heartbeat_at < HEARTBEAT_EVERY:
            return False
        self._heartbeat_at = time.monotonic()
        return await self.store.heartbeat_ping(self.heartbeat_url)
