"""The claimer service: starts due runs of the types this host offers, up to its free slots.

It sleeps until the earliest due run it could take, a NOTIFY wake-up, or a freed slot; a
bounded fallback poll covers lost notifications. The catch-up pass (skip_missed_runs)
judges old unstarted runs once a second, before that claim; overlap's due runs it judges
then too, and after any claim whose snapshot held one (or that claimed nothing). The claim
itself never starts a run that the policy skips, whether or not a pass has reached it.
How a claim waits for free slots and reads on after the last: claimpace.py.

A handler's `concurrency` caps its type on this host: a type at its cap is left out of the
claim, and a type with less room than the free slots is claimed alone, up to its room, in
the same transaction before the others (which then take the remaining slots), so one claim
never starts more of a type than it may run.

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
import math
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

from supervisor.claimpace import CATCHUP_OLD_EVERY, CATCHUP_WINDOW, CatchUpPace, Cursors, Refill
from supervisor.core.db import DB_ERRORS
from supervisor.core.errors import UniqueConflict
from supervisor.core.fleet import Wake
from supervisor.core.log import log_event
from supervisor.core.records import Claim, Skipped
from supervisor.core.store import Store
from supervisor.duties import Duties
from supervisor.faces import Rider, Riders, Slots
from supervisor.loop import Loop, Pass


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
        self._last_sent = -math.inf  # when the last claim was sent (monotonic)
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
        self.refill = Refill(refill_batch, refill_wait)
        self.ahead = ahead
        self.unstarted = 0  # claimed runs start() refused since start-up (a metric)
        self.ignored = 0  # wake-ups for other types or seats, not acted on
        self.catchup_pace = CatchUpPace()
        self.cursors = Cursors()

    def slot_freed(self) -> None:
        """A child ended (Executor.on_slot_free). While a backlog waits for `refill_batch`
        free slots, only the freed slot that starts the `refill_wait` timer and the one that
        completes the batch wake the claimer: a wake-up for each slot in between found it
        waiting still, and cost a pass of this loop each."""
        if self.refill.wakes(self.slots.free_slots):
            self.wake()

    def notified(self, payload: str | None = None) -> None:
        """A NOTIFY (None: the LISTEN connection was (re)made, some may be lost): runs
        may be claimable behind the cursors. Claim from the start, now, unless the wake-up
        is for another type or other seats."""
        duties = self.duties
        if payload is not None and duties and not duties.wakes(Wake.parse(payload), self.types):
            self.ignored += 1
            return
        self.cursors.clear()
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
            return await self._catchup_alone()
        free = self.slots.free_slots
        if free <= 0:
            return ClaimPass(self.interval)  # a finishing run wakes us
        if (wait := self.refill.hold(free, time.monotonic())) is not None:
            return ClaimPass(wait)  # a finishing run wakes us sooner
        batches = self._batches(free)
        if not batches:
            return ClaimPass(self.interval)  # every type at its cap: a finishing run wakes us
        sent_at = time.monotonic()
        claimed = await self._claim(batches, free, sent_at)
        if claimed is None:
            return ClaimPass(0.01)  # an exclusive job's run taken elsewhere: claim again
        rows = claimed.rows
        if self.refill.claimed(len(rows), free):
            claimed.tell_riders()  # no await before they are told
            await self._fan_out(rows)
        if self.on_claim_latency:
            self.on_claim_latency(time.monotonic() - sent_at)
        self._skipped(claimed.skipped)
        unstarted = self._start(rows, sent_at)
        rode = claimed.tell_riders()  # after the starts: no child waits for them
        skipped = claimed.skipped
        if not claimed.old and ((not rows and self._catchup()) or any(r.overlap_due for r in rows)):
            skipped = [*skipped, *await self._skip_overlaps()]
        done = ClaimPass(
            claimed=len(rows), skipped=len(skipped), recovered=claimed.recovered,
            unstarted=unstarted, rode=rode,
        )  # fmt: skip
        return replace(done, next_in=await self._next_in(claimed, free, sent_at))

    async def _claim(
        self, batches: list[tuple[list[str], int]], free: int, sent_at: float
    ) -> _Claimed | None:
        """The claim statements of one pass (with the old runs' catch-up pass once a second
        and the riders on the first); None when another host took an exclusive job's run
        at the same moment (rolled back). A database error propagates: the claim's outcome
        is not known, so the next one recovers (`uncertain`)."""
        # Every run we start is in `held` from start() on, and this loop is the only claimer
        # here, so any other run leased to us comes from a claim whose reply we never saw.
        held = list(self.slots.held()) if self.uncertain else None
        # Riders take the last claim before the completer's batch would leave (the next
        # claim is expected as long after this one as this one came after the last), and
        # never an uncertain claim: its recovery gives back what it does not hold.
        gap = sent_at - self._last_sent
        self._last_sent = sent_at
        riders = self.riders.take_riders(gap) if self.riders and held is None else []
        out = _Claimed(self.riders, riders, recovered=held is not None, held=len(held or ()))
        cursors = self.cursors.for_claim(sent_at, fresh=held is not None)
        # One statement per claim pass commits on its own (two round trips, not four);
        # several (types at their caps) must succeed or fail together.
        many = len(batches) > 1
        try:
            async with self.store.transaction() if many else nullcontext(self.store) as tx:
                if self.catchup_pace.due(sent_at) and self._catchup():
                    out.old = True  # the old unstarted runs (and overlap's), once a second
                    out.skipped = await self._judge_old(tx, sent_at)
                for types, most in batches:
                    if (n := min(most, free - len(out.rows))) <= 0:
                        continue
                    if out.riders and out.recorded is None:  # they ride on the first
                        got, out.recorded = await tx.claim_and_complete_runs(
                            [r.completion for r in out.riders], types, n, self.owner,
                            self.lease_ttl, self.ahead, self.misfire_grace, cursors,
                        )  # fmt: skip
                    else:
                        got = await tx.claim_runs(
                            types, n, self.owner, self.lease_ttl, held, self.ahead,
                            self.misfire_grace, cursors,
                        )  # fmt: skip
                    held = None  # the recovery runs once, in the first statement
                    out.claims.append((types, n, got))
                    out.rows += got
        except UniqueConflict:
            out.unseat()  # rolled back with it: each goes on its own now
            self.cursors.clear()
            self._skipped(out.skipped if not many else [])  # committed on its own
            return None
        except DB_ERRORS:
            out.unseat()  # recorded or not: the completer's retry finds out
            self.cursors.clear()
            self._skipped(out.skipped if not many else [])
            self.uncertain = True
            self.refill.backlog = False
            raise
        except BaseException:
            out.unseat()  # a value the database refused, or cancelled: on their own
            raise
        self.uncertain = False
        for types, n, got in out.claims:
            self.cursors.moved(types, n, got, sent_at)
        if out.recovered:
            log_event(self.log, "claim_recovered", held=out.held)
        return out

    def _start(self, rows: list[Claim], sent_at: float) -> int:
        """Hand the claimed runs to the executor; how many it could not start."""
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
        return unstarted

    async def _next_in(self, claimed: _Claimed, free: int, sent_at: float) -> float:
        """Seconds to the next pass after a claim."""
        rows = claimed.rows
        if claimed.recovered:
            return 0.0  # runs given back just now are due: claim again
        if any(r.held_back for r in rows) and self.slots.free_slots > 0:
            # Runs that a concurrency limit held back took places in this claim's window;
            # with the limit now reached they stay out of it, so other due runs get in.
            return 0.0
        if len(rows) == free:
            return 0.0 if self.slots.free_slots > 0 else self.interval
        room = self.slots.room()
        open_types = [t for t in self.types if room.get(t, 1) > 0]  # a type at its cap waits
        if not open_types:
            return self.interval
        if self.duties is not None and not self.duties.leads(open_types):
            return self._next_poll()  # the first seats keep the timer
        # A run can enter the window between the claim's snapshot and this statement's (the
        # claim came up empty a few ms too soon): look back to when the claim was sent.
        since = time.monotonic() - sent_at
        due_in = await self.store.next_due_in(open_types, self.ahead, since)
        if due_in is None:
            return self._next_poll()
        return max(0.0, min(due_in, self.interval))

    async def _catchup_alone(self) -> ClaimPass:
        if not self._catchup():
            return ClaimPass()
        judged = await self._judge_old(self.store, time.monotonic())
        self._skipped(judged)
        return ClaimPass(CATCHUP_OLD_EVERY, skipped=len(judged))

    async def _judge_old(self, tx: Store, now: float) -> list[Skipped]:
        """The catch-up pass over old unstarted runs, reading on from the last one."""
        pace = self.catchup_pace
        catchup = await tx.skip_missed_runs(self.misfire_grace, CATCHUP_WINDOW, pace.after)
        pace.judged(catchup.resume_after, now)
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


@dataclass
class _Claimed:
    """What one pass's claim statements did, and the riders that went with them."""

    _to: Riders | None
    riders: list[Rider]
    recovered: bool = False  # the first statement gave back runs a lost reply left leased
    held: int = 0  # the runs held here then
    old: bool = False  # the catch-up pass over old runs ran first
    skipped: list[Skipped] = field(default_factory=list)
    claims: list[tuple[list[str], int, list[Claim]]] = field(default_factory=list)
    rows: list[Claim] = field(default_factory=list)
    recorded: set[int] | None = None  # the riders' ids recorded, once a statement ran

    def unseat(self) -> None:
        """The claim failed: the riders go back to the completer, each on its own."""
        if self.riders and self._to:
            self._to.unseat(self.riders)
        self.riders = []

    def tell_riders(self) -> int:
        """After the commit: tell the riders (once); how many were recorded."""
        riders, self.riders = self.riders, []
        if not riders or not self._to:
            return 0
        if self.recorded is None:  # no statement was sent (cannot happen: free > 0)
            self._to.unseat(riders)
            return 0
        return self._to.rode(riders, self.recorded)
