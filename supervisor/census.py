"""The census service: seats the live workers per type (the census duty, one host at a time).

A seat decides whom a wake-up reaches first and how often a host polls (duties.py). The
census rewrites only the rows whose seats changed, so a steady fleet costs one read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from supervisor.core.fleet import fleet
from supervisor.core.store import Store
from supervisor.loop import GATED_EVERY, Loop, Pass

EVERY = 5.0  # seconds between counts: a new or dead host is seated within this and a beat


@dataclass(frozen=True)
class CensusPass(Pass):
    changed: int = 0  # workers whose seats changed


class Census(Loop):
    name = "census"

    def __init__(
        self, store: Store, *, gate: Callable[[], bool] | None = None, interval: float = EVERY
    ) -> None:
        super().__init__(interval, jitter=0.1)
        self.fleet = fleet(store)
        self.gate = gate or (lambda: True)

    async def run_once(self) -> CensusPass:
        if not self.gate():
            return CensusPass(GATED_EVERY)  # woken on taking the duty
        return CensusPass(changed=await self.fleet.take_census())
