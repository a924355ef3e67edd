"""The runs in flight on this host: the per-run table that the executor (what the services
see) and a run's life (runlife.py) share, so that neither imports the other.

One InFlight per run (its lease token, its child, where it stands with its lease: Phase,
which moves only along NEXT_PHASES), and what the runs hold together: their slots (in all
and per type), the keeper's batch announcements their spawns are covered by, and their
leases' local deadlines (renewed, self-fenced). Its events are the executor's log lines
(`run_*`, logger punchclock.executor).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from supervisor import lease
from supervisor.core.log import log_event
from supervisor.proc.child import ChildResult

if TYPE_CHECKING:
    from supervisor.core.records import Claim
    from supervisor.proc.keeper import Keeper
    from supervisor.proc.runner import Child
    from supervisor.registry import Registry

log = logging.getLogger("punchclock.executor")


class Phase(enum.Enum):
    """Where an in-flight run stands with its lease; moves only along NEXT_PHASES."""

    RUNNING = "running"  # the lease is ours; the child waits for its instant, starts or runs
    LOST = "lost"  # a renewal did not find the run: its child is killed at once
    FENCED = "fenced"  # the lease could not be renewed in time: its child is being killed
    RELEASED = "released"  # given back at shutdown: no completion is sent
    # The database handed the run out again, to us: it lost the claim this execution runs
    # under (a failover on asynchronous replication). Killed, and no completion is sent.
    SUPERSEDED = "superseded"
    # The child has ended and its result is queued. Its lease is still renewed, but a
    # renewal that misses the run no longer means "lost": the completion may just have been
    # recorded, and the fenced completion itself tells a late result apart.
    COMPLETING = "completing"


NEXT_PHASES: dict[Phase, frozenset[Phase]] = {
    Phase.RUNNING: frozenset(
        {Phase.LOST, Phase.FENCED, Phase.RELEASED, Phase.SUPERSEDED, Phase.COMPLETING}
    ),
    Phase.FENCED: frozenset({Phase.LOST, Phase.RELEASED, Phase.SUPERSEDED, Phase.COMPLETING}),
    Phase.LOST: frozenset({Phase.RELEASED, Phase.SUPERSEDED, Phase.COMPLETING}),
    Phase.RELEASED: frozenset(),
    Phase.SUPERSEDED: frozenset(),
    Phase.COMPLETING: frozenset(),
}


@dataclass
class InFlight:
    run_id: int
    lease_token: int
    attempt: int
    job_name: str
    type: str
    valid_until: float  # monotonic: the lease surely holds until then
    start_at: float = 0.0  # monotonic: its instant (claimed ahead); the child starts then
    wakes_others: bool = False  # its end may let another host start a run (overlap, limit)
    child: Child | None = None
    phase: Phase = Phase.RUNNING
    # Its slot is free again: the child has ended (or never started), so the next run may
    # start while this result is still being recorded.
    slot_freed: bool = False
    # Only for a run that waits before its child starts (RunLife.prepare); a strong
    # reference, as the event loop keeps only weak ones.
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    batch: str = ""  # the keeper's batch announcement covering its spawn (RunTable.announce)
    # Its execution here is over (RunLife.retire): out of the table, its slot free.
    retired: bool = False

    def move(self, to: Phase) -> None:
        if to not in NEXT_PHASES[self.phase]:
            raise AssertionError(f"run {self.run_id}: no move from {self.phase} to {to}")
        self.phase = to

    @property
    def lease_gone(self) -> bool:
        """Lost or fenced: its child must not run on, and its outcome is lease_lost."""
        return self.phase in (Phase.LOST, Phase.FENCED)


# What a run starts with besides its claim: its environment files' variables, or the result
# of an attempt they keep from starting.
Extra = dict[str, str] | ChildResult


class Life(Protocol):
    """What the executor asks of a run's life (runlife.RunLife)."""

    def spawn(self, runs: list[tuple[InFlight, Claim, Extra]]) -> None:
        """Start these runs' children (a claim's, together)."""

    async def prepare(self, entry: InFlight, row: Claim, old: InFlight | None) -> None:
        """Wait for what the run needs before its child starts, then start it."""

    def use_handlers(self, registry: Registry, output_limit: int) -> None:
        """A reload's handlers, for children started from now on."""


class RunTable:
    """The runs in flight here, their slots, keeper batches and lease deadlines."""

    def __init__(
        self,
        *,
        owner: str,
        lease_ttl: float,
        kill_grace: float,
        keeper: Keeper | None = None,
        on_slot_free: Callable[[], None] | None = None,
        log_runs: bool = False,
    ) -> None:
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.kill_grace = kill_grace  # the cap of every kill's grace (a reload changes it)
        self.keeper = keeper
        self.on_slot_free = on_slot_free
        # run_started and run_succeeded: info with `log_runs`, else debug (two lines per run
        # were a tenth of a supervisor's CPU per run at the throughput benchmark's rates).
        self.routine_level = logging.INFO if log_runs else logging.DEBUG
        self.inflight: dict[int, InFlight] = {}
        # Runs whose child is starting or running: what `concurrency` limits. The table
        # also holds runs whose result is being recorded (their leases still renew).
        self.running = 0
        self.running_by_type: dict[str, int] = {}  # what a handler's `concurrency` limits
        self.self_fenced = 0
        self._batch: tuple[float, str] | None = None  # (claimed_at, prefix) of the last claim
        self._batch_left: dict[str, int] = {}  # prefix -> children not yet started
        self._retirements: list[asyncio.Future[None]] = []  # resolved when a run retires

    # ------------------------------------------------------------ slots

    def take(self, entry: InFlight) -> InFlight | None:
        """Into the table, holding a slot; returns the entry it replaces (the same run's
        earlier claim, which the database lost), if any."""
        old = self.inflight.get(entry.run_id)
        self.inflight[entry.run_id] = entry
        self.running += 1
        self.running_by_type[entry.type] = self.running_by_type.get(entry.type, 0) + 1
        return old

    def free_slot(self, entry: InFlight) -> None:
        if not entry.slot_freed:
            entry.slot_freed = True
            self.running -= 1
            self.running_by_type[entry.type] -= 1
            if self.on_slot_free:
                self.on_slot_free()

    def remove(self, entry: InFlight) -> None:
        """Out of the table (unless a new claim of the run replaced it there), its slot
        free, and whoever waits for a run to retire told."""
        if self.inflight.get(entry.run_id) is entry:
            del self.inflight[entry.run_id]
        self.free_slot(entry)
        if self._retirements:
            waiters, self._retirements = self._retirements, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def until(
        self, done: Callable[[], bool], within: float, hurry: asyncio.Event | None = None
    ) -> bool:
        """Wait until `done()`, checked as runs retire; False after `within` seconds, or
        once `hurry` is set."""
        deadline = time.monotonic() + within
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (hurry is not None and hurry.is_set()):
                return False
            fut = asyncio.get_running_loop().create_future()
            self._retirements.append(fut)
            await asyncio.wait({fut}, timeout=min(0.2, remaining))  # 0.2: to see `hurry`
        return True

    # ------------------------------------------------------------ keeper batches

    def announce(self, claimed_at: float, valid_until: float) -> str:
        """The keeper's announcement covering the children of the claim made at
        `claimed_at` (one per claim: a supervisor frozen before it names a child's group
        still has it killed before its lease ends)."""
        assert self.keeper is not None
        if self._batch is None or self._batch[0] != claimed_at:
            prefix = uuid.uuid4().hex[:12]
            self.keeper.announce_batch(prefix, lease.keeper_kill_by(valid_until, self.lease_ttl))
            self._batch = (claimed_at, prefix)
            self._batch_left[prefix] = 0
        prefix = self._batch[1]
        self._batch_left[prefix] += 1
        return prefix

    def spawned(self, entry: InFlight) -> None:
        """Its child started (and is registered) or never will: the batch needs it no more.
        The batch is withdrawn on the next loop iteration, once its claim's other runs have
        started too (they start one after another within this one: one announcement and
        one withdrawal per claim, not per child)."""
        if not entry.batch:
            return
        prefix, entry.batch = entry.batch, ""
        self._batch_left[prefix] -= 1
        if self._batch_left[prefix] == 0:
            asyncio.get_running_loop().call_soon(self._withdraw, prefix)

    def _withdraw(self, prefix: str) -> None:
        if self._batch_left.get(prefix) != 0:
            return  # a run of the same claim took it again meanwhile, or it is withdrawn
        del self._batch_left[prefix]
        if self._batch is not None and self._batch[1] == prefix:
            self._batch = None
        assert self.keeper is not None
        self.keeper.withdraw(prefix)

    # ------------------------------------------------------------ leases

    def renewed(self, leases: list[tuple[int, int]], ok: set[int], sent_at: float) -> None:
        """A renewal's answer: `ok` still ours until `sent_at` + TTL; the rest lost."""
        for run_id, token in leases:
            entry = self.inflight.get(run_id)
            if entry is None or entry.lease_token != token:
                continue
            if run_id in ok:
                if sent_at + self.lease_ttl > entry.valid_until:
                    entry.valid_until = sent_at + self.lease_ttl
                    if entry.child is not None:
                        entry.child.set_kill_by(
                            lease.keeper_kill_by(entry.valid_until, self.lease_ttl)
                        )
            elif entry.phase in (Phase.RUNNING, Phase.FENCED):
                entry.move(Phase.LOST)
                self.event("lease_lost", entry, reason="the run is no longer ours")
                self.kill(entry, "lease lost", grace=0)

    def fence(self, now: float | None = None) -> None:
        """Kill children whose lease could expire before another renewal succeeds."""
        now = time.monotonic() if now is None else now
        margin = self.lease_ttl * lease.SELF_FENCE
        for entry in self.inflight.values():
            remaining = entry.valid_until - now
            if remaining < margin and entry.phase is Phase.RUNNING:
                entry.move(Phase.FENCED)
                self.self_fenced += 1
                self.event("self_fenced", entry, remaining_seconds=round(remaining, 3))
                self.kill(entry, "self-fenced: could not renew the lease", grace=remaining / 2)

    def kill(self, entry: InFlight, reason: str, grace: float | None = None) -> None:
        if entry.child is not None:
            grace = None if grace is None else max(0.0, min(grace, self.kill_grace))
            asyncio.get_running_loop().create_task(entry.child.kill(reason, grace))

    # ------------------------------------------------------------ events

    def event(self, event: str, entry: InFlight, **fields: Any) -> None:
        level = (
            self.routine_level
            if event in ("started", "succeeded")
            else logging.INFO
            if event == "retry_scheduled"
            else logging.WARNING
        )
        if not log.isEnabledFor(level):
            return
        data = {
            "run_id": entry.run_id,
            "job_name": entry.job_name,
            "type": entry.type,
            "attempt": entry.attempt,
            "worker_id": self.owner,
            **fields,
        }
        log_event(log, f"run_{event}", level=level, **data)
