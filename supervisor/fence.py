"""The fence watch: a short tick that kills children whose lease could run out before a
renewal succeeds (the executor's fence_check, DESIGN.md: Self-fencing), and sweeps orphans.
"""

from __future__ import annotations

from collections.abc import Callable

from supervisor.loop import Loop, Pass


class FenceWatch(Loop):
    """Calls `check` every `interval` seconds (lease.FENCE_POLL of the TTL, at most 0.5 s)."""

    name = "fence"

    def __init__(self, check: Callable[[], None], interval: float) -> None:
        super().__init__(interval, jitter=0.0)
        self.check = check

    async def run_once(self) -> Pass:
        self.check()
        return Pass()
