"""Records fenced completions in batches: one statement for whatever finished meanwhile.

The database decides, per run, whether a result is still ours (recorded) or late (dropped);
each submitter learns which, through its callback (`enqueue`, the executor's path: no future
or task wake-up per run) or its future (`submit`). After `stop()`, an unreachable database
is retried for one lease TTL at most, then the results are given up (the reaper takes those
runs over).

Results that may ride on a claim (plain successes) are also offered to the claimer
(`take_riders`): a busy host's claim records them in its own statement
(claim_and_complete_runs), so its finished runs cost no statement of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from supervisor.core.db import DB_ERRORS
from supervisor.core.log import log_event
from supervisor.core.model import RunStatus
from supervisor.core.runpath import Completion
from supervisor.core.store import Store
from supervisor.faces import Rider
from supervisor.loop import IDLE_EVERY, Loop, Pass

BATCH = 500
# A batch waits this long for more results: one statement (and one commit) for several runs.
# 2 ms took PostgreSQL's CPU per run from 0.22-0.26 to 0.18-0.20 ms in 4,000-run drains; 20 ms
# took it another 8-15 % lower (0.442-0.494 of the children's CPU against 0.516-0.537), and
# the machine's 1-6 %. 50 ms (bench fleet, 10,000-run drains through PgBouncer): completions
# per run 0.193 -> 0.123 on 10 hosts, server CPU per run 1.67 -> 1.38 ms (100 hosts: 1.88 ->
# 1.62). The slot is free meanwhile; only the run's row stays 'running' longer.
COALESCE = 0.05

log = logging.getLogger("punchclock.completer")


@dataclass(frozen=True)
class CompletionPass(Pass):
    recorded: int = 0  # results recorded (the rest were late)


class Completer(Loop):
    """A Loop: a pass records one batch (after COALESCE for company); `stop()` ends the
    passes, and `run()` then flushes what is left (`_flush_after_stop`)."""

    name = "completer"  # its service label in db_error lines and punchclock_db_errors

    def __init__(self, store: Store, *, owner: str, lease_ttl: float) -> None:
        # Woken by the first result of a batch; between batches it sleeps until then.
        super().__init__(IDLE_EVERY, jitter=0.0, max_backoff=2.0)
        self.store = store
        self.owner = owner
        self.lease_ttl = lease_ttl
        self._pending: list[Rider] = []
        self._first_at: float | None = None  # when the oldest pending result came
        self.refused = 0  # results the database refused as they were (completion_refused)
        self.ridden = 0  # results recorded by a claim they rode on

    def enqueue(
        self, completion: Completion, wakes_others: bool, told: Callable[[bool | None], None]
    ) -> None:
        """Queue a result; `told` gets True once it is recorded, False if it was late, None
        if it was given up at shutdown (called from this loop; it must not raise)."""
        if not self._pending:
            self._first_at = time.monotonic()  # the batch's wait starts
        self._pending.append(Rider(completion, wakes_others, told))
        if len(self._pending) == 1 or len(self._pending) == BATCH:
            self.wake()  # the first starts the batch's wait, a full one ends it

    async def submit(self, completion: Completion, wakes_others: bool) -> bool | None:
        """`enqueue`, awaited."""
        fut: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()

        def told(recorded: bool | None) -> None:
            if not fut.done():
                fut.set_result(recorded)

        self.enqueue(completion, wakes_others, told)
        return await fut

    def take_riders(self, within: float) -> list[Rider]:
        if self._first_at is not None and self._first_at + COALESCE - time.monotonic() > within:
            return []  # the next claim is due before this batch: they may ride on that one
        riders: list[Rider] = []
        kept: list[Rider] = []
        for p in self._pending:
            (riders if p.rides and len(riders) < BATCH else kept).append(p)
        if riders:
            self._pending = kept
            if not kept:
                self._first_at = None
        return riders

    def rode(self, riders: list[Rider], recorded: set[int]) -> int:
        n = 0
        for p in riders:
            ok = p.completion.run_id in recorded
            n += ok
            _tell(p.told, ok)
        self.ridden += n
        return n

    def unseat(self, riders: list[Rider]) -> None:
        for p in riders:
            p.solo = True
        self._pending[:0] = riders
        self.wake()

    async def run_once(self) -> CompletionPass:
        """Record one batch of what is pending, once the oldest has waited COALESCE for
        company (at once when the batch is full or the loop is stopping)."""
        if not self._pending:
            self._first_at = None
            return CompletionPass()  # the next result wakes us
        now = time.monotonic()
        if self._first_at is None:
            self._first_at = now
        wait = self._first_at + COALESCE - now
        if wait > 0 and len(self._pending) < BATCH and not self.stopping:
            return CompletionPass(wait)  # pacing: results that end meanwhile join
        self._first_at = None
        # Out of the queue while in flight: a claim meanwhile takes only later ones.
        batch = self._pending[:BATCH]
        del self._pending[: len(batch)]
        try:
            recorded = await self._record([p.completion for p in batch])
        except BaseException:
            self._pending[:0] = batch  # retried whole (completions are idempotent)
            raise
        # Wake other hosts when a retry is scheduled, or an exclusive job or a limit's
        # slot is free again.
        if any(p.completion.status == RunStatus.FAILED or p.wakes_others for p in batch):
            await self._notify_quietly()
        for p in batch:
            _tell(p.told, p.completion.run_id in recorded)
        return CompletionPass(0.0 if self._pending else None, recorded=len(recorded))

    async def run(self) -> None:
        await super().run()
        await self._flush_after_stop()

    async def _flush_after_stop(self) -> None:
        """After `stop`, what is left is recorded; an unreachable database is retried for one
        lease TTL at most: by then every lease has expired, the database would reject the
        results anyway, and the reaper takes the runs over. Shutdown never hangs on a dead
        database."""
        give_up_at = time.monotonic() + self.lease_ttl
        backoff = 0.05
        while self._pending:
            try:
                await self.run_once()
                backoff = 0.05
            except DB_ERRORS as exc:
                self.db_error(exc)
                if time.monotonic() > give_up_at:
                    pending, self._pending = self._pending, []
                    for p in pending:
                        _tell(p.told, None)
                    return
                await asyncio.sleep(backoff)  # retry pacing, not synchronisation
                backoff = min(backoff * 2, self.max_backoff)

    async def _record(self, batch: list[Completion]) -> set[int]:
        """Record a batch; a value the database refuses fails only the result that holds it.

        Connection errors propagate (the batch is retried whole: completions are
        idempotent). Any other error splits the batch: each result is recorded alone, and
        one that is refused again is recorded without its output tails, the refusal in its
        error. One that cannot be stored even so is left to the reaper (lease_lost).
        """
        try:
            return await self.store.complete_runs(batch, self.owner)
        except DB_ERRORS:
            raise
        except Exception as exc:
            if len(batch) == 1:
                return await self._record_reduced(batch[0], exc)
            log_event(log, "completion_batch_refused", level=logging.WARNING, error=repr(exc))
        recorded: set[int] = set()
        for completion in batch:
            try:
                recorded |= await self.store.complete_runs([completion], self.owner)
            except DB_ERRORS:
                raise
            except Exception as exc:
                recorded |= await self._record_reduced(completion, exc)
        return recorded

    async def _record_reduced(self, completion: Completion, exc: Exception) -> set[int]:
        self.refused += 1
        fields = {"run_id": completion.run_id, "outcome": completion.outcome}
        log_event(log, "completion_refused", level=logging.ERROR, error=repr(exc), **fields)
        reduced = completion.without_output(f"result not stored in full: {exc!r}"[:2000])
        try:
            return await self.store.complete_runs([reduced], self.owner)
        except DB_ERRORS:
            raise
        except Exception as again:
            log_event(
                log, "completion_unstorable", level=logging.ERROR, error=repr(again), **fields
            )
            return set()

    async def _notify_quietly(self) -> None:
        with contextlib.suppress(*DB_ERRORS):
            await self.store.notify_wake()


def _tell(told: Callable[[bool | None], None], recorded: bool | None) -> None:
    try:
        told(recorded)
    except Exception:  # one submitter's failure never stops the others' results
        log.exception("completion_callback_failed")
