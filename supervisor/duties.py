"""What this host knows of the fleet from its heartbeats: the duties it holds (and until
when, on its monotonic clock), and its seats per type, which decide whom a wake-up reaches
first and how often this host polls (DESIGN.md, Fleet).

A duty counts as held until one TTL after the heartbeat that renewed it was sent: the
database keeps it ours at least that long. A host that cannot beat stops its duties by
then, and another host takes them when their lease ends there. Duties are idempotent, so
two hosts doing one for a moment (a slow beat) costs a statement, never a result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from supervisor.core.fleet import DUTIES, Beat, Wake, duty_kind

# A wake-up reaches these seats of a type first (rotated by the NOTIFY's turn); the other
# hosts offering it find the work on their next poll, or are woken by the claims of those
# that came back full (Claimer: fan-out).
WAKE_FIRST = 3


class Duties:
    """The duties this host holds and its seats; gates and wakes the services."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._until: dict[str, float] = {}
        self.seats: dict[str, tuple[int, int]] = {}
        self.free = 0
        self._wakers: dict[str, list[Callable[[], None]]] = {}

    def holds(self, kind: str) -> bool:
        """Whether this host may do `kind` now ("plan", "reap", ...)."""
        now = time.monotonic()
        return any(duty_kind(n) == kind and t > now for n, t in self._until.items())

    def gate(self, kind: str) -> Callable[[], bool]:
        return lambda: self.holds(kind)

    def held(self) -> list[str]:
        now = time.monotonic()
        return [n for n, t in self._until.items() if t > now]

    def on_gained(self, kind: str, wake: Callable[[], None]) -> None:
        """Call `wake` when this host takes a duty of `kind` it did not hold."""
        self._wakers.setdefault(kind, []).append(wake)

    def beaten(self, beat: Beat, sent_at: float) -> None:
        """A heartbeat's answer, for a beat sent at `sent_at` (monotonic)."""
        before = {duty_kind(n) for n in self.held()}
        until = sent_at + self.ttl
        self._until = {n: until for n in beat.duties if n in DUTIES}
        self.free = beat.free
        for kind in {duty_kind(n) for n in beat.duties} - before:
            for wake in self._wakers.get(kind, ()):
                wake()
        self.seats = dict(beat.seats)

    def surplus(self) -> str:
        """A duty to give up ('' none): while this host holds several and the fleet has a
        host for each duty, one per beat, so duties taken by the first hosts to start
        spread out (a host holding none takes it at its next beat)."""
        held = sorted(self.held())
        return held[-1] if len(held) > 1 and self.fleet_size() >= len(DUTIES) else ""

    # ------------------------------------------------------------ seats

    def wakes(self, wake: Wake, types: Iterable[str]) -> bool:
        """Whether a NOTIFY with this payload is for this host: a type it offers, and among
        the seats woken first (a host the census has not seated yet always is)."""
        offered = set(types)
        if wake.turn is None:
            return bool(offered)
        if wake.type:
            if wake.type not in offered:
                return False
            offered = {wake.type}
        return any(self._first(t, wake.turn) for t in offered)

    def _first(self, type_: str, turn: int) -> bool:
        if type_ not in self.seats:
            return True
        seat, size = self.seats[type_]
        return size <= 0 or (seat - turn) % size < WAKE_FIRST

    def leads(self, types: Iterable[str]) -> bool:
        """Whether this host keeps the timer for the next due run of one of `types` (the
        first seats do; the rest poll): at an instant a handful of claims, not the fleet."""
        return any(t not in self.seats or self.seats[t][0] < WAKE_FIRST for t in types)

    def crowded(self, types: Iterable[str]) -> list[str]:
        """Of `types`, those offered by more hosts than one wake-up reaches."""
        return [t for t in types if t in self.seats and self.seats[t][1] > WAKE_FIRST]

    def fleet_size(self) -> int:
        """Hosts beside this one, as far as its seats tell (the largest type's count)."""
        return max((size for _, size in self.seats.values()), default=1)

    def poll_every(
        self, types: Iterable[str], floor: float, gap: float, unseated: float | None = None
    ) -> float:
        """Seconds between this host's polls: `floor`, or longer so that the hosts offering
        the least-served of `types` poll it every `gap` seconds between them; before the
        census has seated it, `unseated` (a fleet starting together polls at that pace for
        its first seconds, not at the floor)."""
        sizes = [self.seats[t][1] for t in types if t in self.seats]
        if not sizes:
            return max(floor, unseated or floor)
        return max(floor, gap * min(sizes))

    def phase(self, types: Iterable[str]) -> float | None:
        """Where in each poll period this host polls, as a fraction: its seat among the
        hosts of its least-offered type, so their polls fall evenly apart (None: unseated)."""
        seated = [self.seats[t] for t in types if t in self.seats and self.seats[t][1] > 0]
        if not seated:
            return None
        seat, size = min(seated, key=lambda s: s[1])
        return seat / size
