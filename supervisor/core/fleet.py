"""The fleet's shared upkeep in the database: fleet.sql, one method each (class Fleet), and
the wake-up payload both ends read (DESIGN.md, Fleet)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from supervisor.core.sql import Queries

if TYPE_CHECKING:
    from supervisor.core.store import Store

# The duties one host per tick does for the fleet. plan and notify have two seats each, so
# two hosts plan (their batches split by SKIP LOCKED) and deliver; the others have one.
DUTIES = (
    "plan:1",
    "plan:2",
    "reap",
    "catchup",
    "prune",
    "notify:1",
    "notify:2",
    "census",
)


def duty_kind(name: str) -> str:
    """ "plan:2" -> "plan": the service a duty gates."""
    return name.partition(":")[0]


@dataclass(frozen=True)
class Beat:
    """What one heartbeat learnt: this host's seats per type ((seat, size)), the duties it
    holds now, and how many duties nobody holds."""

    seats: dict[str, tuple[int, int]] = field(default_factory=dict)
    duties: tuple[str, ...] = ()
    free: int = 0


@dataclass(frozen=True)
class Wake:
    """A NOTIFY's payload: the rotation `turn` and the type ('' any; legacy '' all hosts)."""

    turn: int | None
    type: str

    @classmethod
    def parse(cls, payload: str) -> Wake:
        turn, _, type_ = payload.partition(" ")
        try:
            return cls(int(turn), type_)
        except ValueError:  # an older sender's empty payload: everyone
            return cls(None, "")


class Fleet(Queries):
    """Every fleet.sql block, one method each."""

    async def add_duties(self, names: Sequence[str]) -> None:
        await self._execute("add_duties", list(names))

    async def beat(
        self,
        worker_id: str,
        running: int,
        ttl: float,
        held: Sequence[str],
        beat_every: float,
        idle_every: float,
        give_up: str = "",
    ) -> Beat:
        """Beat; renew `held` but `give_up` (freed for a host holding none)."""
        keep = [d for d in held if d != give_up]
        row = await self._fetchrow(
            "beat", worker_id, running, ttl, keep, bool(held), beat_every, idle_every, give_up
        )
        assert row is not None
        seats = {
            t: (int(v[0]), int(v[1]))
            for t, v in (row["seats"] or {}).items()
            if isinstance(v, list) and len(v) == 2
        }
        return Beat(seats, tuple(row["duties"]), max(0, int(row["free"])))

    async def offer_types(self, worker_id: str, types: Sequence[str]) -> None:
        """The worker row's types after a reload."""
        await self._execute("offer_types", worker_id, list(types))

    async def take_census(self) -> int:
        """Workers whose seats changed."""
        return int((await self._execute("take_census")).split()[-1])


def fleet(store: Store) -> Fleet:
    """Fleet queries over the store's pool or connection."""
    return Fleet(store._ex, store._pool)
