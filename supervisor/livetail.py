"""The live tail: while a child runs, its output so far is written to its attempt row at
most once a second (one statement for all of them), so the dashboard and the API show it.

Only children running for longer than a second that printed something new since the last
write are written: the throughput path of short runs never touches it. The write is fenced
by lease token and skips an attempt that has ended (the completion's final tails win).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.core.store import Store
from supervisor.faces import LiveOutput, Running
from supervisor.loop import IDLE_EVERY, Loop, Pass

EVERY = 1.0  # seconds between writes, and how long a child runs before its first


@dataclass(frozen=True)
class TailPass(Pass):
    written: int = 0


class LiveTail(Loop):
    name = "live_tail"

    def __init__(self, store: Store, running: Running, every: float = EVERY) -> None:
        super().__init__(every, jitter=0.0)  # also how long a child runs before its first
        self.store = store
        self.running = running
        self._seen: dict[tuple[int, int], int] = {}  # (run, attempt) -> bytes last written

    async def run_once(self) -> TailPass:
        live = self.running.live_output(self.interval)
        fresh: list[LiveOutput] = [
            o for o in live if self._seen.get((o.run_id, o.attempt)) != o.received
        ]
        if fresh:
            rows = [
                (o.run_id, o.attempt, o.lease_token, o.stdout_tail, o.stderr_tail) for o in fresh
            ]
            await self.store.write_live_tails(rows)
        self._seen = {(o.run_id, o.attempt): o.received for o in live}
        self.resting = not self.running.in_flight()  # a child's start rouses us
        return TailPass(max(self.interval, IDLE_EVERY) if self.resting else None, len(fresh))
