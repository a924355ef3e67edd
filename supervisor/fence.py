"""The fence watch: a short tick that kills children whose lease could run out before a
renewal succeeds (the executor's fence_check, DESIGN.md: Self-fencing), and sweeps orphans.
With no run in flight it ticks every IDLE_EVERY seconds (the orphan sweep's safety net: a
finished handler's sweep already caught what it left) until a child start wakes it.
"""

from __future__ import annotations

from collections.abc import Callable

from supervisor.loop import IDLE_EVERY, Loop, Pass


class FenceWatch(Loop):
    """Calls `check` every `interval` seconds (lease.FENCE_POLL of the TTL, at most 0.5 s)."""

    name = "fence"

    def __init__(
        self, check: Callable[[], None], interval: float, busy: Callable[[], bool] | None = None
    ) -> None:
        super().__init__(interval, jitter=0.0)
        self.check = check
        self.busy = busy or (lambda: True)  # whether any run is in flight here

    async def run_once(self) -> Pass:
        self.check()
        self.resting = not self.busy()
        return Pass(max(self.interval, IDLE_EVERY) if self.resting else None)
