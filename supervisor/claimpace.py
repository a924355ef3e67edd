"""The claimer's pacing, apart from its statements: when a freed slot waits for company
(`Refill`), where the next claim of a type reads on (`Cursors`), and when the catch-up pass
reads the old unstarted runs again (`CatchUpPace`). Plain state on the monotonic clock: no
database, no loop.

While a backlog of due runs waits, a freed slot waits until `refill_batch` slots are free
(app.py: all of them) or `refill_wait` seconds passed, and one claim refills them together:
a claim is a transaction of four round trips whose cost barely depends on how many runs it
takes, so claiming one run per finished child made the database the bottleneck for short
runs. A run that comes due while slots are free is claimed at once.

While its claims of a type come back full, the next one reads on after the last run of that
type it claimed (a cursor), not from the start of the due range: behind an old snapshot (a
long report query) the index entries of runs claimed since cannot be cleaned up, and every
claim stepped over all of them. The cursors are dropped after a claim that is not full, on
a NOTIFY (a run that was passed over may have become claimable: its overlap or limit
cleared, a retry or a manual run was added) and at least every CURSOR_EVERY seconds, so a
run passed over for any other reason waits that long at most (DESIGN.md, Lease and fencing
protocol)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

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


class Placed(Protocol):
    """A claimed run's place in its type's claim order (records.Claim)."""

    @property
    def id(self) -> int: ...

    @property
    def type(self) -> str: ...

    @property
    def run_after(self) -> datetime: ...


class Refill:
    """While a backlog waits, a freed slot waits until `batch` slots are free or `wait`
    seconds passed, so that one claim refills them together."""

    def __init__(self, batch: int, wait: float) -> None:
        self.batch = max(1, batch)
        self.wait = wait
        self.backlog = False  # the last claim filled every free slot: more may be due
        self._by: float | None = None  # when the slots free so far are claimed anyway

    def wakes(self, free: int) -> bool:
        """Whether a slot freed now (`free` in all) wakes the claimer: while slots wait for
        company, only the one that completes the batch does (the first started the timer)."""
        return self._by is None or free >= self.batch

    def hold(self, free: int, now: float) -> float | None:
        """Seconds to wait for more free slots before claiming (None: claim now)."""
        if self.backlog and free < self.batch:
            if self._by is None:
                self._by = now + self.wait
            if now < self._by:
                return self._by - now
        self._by = None
        return None

    def claimed(self, n: int, free: int) -> bool:
        """A claim of `n` runs into `free` slots committed; whether a backlog begins (full
        now, after a claim that was not)."""
        begins = n == free and not self.backlog
        self.backlog = n == free
        return begins


class Cursors:
    """Per type, the (run_after, id) the next claim reads on after, while claims of the
    type come back full; all dropped at least every CURSOR_EVERY seconds."""

    def __init__(self) -> None:
        self.at: dict[str, tuple[datetime, int]] = {}
        self._until = 0.0

    def clear(self) -> None:
        self.at.clear()

    def for_claim(self, now: float, fresh: bool = False) -> dict[str, tuple[datetime, int]]:
        """The cursors a claim sent now reads on after (none if `fresh` or expired)."""
        if fresh or now >= self._until:
            self.at.clear()
        return self.at

    def moved(self, types: Sequence[str], n: int, got: Sequence[Placed], now: float) -> None:
        """After a committed claim of `n` runs of `types`: full, each type's cursor moves to
        the last run of it claimed; short, the next claim of these types reads from the
        start (what it passed over is not known, and it is cheap then)."""
        if len(got) < n:
            for t in types:
                self.at.pop(t, None)
            return
        if not self.at:
            self._until = now + CURSOR_EVERY
        for row in got:
            at = (row.run_after, row.id)
            if (old := self.at.get(row.type)) is None or at > old:
                self.at[row.type] = at


class CatchUpPace:
    """Where the catch-up pass reads on among old unstarted runs (None: the oldest), and
    when it reads them again."""

    def __init__(self) -> None:
        self.after: tuple[datetime, int] | None = None
        self._next_at = 0.0

    def due(self, now: float) -> bool:
        return now >= self._next_at

    def judged(self, resume_after: tuple[datetime, int] | None, now: float) -> None:
        self.after = resume_after
        self._next_at = now + CATCHUP_OLD_EVERY
