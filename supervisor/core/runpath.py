"""The statements of a run's path on a host: the catch-up pass, the claim (with the results
that ride on it), renewals, completions, release at shutdown and the reaper's; and
Completion, the result a host records. Store inherits them (store.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from operator import attrgetter
from typing import Any, cast

from supervisor.core.model import Outcome, RunStatus
from supervisor.core.records import CatchUp, Claim, Reaped
from supervisor.core.sql import Queries


class RunPath(Queries):
    """Claim, renew, complete, release, reap: one method per `-- name:` block."""

    # ------------------------------------------------------------ catch-up

    async def skip_missed_runs(
        self,
        misfire_grace: float,
        limit: int,
        after: tuple[datetime, int] | None = None,
        *,
        old: bool = True,
    ) -> CatchUp:
        """Judge at most `limit` old unstarted runs (none without `old`), from after `after`
        (a previous pass's resume_after), and at most `limit` due runs of exclusive jobs
        that run now; record the skipped."""
        at, run_id = after if after is not None else (None, None)
        window = limit if old else 0
        rows = await self._fetch("skip_missed_runs", misfire_grace, window, at, run_id, limit)
        return CatchUp.from_rows(rows)

    # ------------------------------------------------------------ claiming and leases

    async def claim_runs(
        self,
        types: Sequence[str],
        limit: int,
        owner: str,
        lease_ttl: float,
        held: Sequence[int] | None = None,
        ahead: float = 0.0,
        misfire_grace: float = 60.0,
        after: Mapping[str, tuple[datetime, int]] | None = None,
    ) -> list[Claim]:
        """Claim runs due now or within `ahead` seconds (each Claim says when it starts).
        `held` (the runs this host is running) is given only after a claim whose outcome
        is unknown: runs leased to `owner` but not held go back. A run missed by more than
        `misfire_grace` that its catch-up policy skips is left for skip_missed_runs.
        `after`: per type, read on after this (run_after, id) instead of from the start."""
        args = _claim_args(types, limit, owner, lease_ttl, held, ahead, misfire_grace, after)
        return [Claim.from_row(r) for r in await self._fetch("claim_runs", *args)]

    async def claim_and_complete_runs(
        self,
        results: Sequence[Completion],
        types: Sequence[str],
        limit: int,
        owner: str,
        lease_ttl: float,
        ahead: float = 0.0,
        misfire_grace: float = 60.0,
        after: Mapping[str, tuple[datetime, int]] | None = None,
    ) -> tuple[list[Claim], set[int]]:
        """claim_runs and complete_runs of `results` (successes only) in one statement:
        the claimed runs, and the ids recorded (a missing id is a late result)."""
        if any(c.status is not RunStatus.SUCCEEDED for c in results):
            raise ValueError("claim_and_complete_runs records successes only")
        args = _claim_args(types, limit, owner, lease_ttl, None, ahead, misfire_grace, after)
        rows = await self._fetch(
            "claim_and_complete_runs", *args, *completion_columns(results), owner
        )
        recorded = set(rows[0]["recorded"]) if rows else set()
        return [Claim.from_row(r) for r in rows if r["id"] is not None], recorded

    async def next_due_in(
        self, types: Sequence[str], ahead: float = 0.0, since: float = 0.0
    ) -> float | None:
        """Seconds until the next run of these types is claimable with `ahead`, counting the
        runs that came within the window in the last `since` seconds (after a claim sent
        that long ago could see them) as due now (≤ 0)."""
        return cast(float | None, await self._fetchval("next_due_in", list(types), ahead, since))

    async def write_live_tails(self, rows: Sequence[tuple[int, int, int, str, str]]) -> None:
        """(run_id, attempt, lease_token, stdout, stderr) of running attempts, by run id."""
        cols = zip(*sorted(rows), strict=True)
        await self._execute("write_live_tails", *(list(c) for c in cols))

    async def renew_leases(
        self, leases: Sequence[tuple[int, int]], owner: str, lease_ttl: float
    ) -> set[int]:
        if not leases:
            return set()
        ids, tokens = zip(*sorted(leases), strict=True)  # one lock order: see complete_runs
        rows = await self._fetch("renew_leases", list(ids), list(tokens), lease_ttl, owner)
        return {r["id"] for r in rows}

    async def complete_runs(self, results: Sequence[Completion], owner: str) -> set[int]:
        """Record results; returns the ids recorded. A missing id is a late result.

        Every multi-row write of runs (renew, complete, release) sends its rows sorted by id,
        so that whatever join order a plan picks, concurrent ones lock in one order (the
        failover test once saw a heartbeat deadlock; a deadlock is retried, db.DB_ERRORS).
        """
        if not results:
            return set()
        cols = completion_columns(results)
        if any(c.status is not RunStatus.SUCCEEDED for c in results):
            return await self.complete_runs_with_events(cols, owner)
        # Successes only: the lighter statement (only job_recovered can follow; measured:
        # each data-modifying CTE costs its set-up on every call, rows or not).
        return {r["id"] for r in await self._fetch("complete_runs", *cols, owner)}

    async def warm_hot_statements(self) -> None:
        """The claim, the catch-up pass and the completions (a claim's riders too) with
        nothing to claim, skip or record: on a new connection, their generic plans (3-5 ms
        of the server's CPU each) are made here instead of on the first claim or pass that
        uses the connection."""
        await self.claim_runs([], 0, "", 1.0)  # no type offered, no run claimed
        await self.skip_missed_runs(60.0, 0, old=False)  # judges at most 0 runs
        await self.complete_runs_with_events(completion_columns([]), "")
        # complete_runs sends nothing for no results: one for a run that cannot exist (ids
        # start at 1) matches no row.
        nothing = [Completion(0, 0, RunStatus.SUCCEEDED, 0.0, Outcome.SUCCEEDED)]
        await self.complete_runs(nothing, "")
        await self.claim_and_complete_runs(nothing, [], 0, "", 1.0)

    async def complete_runs_with_events(self, cols: list[list[Any]], owner: str) -> set[int]:
        """complete_runs for a batch with failed or dead results: also their notifications."""
        return {r["id"] for r in await self._fetch("complete_runs_with_events", *cols, owner)}

    async def release_runs(self, leases: Sequence[tuple[int, int]], owner: str) -> set[int]:
        if not leases:
            return set()
        ids, tokens = zip(*sorted(leases), strict=True)  # one lock order: see complete_runs
        rows = await self._fetch("release_runs", list(ids), list(tokens), owner)
        return {r["id"] for r in rows}

    async def reap_expired(self, limit: int) -> list[Reaped]:
        return [Reaped.from_row(r) for r in await self._fetch("reap_expired", limit)]


@dataclass(frozen=True, slots=True)
class Completion:
    """One finished attempt, fenced by (run_id, lease_token): columns of complete_runs."""

    run_id: int
    lease_token: int
    status: RunStatus  # what the run becomes: succeeded | failed (retry in retry_in s) | dead
    retry_in: float
    outcome: Outcome  # how the attempt ended
    error: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    stdout_tail: str | None = None
    stderr_tail: str | None = None
    cpu_seconds: float | None = None
    peak_rss_bytes: int | None = None
    stdout_replaced: bool = False
    stderr_replaced: bool = False
    ping_url: str | None = None  # the job's, from the claim: its success or fail ping

    def without_output(self, why: str) -> Completion:
        """The same result with its tails dropped and `why` added to the error."""
        error = f"{self.error}\n{why}" if self.error else why
        return replace(self, error=error, stdout_tail=None, stderr_tail=None)


_COMPLETION_FIELDS = tuple(f.name for f in fields(Completion))
_COMPLETION_COLUMNS = attrgetter(*_COMPLETION_FIELDS)
_RUN_ID = attrgetter("run_id")


def completion_columns(results: Sequence[Completion]) -> list[list[Any]]:
    """complete_runs' array parameters ($1..$15, one per Completion field), rows sorted by
    run id (complete_runs: one lock order); one empty array each when there are none."""
    if not results:
        return [[] for _ in _COMPLETION_FIELDS]
    ordered = sorted(results, key=_RUN_ID)
    return [list(c) for c in zip(*map(_COMPLETION_COLUMNS, ordered), strict=True)]


def _claim_args(
    types: Sequence[str],
    limit: int,
    owner: str,
    lease_ttl: float,
    held: Sequence[int] | None,
    ahead: float,
    misfire_grace: float,
    after: Mapping[str, tuple[datetime, int]] | None,
) -> list[Any]:
    """claim_runs' $1-$9."""
    offered = list(dict.fromkeys(types))
    cursors = [(after or {}).get(t) for t in offered]
    return [
        offered, limit, owner, lease_ttl, None if held is None else list(held), ahead,
        misfire_grace, [None if c is None else c[0] for c in cursors],
        [None if c is None else c[1] for c in cursors],
    ]  # fmt: skip
