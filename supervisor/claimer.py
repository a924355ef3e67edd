"""The claimer service: starts due runs of the types this host offers, up to its free slots.

It sleeps until the earliest due run it could take, a NOTIFY wake-up, or a freed slot; a
bounded fallback poll covers lost notifications. The catch-up pass (skip_missed_runs)
judges old unstarted runs once a second, before that claim; overlap's due runs it judges
then too, and after any claim whose snapshot held one (or that claimed nothing). The claim
itself never starts a run that the policy skips, whether or not a pass has reached it.

While a backlog of due runs waits, a freed slot waits until `refill_batch` slots are free
(app.py: all of them) or `refill_wait` seconds passed, and one claim refills them together:
a claim is a transaction of four round trips whose cost barely depends on how many runs it
takes, so claiming one run per finished child made the database the bottleneck for short
runs. A run that comes due while slots are free is claimed at once.

A handler's `concurrency` caps its type on this host: a type at its cap is left out of the
claim, and a type with less room than the free slots is claimed alone, up to its room, in
the same transaction before the others (which then take the remaining slots), so one claim
never starts more of a type than it may run.

While its claims of a type come back full, the next one reads on after the last run of that
type it claimed (a cursor), not from the start of the due range: behind an old snapshot (a
long report query) the index entries of runs claimed since cannot be cleaned up, and every
claim stepped over all of them. The cursors are dropped after a claim that is not full, on
a NOTIFY (a run that was passed over may have become claimable: its overlap or limit
cleared, a retry or a manual run was added) and at least every CURSOR_EVERY seconds, so a
run passed over for any other reason waits that long at most (DESIGN.md, Lease and fencing
protocol).

In a fleet (DESIGN.md, Fleet) a NOTIFY names a type and a turn: a host that does not offer
the type, or is not among the seats the turn wakes first, stays asleep. Only those first
seats keep a timer for the next due run; every host polls, less often the more hosts offer
its types, so that the fleet's polls of a type stay `poll_gap` apart whatever its size. A
claim that comes back full after one that did not (a backlog begins here) wakes the next
seats of its types, so a burst spreads over the fleet in a few claims' time.

Runs due within `claim_ahead` seconds are claimed with the ones due now, and the executor
starts each at its instant: a start waits on a local timer, not on a claim that has to
get through a busy database at that instant. Never early by the database's clock: the
wait counts from the reply, and started_at is the instant itself.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime

from supervisor.core.db import DB_ERRORS
from supervisor.core.errors import UniqueConflict
from supervisor.core.fleet import Wake
from supervisor.core.log import log_event
from supervisor.core.records import Claim, Skipped
from supervisor.core.store import Store
from supervisor.duties import Duties
from supervisor.faces import Rider, Riders, Slots
from supervisor.loop import Loop, Pass

# Old unstarted runs one catch-up pass judges; the next pass reads on from the last one.
CATCHUP_WINDOW = 1000
# The old runs are judged at most this often (the exclusive jobs' due runs on every pass,
# for overlap 'skip'): the claim applies the policy itself, so the pass only records the
# skips, and a kept backlog read on every claim cost a drain behind it about 10 %.
CATCHUP_OLD_EVERY = 1.0
# How long the claim cursors live at most: the longest a due run passed over by a full
# claim and made claimable without a NOTIFY (locked by another host's claim that then
# rolled back) waits.
CURSOR_EVERY = 1.0


@dataclass(frozen=True)
class ClaimPass(Pass):
    claimed: int = 0
    skipped: int = 0  # missed or overlapping runs recorded as skipped before claiming
    recovered: bool = False  # runs of a claim whose reply was lost were given back
    # Claimed runs that could not be started here (an error in start()): their leases
    # lapse and the reaper retries them elsewhere, spending an attempt, so a poison run ends.
    unstarted: int = 0
    rode: int = 0  # results recorded by the claim they rode on (claim_and_complete_runs)


class Claimer(Loop):
    name = "claimer"

    def __init__(
        self,
        store: Store,
        *,
        owner: str,
        types: list[str],
        slots: Slots,
        lease_ttl: float,
        misfire_grace: float,
        poll_interval: float,
        on_skipped: Callable[[list[Skipped]], None] | None = None,
        on_claim_latency: Callable[[float], None] | None = None,
        refill_batch: int = 1,
        refill_wait: float = 0.0,
        ahead: float = 0.0,
        duties: Duties | None = None,
        poll_gap: float = 0.04,
        listening: Callable[[], bool] | None = None,
        riders: Riders | None = None,
    ) -> None:
        super().__init__(poll_interval, jitter=0.1)
        self.poll_interval = poll_interval
        # What this host knows of the fleet (None: alone, as tests build it): its seats
        # decide which wake-ups are its and how often it polls; the catchup duty, whether
        # it judges old runs.
        self.duties = duties
        self.poll_gap = poll_gap
        # Whether a LISTEN connection is up now: without one, polls are all there is.
        self.listening = listening or (lambda: True)
        self.store = store
        # Finished runs' results that ride on the next claim (claim_and_complete_runs).
        self.riders = riders
        self.owner = owner
        self.types = types
        self.slots = slots
        self.lease_ttl = lease_ttl
        self.misfire_grace = misfire_grace
        self.on_skipped = on_skipped
        # The last claim failed in a way that may have committed (connection lost around
        # COMMIT): the database may hold leases of ours on runs we never started.
        self.uncertain = False
        self.on_claim_latency = on_claim_latency
        self.refill_batch = max(1, refill_batch)
        self.refill_wait = refill_wait
        self.ahead = ahead
        self._backlog = False  # the last claim filled every free slot: more may be due
        self.unstarted = 0  # claimed runs start() refused since start-up (a metric)
        self.ignored = 0  # wake-ups for other types or seats, not acted on
        self._refill_by: float | None = None
        # Where the next catch-up pass reads on among old unstarted runs (None: the oldest),
        # and when (monotonic) it reads them again.
        self._catchup_from: tuple[datetime, int] | None = None
        self._catchup_old_at = 0.0
        # Per type: the (run_after, id) the next claim reads on after, and when (monotonic)
        # they are all dropped.
        self._cursors: dict[str, tuple[datetime, int]] = {}
        self._cursors_until = 0.0

    def slot_freed(self) -> None:
        """A child ended (Executor.on_slot_free). While a backlog waits for `refill_batch`
        free slots, only the freed slot that starts the `refill_wait` timer and the one that
        completes the batch wake the claimer: a wake-up for each slot in between found it
        waiting still, and cost a pass of this loop each."""
        if self._refill_by is not None and self.slots.free_slots < self.refill_batch:
            return
        self.wake()

    def notified(self, payload: str | None = None) -> None:
        """A NOTIFY (None: the LISTEN connection was (re)made, some may be lost): runs
        may be claimable behind the cursors. Claim from the start, now, unless the wake-up
        is for another type or other seats."""
        duties = self.duties
        if payload is not None and duties and not duties.wakes(Wake.parse(payload), self.types):
            self.ignored += 1
            return
        self._cursors.clear()
        self.wake()

    def _catchup(self) -> bool:
        return self.duties is None or self.duties.holds("catchup")

    def poll_every(self) -> float:
        """Seconds between this host's polls (DESIGN.md, Fleet)."""
        floor = self.poll_interval if self.listening() else self.poll_gap
        if self.duties is None:
            return floor
        return self.duties.poll_every(self.types, floor, self.poll_gap, self.poll_interval)

    def _next_poll(self) -> float:
        """Seconds to this host's next idle poll: at its phase of the period on the wall
        clock, so the fleet's polls fall `poll_gap` apart instead of bunching where hosts
        started together (hosts' clocks agree to NTP's milliseconds; a skew only moves a
        phase). Unseated: the period with the loop's jitter."""
        period = self.interval
        phase = self.duties.phase(self.types) if self.duties else None
        if phase is None:
            return period * random.uniform(1 - self.jitter, 1 + self.jitter)
        return period - (time.time() - phase * period) % period

    async def _fan_out(self, rows: list[Claim]) -> None:
        """A backlog begins: wake the next seats of the crowded types among `rows`."""
        crowded = self.duties.crowded({r.type for r in rows}) if self.duties else []
        if not crowded:
            return
        try:
            await self.store.notify_wake(sorted(crowded))
        except DB_ERRORS as exc:  # their polls find the backlog
            self.db_error(exc)

    async def run_once(self) -> ClaimPass:
        self.interval = self.poll_every()
        if not self.types:  # a host without handlers may still hold the catchup duty
            if self._catchup():
                judged = await self._judge_old(self.store, time.monotonic())
                self._skipped(judged)
                return ClaimPass(CATCHUP_OLD_EVERY, skipped=len(judged))
            return ClaimPass()
        free = self.slots.free_slots
        if free <= 0:
            return ClaimPass(self.interval)  # a finishing run wakes us
        if self._backlog and free < self.refill_batch:
            now = time.monotonic()
            if self._refill_by is None:
                self._refill_by = now + self.refill_wait
            if now < self._refill_by:
                return ClaimPass(self._refill_by - now)  # a finishing run wakes us sooner
        self._refill_by = None
        batches = self._batches(free)
        if not batches:
            return ClaimPass(self.interval)  # every type at its cap: a finishing run wakes us
        sent_at = time.monotonic()
        # Every run we start is in `held` from start() on, and this loop is the only claimer
        # here, so any other run leased to us comes from a claim whose reply we never saw.
        held_ids = list(self.slots.held()) if self.uncertain else None
        held = held_ids
        # One statement per claim pass commits on its own (two round trips, not four);
        # several (types at their caps) must succeed or fail together.
        many = len(batches) > 1
        skipped: list[Skipped] = []
        if held is not None or sent_at >= self._cursors_until:
            self._cursors.clear()
        claims: list[tuple[list[str], int, list[Claim]]] = []
        # Not after an uncertain claim: its recovery gives back what it does not hold.
        riders = self.riders.take_riders() if self.riders and held is None else []
        recorded: set[int] | None = None
        try:
            async with self.store.transaction() if many else nullcontext(self.store) as tx:
                old = sent_at >= self._catchup_old_at and self._catchup()
                if old:  # the old unstarted runs (and overlap's), once a second
                    skipped = await self._judge_old(tx, sent_at)
                rows: list[Claim] = []
                for types, most in batches:
                    if (n := min(most, free - len(rows))) > 0:
                        if riders and recorded is None:  # they ride on the first statement
                            got, recorded = await tx.claim_and_complete_runs(
                                [r.completion for r in riders], types, n, self.owner,
                                self.lease_ttl, self.ahead, self.misfire_grace, self._cursors,
                            )  # fmt: skip
                        else:
                            got = await tx.claim_runs(
                                types, n, self.owner, self.lease_ttl, held, self.ahead,
                                self.misfire_grace, self._cursors,
                            )  # fmt: skip
                        held = None  # the recovery runs once, in the first statement
                        claims.append((types, n, got))
                        rows += got
        except UniqueConflict:
            # Another host started a run of the same exclusive job at the same moment.
            self._unseat(riders)  # rolled back with it: each goes on its own now
            self._cursors.clear()
            self._skipped(skipped if not many else [])  # committed on its own
            return ClaimPass(0.01)
        except DB_ERRORS:
            self._unseat(riders)  # recorded or not: the completer's retry finds out
            self._cursors.clear()
            self._skipped(skipped if not many else [])
            self.uncertain = True
            self._backlog = False
            raise
        except BaseException:
            self._unseat(riders)  # a value the database refused, or cancelled: on their own
            raise
        for types, n, got in claims:
            self._move_cursors(types, n, got, sent_at)
        recovered = held_ids is not None
        rode = 0
        if len(rows) == free and not self._backlog:
            rode = self._rode(riders, recorded)  # no await before they are told
            riders = []
            await self._fan_out(rows)
        self._backlog = len(rows) == free
        self.uncertain = False
        if self.on_claim_latency:
            self.on_claim_latency(time.monotonic() - sent_at)
        self._skipped(skipped)
        unstarted = 0
        claimed_lines = self.log.isEnabledFor(logging.DEBUG)
        for row in rows:
            if claimed_lines:  # debug: run_started follows at once with the same fields
                delay = (row.started_at - row.scheduled_at).total_seconds()
                log_event(
                    self.log,
                    "run_claimed",
                    level=logging.DEBUG,
                    run_id=row.id,
                    job_name=row.job_name,
                    attempt=row.attempts,
                    worker_id=self.owner,
                    scheduled_at=row.scheduled_at.isoformat(),
                    queue_delay=round(delay, 3),
                )
            try:
                self.slots.start(row, sent_at)
            except Exception as exc:  # one run that cannot start never stops the others
                unstarted += 1
                self.unstarted += 1
                log_event(
                    self.log,
                    "run_start_failed",
                    level=logging.ERROR,
                    run_id=row.id,
                    job_name=row.job_name,
                    error=repr(exc),
                )
        rode += self._rode(riders, recorded)  # after the starts: no child waits for them
        if not old and ((not rows and self._catchup()) or any(r.overlap_due for r in rows)):
            skipped += await self._skip_overlaps()
        done = ClaimPass(
            claimed=len(rows), skipped=len(skipped), recovered=recovered, unstarted=unstarted,
            rode=rode,
        )  # fmt: skip
        if recovered:
            log_event(self.log, "claim_recovered", held=len(held_ids or ()))
            return replace(done, next_in=0.0)  # runs given back just now are due: claim again
        if any(r.held_back for r in rows) and self.slots.free_slots > 0:
            # Runs that a concurrency limit held back took places in this claim's window;
            # with the limit now reached they stay out of it, so other due runs get in.
            return replace(done, next_in=0.0)
        if len(rows) == free:
            return replace(done, next_in=0.0 if self.slots.free_slots > 0 else self.interval)
        room = self.slots.room()
        open_types = [t for t in self.types if room.get(t, 1) > 0]  # a type at its cap waits
        if not open_types:
            return replace(done, next_in=self.interval)
        if self.duties is not None and not self.duties.leads(open_types):
            return replace(done, next_in=self._next_poll())  # the first seats keep the timer
        # A run can enter the window between the claim's snapshot and this statement's (the
        # claim came up empty a few ms too soon): look back to when the claim was sent.
        since = time.monotonic() - sent_at
        due_in = await self.store.next_due_in(open_types, self.ahead, since)
        if due_in is None:
            return replace(done, next_in=self._next_poll())
        return replace(done, next_in=max(0.0, min(due_in, self.interval)))

    def _unseat(self, riders: list[Rider]) -> None:
        if riders and self.riders:
            self.riders.unseat(riders)

    def _rode(self, riders: list[Rider], recorded: set[int] | None) -> int:
        """Tell the riders of a committed claim; how many were recorded."""
        if not riders or not self.riders:
            return 0
        if recorded is None:  # no statement was sent (cannot happen: free > 0)
            self.riders.unseat(riders)
            return 0
        self.riders.rode(riders, recorded)
        return sum(r.completion.run_id in recorded for r in riders)

    def _move_cursors(self, types: list[str], n: int, got: list[Claim], now: float) -> None:
        """After a committed claim of `n` runs of `types`: full, each type's cursor moves to
        the last run of it claimed; short, the next claim of these types reads from the
        start (what it passed over is not known, and it is cheap then)."""
        if len(got) < n:
            for t in types:
                self._cursors.pop(t, None)
            return
        if not self._cursors:
            self._cursors_until = now + CURSOR_EVERY
        for row in got:
            at = (row.run_after, row.id)
            if (old := self._cursors.get(row.type)) is None or at > old:
                self._cursors[row.type] = at

    async def _judge_old(self, tx: Store, now: float) -> list[Skipped]:
        """The catch-up pass over old unstarted runs, reading on from the last one."""
        catchup = await tx.skip_missed_runs(self.misfire_grace, CATCHUP_WINDOW, self._catchup_from)
        self._catchup_from = catchup.resume_after
        self._catchup_old_at = now + CATCHUP_OLD_EVERY
        return catchup.skipped

    async def _skip_overlaps(self) -> list[Skipped]:
        """Overlap 'skip': record the due runs of exclusive jobs that waited for a running
        one. After the claim, which never starts them: only when its snapshot held such a
        run (or it claimed nothing), so a drain without exclusive jobs spends no statement
        on it (measured: 6 % of throughput with one before every claim)."""
        try:
            skipped = (
                await self.store.skip_missed_runs(self.misfire_grace, CATCHUP_WINDOW, old=False)
            ).skipped
        except DB_ERRORS as exc:  # the next claim tries again; its runs are started already
            self.db_error(exc)
            return []
        self._skipped(skipped)
        return skipped

    def _skipped(self, skipped: list[Skipped]) -> None:
        for r in skipped:
            log_event(self.log, "run_skipped", run_id=r.id, job_id=r.job_id, reason=r.reason)
        if skipped and self.on_skipped:
            self.on_skipped(skipped)

    def _batches(self, free: int) -> list[tuple[list[str], int]]:
        """The claim statements for `free` slots: (types, at most this many runs). Types
        with less room than that, one by one first; then the rest together."""
        room = self.slots.room()
        capped = [([t], room[t]) for t in self.types if 0 < room.get(t, free) < free]
        rest = [t for t in self.types if room.get(t, free) >= free]
        return capped + ([(rest, free)] if rest else [])
