"""The executor's faces, as the services that use it see them, and what it reports.

A leaf module: the claimer and the heartbeater depend on these Protocols, not on the
executor, and app.py hands them the executor itself. Metrics are recorded from
`AttemptEnded` values, never from log event names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from supervisor.core.model import RunStatus
from supervisor.core.records import Claim
from supervisor.core.runpath import Completion


class Slots(Protocol):
    """What the claimer needs: room (in all and per type), a way to start a claimed run, and
    what is held."""

    @property
    def free_slots(self) -> int: ...

    def room(self) -> Mapping[str, int]:
        """For each type whose handler has its own `concurrency`: how many more of its runs
        may start now. Types not listed are bounded by free_slots alone."""
        ...

    def start(self, row: Claim, claimed_at: float) -> None: ...

    def held(self) -> Collection[int]:
        """Ids of the runs this host holds a lease on (started, running or completing)."""
        ...


class Leases(Protocol):
    """What the heartbeater needs: the leases to renew, and where the answer goes."""

    def leases(self) -> list[tuple[int, int]]: ...

    def renewed(self, leases: list[tuple[int, int]], ok: set[int], sent_at: float) -> None: ...

    def in_flight(self) -> int: ...


@dataclass(frozen=True, slots=True)
class LiveOutput:
    """The output so far of a child that is still running (its attempt is fenced by token)."""

    run_id: int
    attempt: int
    lease_token: int
    received: int  # bytes received so far on both pipes: unchanged means nothing new
    stdout_tail: str
    stderr_tail: str


class Running(Protocol):
    """What the live tail writer needs: the output of the children running longer than
    `older_than` seconds, and whether any run is in flight."""

    def live_output(self, older_than: float) -> list[LiveOutput]: ...

    def in_flight(self) -> int: ...


class AttemptOutcome(StrEnum):
    """How an attempt this host ran ended, as its metrics count it: the attempt_outcome the
    database recorded (model.Outcome's values), or REJECTED_LATE (not recorded: the lease was
    gone)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    OOM_KILLED = "oom_killed"
    LEASE_LOST = "lease_lost"
    INTERRUPTED = "interrupted"  # given back at shutdown, not charged
    REJECTED_LATE = "rejected_late"


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """One attempt this host ran came to an end, as the database took it."""

    job_name: str
    type: str
    outcome: AttemptOutcome
    duration: float | None
    dead: bool = False  # the run is out of attempts (or failed permanently)


@dataclass(slots=True)
class Rider:
    """A finished run's result waiting in the completer: `told` learns True once it is
    recorded, False if it was late, None if it was given up at shutdown."""

    completion: Completion
    wakes_others: bool
    told: Callable[[bool | None], None]
    solo: bool = False  # a claim it rode on failed: it goes in a completion of its own

    @property
    def rides(self) -> bool:
        """A plain success: it may ride on a claim (one that frees a slot another host may
        take, or schedules a retry, goes alone, with the NOTIFY that follows it)."""
        return (
            self.completion.status is RunStatus.SUCCEEDED and not self.wakes_others
            and not self.solo
        )  # fmt: skip


class Riders(Protocol):
    """What the claimer needs of the completer: results that ride on its next claim (one
    statement claims and records; claim_and_complete_runs), and where they go after it."""

    def take_riders(self, within: float) -> list[Rider]:
        """The waiting results that may ride, out of the completer's queue; none while the
        completer would wait longer than `within` seconds (the claimer's gap between its
        claims) to send them: the next claim takes them with more company."""
        ...

    def rode(self, riders: list[Rider], recorded: set[int]) -> int:
        """The claim committed: tell each rider whether it was recorded; how many were."""
        ...

    def unseat(self, riders: list[Rider]) -> None:
        """The claim failed: back to the completer, each to be sent on its own."""
        ...
