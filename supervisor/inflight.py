"""A run in flight on this host: its lease token, its child, and where it stands with its
lease (Phase), which moves only along NEXT_PHASES. The executor owns the table of these."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from supervisor.proc.runner import Child


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
    # Only for a run that waits before its child starts (Executor._prepare); a strong
    # reference, as the event loop keeps only weak ones.
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    batch: str = ""  # the keeper's batch announcement covering its spawn (Executor.start)
    # Its execution here is over (Executor._retire): out of the table, its slot free.
    retired: bool = False

    def move(self, to: Phase) -> None:
        if to not in NEXT_PHASES[self.phase]:
            raise AssertionError(f"run {self.run_id}: no move from {self.phase} to {to}")
        self.phase = to

    @property
    def lease_gone(self) -> bool:
        """Lost or fenced: its child must not run on, and its outcome is lease_lost."""
        return self.phase in (Phase.LOST, Phase.FENCED)
