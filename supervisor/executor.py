"""What the services see of the runs this host executes: room and starts for the claimer,
leases for the heartbeater and the fence watch, live output for the live tail (faces.py);
how a claim's runs start together; and the shutdown (give back what waits, drain, give back
the rest).

A run's life after its start is runlife.py's; the table both use is inflight.py's. Every
finished child yields exactly one fenced completion, recorded in batches by the completer;
the database decides whether it is still ours (recorded) or late (dropped and counted).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from supervisor.completer import Completer
from supervisor.core.db import DB_ERRORS
from supervisor.core.log import log_event
from supervisor.core.records import Claim
from supervisor.core.store import Store
from supervisor.faces import AttemptEnded, AttemptOutcome, LiveOutput
from supervisor.inflight import InFlight, Life, Phase, RunTable
from supervisor.registry import Registry

# The planner holds off from HOLD_BEFORE before a claimed-ahead run's start until HOLD_AFTER
# past it, so the spawn and the child's start-up do not queue behind planning CPU.
HOLD_BEFORE = 0.03
HOLD_AFTER = 0.01

log = logging.getLogger("punchclock.executor")


@dataclass(frozen=True, slots=True)
class ShutdownReport:
    """What the executor's shutdown did (app.py's supervisor_drained event)."""

    released_unstarted: int = 0  # claimed ahead, given back before their instant came
    clean: bool = True  # every run in flight ended within the drain timeout
    released: int = 0  # killed after the drain and given back, no attempt charged


class Executor:
    def __init__(
        self,
        table: RunTable,
        life: Life,
        store: Store,
        registry: Registry,
        *,
        concurrency: int,
        completer: Completer,
        on_ended: Callable[[AttemptEnded], None] | None = None,
    ) -> None:
        self.table = table
        self.life = life
        self.store = store
        self.registry = registry
        self.concurrency = concurrency
        self.completer = completer  # where the runs' results go (app.py runs it)
        self.on_ended = on_ended
        self._starting: list[tuple[InFlight, Claim]] = []  # runs _start_batch starts next

    def use_handlers(self, registry: Registry, kill_grace: float, output_limit: int) -> None:
        """A reload's handlers and settings, for children started from now on."""
        self.registry = registry
        self.table.kill_grace = kill_grace
        self.life.use_handlers(registry, output_limit)

    @property
    def inflight(self) -> dict[int, InFlight]:
        return self.table.inflight

    @property
    def running(self) -> int:
        return self.table.running

    @property
    def self_fenced(self) -> int:
        return self.table.self_fenced

    # ------------------------------------------------------------ capacity (Slots)

    @property
    def free_slots(self) -> int:
        return max(0, self.concurrency - self.table.running)

    def room(self) -> dict[str, int]:
        """How many more children each type with its own `concurrency` may start now."""
        by_type = self.table.running_by_type
        return {
            t: max(0, h.concurrency - by_type.get(t, 0))
            for t, h in self.registry.handlers.items()
            if h.concurrency is not None
        }

    def held(self) -> Collection[int]:
        return self.table.inflight.keys()

    def in_flight(self) -> int:
        return len(self.table.inflight)

    def hold_off(self, now: float | None = None) -> float:
        """Seconds until no start of a run claimed ahead is near (0: none is), as seen at
        the monotonic instant `now` (default: this one)."""
        now = time.monotonic() if now is None else now
        near = [
            e.start_at
            for e in self.table.inflight.values()
            if now - HOLD_AFTER < e.start_at <= now + HOLD_BEFORE
        ]
        return max(near) + HOLD_AFTER - now if near else 0.0

    # ------------------------------------------------------------ leases (Leases, fence)

    def leases(self) -> list[tuple[int, int]]:
        return [(e.run_id, e.lease_token) for e in self.table.inflight.values()]

    def renewed(self, leases: list[tuple[int, int]], ok: set[int], sent_at: float) -> None:
        self.table.renewed(leases, ok, sent_at)

    def fence_check(self, now: float | None = None) -> None:
        """Kill children whose lease could expire before another renewal succeeds."""
        self.table.fence(now)

    # ------------------------------------------------------------ live output (Running)

    def live_output(self, older_than: float) -> list[LiveOutput]:
        since = time.monotonic() - older_than
        out = []
        for e in self.table.inflight.values():
            child = e.child
            if (
                e.phase is Phase.RUNNING
                and child is not None
                and child.started_monotonic < since
                and (live := child.live_output()) is not None
            ):
                out.append(LiveOutput(e.run_id, e.attempt, e.lease_token, *live))
        return out

    # ------------------------------------------------------------ starting (Slots.start)

    def start(self, row: Claim, claimed_at: float) -> None:
        table = self.table
        entry = InFlight(
            run_id=row.id,
            lease_token=row.lease_token,
            attempt=row.attempts,
            job_name=row.job_name,
            type=row.type,
            valid_until=claimed_at + table.lease_ttl,
            wakes_others=row.wakes_others,
            # From the reply, not from `claimed_at` (when the claim was sent): never early.
            start_at=time.monotonic() + row.start_in if row.start_in > 0 else 0.0,
        )
        if table.keeper is not None:
            entry.batch = table.announce(claimed_at, entry.valid_until)
        old = table.take(entry)
        handler = self.registry.handlers.get(row.type)
        if old is None and not entry.start_at and (handler is None or not handler.env_files):
            # The usual run: started with the rest of its claim once the claimer yields
            # (_start_batch), with no task of its own.
            if not self._starting:
                asyncio.get_running_loop().call_soon(self._start_batch)
            self._starting.append((entry, row))
        else:
            entry.task = asyncio.get_running_loop().create_task(self.life.prepare(entry, row, old))

    def _start_batch(self) -> None:
        """Start the runs `start` queued in one loop iteration (a claim's)."""
        batch, self._starting = self._starting, []
        self.life.spawn([(entry, row, {}) for entry, row in batch])

    # ------------------------------------------------------------ shutdown

    async def drain(self, within: float, hurry: asyncio.Event | None = None) -> bool:
        """Wait for in-flight runs to finish; True if all did within `within` seconds."""
        return await self.table.until(lambda: not self.table.inflight, within, hurry)

    async def release_waiting(self) -> int:
        """At shutdown, before the drain: runs claimed ahead whose instant has not come go
        back unstarted (no attempt spent), to start on time on another host."""
        now = time.monotonic()
        return await self._give_back(
            [
                e
                for e in self.table.inflight.values()
                if e.child is None and e.phase is Phase.RUNNING and e.start_at > now
            ]
        )

    async def interrupt_all(self) -> int:
        """Kill what is left and give the runs back without consuming an attempt."""
        # A run whose child already ended has its result queued: the completer records it.
        # Releasing it instead would run a finished handler a second time elsewhere.
        return await self._give_back(
            [e for e in self.table.inflight.values() if e.phase is not Phase.COMPLETING]
        )

    async def _give_back(self, entries: list[InFlight]) -> int:
        if not entries:
            return 0
        table = self.table
        leases = [(e.run_id, e.lease_token) for e in entries]
        for e in entries:
            e.move(Phase.RELEASED)
        await asyncio.gather(
            *(e.child.kill("supervisor shutting down") for e in entries if e.child is not None),
            return_exceptions=True,
        )
        released: set[int] = set()
        try:
            released = await self.store.release_runs(leases, table.owner)
        except DB_ERRORS as exc:
            log_event(log, "release_failed", level=logging.WARNING, error=repr(exc))
        for e in entries:
            if e.run_id in released:
                table.event("interrupted", e)
                if self.on_ended:
                    ended = AttemptEnded(e.job_name, e.type, AttemptOutcome.INTERRUPTED, None)
                    self.on_ended(ended)
        for e in entries:
            if e.child is None and e.task is not None:
                e.task.cancel()  # still waiting for its instant: it retires now
        await table.until(lambda: all(e.retired for e in entries), table.kill_grace + 5)
        return len(released)
