"""A run's life (runlife.py) edge by edge, with a fake child: nothing is spawned. The table,
the run's life, the executor, the registry and the verdict are the real ones; the child, the
completer (the test says what the database answered) and the keeper record what they are
asked. Each test names the edge it crosses:

    start -> (prepare: supersede, env files, instant) -> spawn -> end -> verdict
          -> completion -> recorded -> retire
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from supervisor.core.exitpolicy import DEFAULT_POLICY
from supervisor.core.model import Outcome, RunStatus, Trigger
from supervisor.core.records import Claim
from supervisor.core.runpath import Completion
from supervisor.executor import Executor
from supervisor.faces import AttemptEnded, AttemptOutcome
from supervisor.inflight import InFlight, Phase, RunTable
from supervisor.proc.child import ChildEnd, ChildResult, ChildSpec
from supervisor.registry import Handler, Registry
from supervisor.runlife import RunLife
from supervisor.verdict import KEEPER_KILLED

TTL = 30.0
_PIDS = itertools.count(4000)


def result(outcome: ChildEnd = ChildEnd.SUCCEEDED, code: int | None = 0, **kw: Any) -> ChildResult:
    fields = {"signal": None, "error": None, "stdout_tail": "out", "stderr_tail": "",
              "cpu_seconds": 0.01, "peak_rss_bytes": None, "duration": 0.25, **kw}  # fmt: skip
    return ChildResult(outcome, code, **fields)


def claim(run_id: int = 1, **kw: Any) -> Claim:
    now = datetime.now(UTC)
    fields = {
        "id": run_id, "job_id": run_id, "job_name": f"job-{run_id}", "type": "echo",
        "scheduled_at": now, "run_after": now, "started_at": now, "db_now": now,
        "attempts": 1, "max_attempts": 3, "lease_token": 10 + run_id,
        "trigger": Trigger.SCHEDULE, "wakes_others": False, "payload": "{}",
        "timeout_seconds": None, "retry_base_seconds": 1.0, "retry_cap_seconds": 10.0,
        "exit_policy": DEFAULT_POLICY, **kw,
    }  # fmt: skip
    return Claim(**fields)


class FakeChild:
    """A child as the run's life sees it: its spec is kept, nothing runs, the test ends it."""

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.pid = next(_PIDS)
        self.cgroup = None
        self.started_monotonic = time.monotonic()
        self.kills: list[tuple[str, float | None]] = []
        self.kill_bys: list[float] = []
        self.result: ChildResult | None = None
        self._on_done: Callable[[ChildResult], None] | None = None

    def when_done(self, callback: Callable[[ChildResult], None]) -> None:
        if self.result is not None:
            callback(self.result)
        else:
            self._on_done = callback

    def end(self, res: ChildResult) -> None:
        self.result = res
        callback, self._on_done = self._on_done, None
        if callback is not None:
            callback(res)

    async def kill(self, reason: str, grace: float | None = None) -> None:
        self.kills.append((reason, grace))
        if self.result is None:
            self.end(
                result(ChildEnd.KILLED, None, signal=signal.SIGKILL, error=f"killed: {reason}")
            )

    def set_kill_by(self, kill_by: float) -> None:
        self.kill_bys.append(kill_by)

    def live_output(self) -> tuple[int, str, str] | None:
        return None if self.result is not None else (3, "out", "")


@dataclass
class Queued:
    completion: Completion
    wakes_others: bool
    told: Callable[[bool | None], None]


class FakeCompleter:
    """Takes what the run's life queues; the test answers for the database (`told`)."""

    def __init__(self) -> None:
        self.queued: list[Queued] = []
        self.broken = False

    def enqueue(
        self, completion: Completion, wakes_others: bool, told: Callable[[bool | None], None]
    ) -> None:
        if self.broken:
            raise RuntimeError("a bug in the completer")
        self.queued.append(Queued(completion, wakes_others, told))


class FakeKeeper:
    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    def announce_batch(self, prefix: str, kill_by: float) -> None:
        self.said.append(("announce", prefix))

    def withdraw(self, prefix: str) -> None:
        self.said.append(("withdraw", prefix))


class FakeStore:
    """release_runs alone (the shutdown's give-back): every lease is still ours."""

    def __init__(self) -> None:
        self.released: list[list[tuple[int, int]]] = []

    async def release_runs(self, leases: list[tuple[int, int]], owner: str) -> set[int]:
        self.released.append(leases)
        return {run_id for run_id, _ in leases}


@dataclass
class World:
    """One host's executor, table and run life around fake children."""

    handlers: list[Handler] = field(default_factory=lambda: [Handler("echo", ("true",), "t")])
    keeper: FakeKeeper | None = None
    children: list[FakeChild] = field(default_factory=list)
    ended: list[AttemptEnded] = field(default_factory=list)
    started: list[tuple[str, float]] = field(default_factory=list)
    slots_freed: int = 0
    spawn_fails: bool = False

    def __post_init__(self) -> None:
        self.registry = Registry()
        for h in self.handlers:
            self.registry.add(h)
        self.table = RunTable(
            owner="w1", lease_ttl=TTL, kill_grace=2.0, keeper=self.keeper,  # type: ignore[arg-type]
            on_slot_free=self._freed, log_runs=True,
        )  # fmt: skip
        self.completer = FakeCompleter()
        self.life = RunLife(
            self.table, self.completer, self.registry, output_limit=4096,
            on_started=lambda t, d: self.started.append((t, d)), on_ended=self.ended.append,
            start_children=self._start,
        )  # fmt: skip
        self.store = FakeStore()
        self.executor = Executor(
            self.table, self.life, self.store, self.registry,  # type: ignore[arg-type]
            concurrency=4, completer=self.completer, on_ended=self.ended.append,  # type: ignore[arg-type]
        )  # fmt: skip

    def _freed(self) -> None:
        self.slots_freed += 1

    def _start(self, specs: list[ChildSpec]) -> list[FakeChild]:
        if self.spawn_fails:
            raise RuntimeError("a bug in start_many")
        new = [FakeChild(s) for s in specs]
        self.children.extend(new)
        return new

    async def start(self, row: Claim, claimed_at: float | None = None) -> InFlight:
        """The claimer's start, and the loop iteration that starts the claim's batch."""
        self.executor.start(row, time.monotonic() if claimed_at is None else claimed_at)
        entry = self.table.inflight[row.id]
        await asyncio.sleep(0)
        return entry

    def tell(self, recorded: bool | None, index: int = -1) -> None:
        """The completer's answer for a queued result."""
        self.completer.queued[index].told(recorded)


@pytest.fixture
def events(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    caplog.set_level(logging.DEBUG, logger="punchclock.executor")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "punchclock.executor"]


# ---------------------------------------------------------------- start -> spawn


async def test_a_claims_runs_start_together_under_one_keeper_announcement(
    events: Callable[[], list[str]],
) -> None:
    w = World(keeper=FakeKeeper())
    claimed_at = time.monotonic()
    for run_id in (1, 2):
        w.executor.start(claim(run_id), claimed_at)
    assert not w.children, "no child before the claimer yields"
    assert w.table.running == 2 and w.executor.free_slots == 2
    await asyncio.sleep(0)  # _start_batch: both spawned in one call
    assert [c.spec.stdin for c in w.children] == [b"{}", b"{}"]
    [(said, prefix)] = w.keeper.said  # type: ignore[union-attr]
    assert said == "announce"
    assert all(c.spec.announced == prefix for c in w.children)
    await asyncio.sleep(0)  # the batch is withdrawn once all its children started
    assert w.keeper.said[-1] == ("withdraw", prefix)  # type: ignore[union-attr]
    assert events() == ["run_started", "run_started"] and [t for t, _ in w.started] == ["echo"] * 2
    env = w.children[0].spec.env
    assert (env["PUNCHCLOCK_RUN_ID"], env["PUNCHCLOCK_LEASE_TOKEN"]) == ("1", "11")


async def test_spawn_fences_a_claim_that_came_back_with_too_little_lease(
    events: Callable[[], list[str]],
) -> None:
    w = World()
    await w.start(claim(), claimed_at=time.monotonic() - TTL * 0.8)
    assert w.table.self_fenced == 1 and events()[0] == "run_self_fenced"
    assert not w.children, "no spawn only to kill it"
    [q] = w.completer.queued
    assert q.completion.outcome is Outcome.LEASE_LOST


async def test_spawn_of_an_unregistered_type_fails_the_attempt_without_a_child() -> None:
    w = World()
    await w.start(claim(type="gone"))
    assert not w.children
    [q] = w.completer.queued
    assert q.completion.outcome is Outcome.FAILED
    assert "no handler registered for type 'gone'" in str(q.completion.error)


async def test_spawn_that_raises_retires_its_runs_and_frees_their_slots(
    events: Callable[[], list[str]],
) -> None:
    w = World(spawn_fails=True)
    await w.start(claim())
    assert not w.table.inflight and w.table.running == 0 and w.slots_freed == 1
    assert not w.completer.queued and events() == ["executor_crash"]


# ---------------------------------------------------------------- prepare


async def test_prepare_supersedes_an_execution_whose_claim_was_lost(
    events: Callable[[], list[str]],
) -> None:
    w = World()
    old = await w.start(claim())
    [first] = w.children
    new = await w.start(claim(), time.monotonic())  # the same run, the same token, again
    await asyncio.sleep(0)
    assert old.phase is Phase.SUPERSEDED and first.kills == [
        ("superseded: the run was claimed again", 0)
    ]
    assert old.retired and not w.completer.queued, "the superseded one sends no result"
    assert new.child is w.children[1] and w.table.inflight[1] is new
    assert "run_superseded" in events()


async def test_prepare_does_not_touch_an_execution_already_completing() -> None:
    w = World()
    old = await w.start(claim())
    w.children[0].end(result())
    assert old.phase is Phase.COMPLETING
    new = await w.start(claim(), time.monotonic())
    await asyncio.sleep(0)
    assert old.phase is Phase.COMPLETING and new.child is w.children[1]
    w.tell(True, 0)  # the old result is recorded under its own token
    assert old.retired and w.table.inflight[1] is new, "the new claim stays in the table"


async def test_prepare_reads_env_files_and_a_bad_one_fails_the_attempt(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.env", tmp_path / "bad.env"
    good.write_text("TOKEN=s3cret\n")
    bad.write_text("not a pair\n")
    w = World(handlers=[Handler("echo", ("true",), "t", env_files=(str(good),)),
                        Handler("bad", ("true",), "t", env_files=(str(bad),))])  # fmt: skip
    entry = await w.start(claim())
    assert entry.task is not None
    await entry.task
    assert w.children[0].spec.env["TOKEN"] == "s3cret"
    other = await w.start(claim(2, type="bad"))
    assert other.task is not None
    await other.task
    assert len(w.children) == 1
    [q] = w.completer.queued
    assert q.completion.run_id == 2 and "expected KEY=VALUE" in str(q.completion.error)


async def test_prepare_waits_for_a_claimed_ahead_instant() -> None:
    w = World()
    entry = await w.start(claim(start_in=0.05))
    assert entry.start_at > 0 and not w.children
    assert w.executor.hold_off(entry.start_at) > 0
    assert entry.task is not None
    await entry.task
    assert time.monotonic() >= entry.start_at and entry.child is w.children[0]


async def test_a_run_given_back_while_it_waits_for_its_instant_retires_unstarted() -> None:
    w = World()
    entry = await w.start(claim(start_in=3600))
    assert await w.executor.release_waiting() == 1
    assert entry.phase is Phase.RELEASED and entry.retired and not w.children
    assert w.store.released == [[(1, 11)]] and not w.completer.queued
    assert w.ended == [AttemptEnded("job-1", "echo", AttemptOutcome.INTERRUPTED, None)]


# ---------------------------------------------------------------- end


async def test_end_frees_the_slot_before_the_result_is_recorded() -> None:
    w = World()
    entry = await w.start(claim())
    w.children[0].end(result())
    assert w.table.running == 0 and w.slots_freed == 1, "the next run may start now"
    assert w.table.inflight[1] is entry and entry.phase is Phase.COMPLETING
    assert w.executor.leases() == [(1, 11)], "its lease is still renewed"


async def test_end_of_a_run_given_back_sends_no_completion() -> None:
    w = World()
    entry = await w.start(claim())
    assert await w.executor.interrupt_all() == 1
    assert entry.phase is Phase.RELEASED and entry.retired
    assert w.children[0].kills == [("supervisor shutting down", None)]
    assert not w.completer.queued


async def test_end_whose_completion_cannot_be_queued_retires_the_run(
    events: Callable[[], list[str]],
) -> None:
    w = World()
    entry = await w.start(claim())
    w.completer.broken = True
    w.children[0].end(result())
    assert entry.retired and not w.table.inflight and w.table.running == 0
    assert events()[-1] == "executor_crash"


# ---------------------------------------------------------------- verdict


async def test_verdict_of_a_run_whose_lease_was_lost_is_lease_lost() -> None:
    w = World()
    entry = await w.start(claim())
    w.executor.renewed(w.executor.leases(), set(), time.monotonic())
    assert entry.phase is Phase.LOST and not w.children[0].kills
    await asyncio.sleep(0)  # the kill's task
    assert w.children[0].kills == [("lease lost", 0)]
    [q] = w.completer.queued
    assert (q.completion.outcome, q.completion.status) == (Outcome.LEASE_LOST, RunStatus.FAILED)


async def test_verdict_of_a_child_the_keeper_killed_names_the_keeper() -> None:
    w = World()
    entry = await w.start(claim())
    entry.valid_until = time.monotonic()  # its kill-by passed: the loop stood still
    w.children[0].end(result(ChildEnd.FAILED, None, signal=signal.SIGKILL))
    [q] = w.completer.queued
    assert (q.completion.outcome, q.completion.error) == (Outcome.LEASE_LOST, KEEPER_KILLED)


async def test_verdict_carries_the_jobs_ping_url_and_who_it_wakes() -> None:
    w = World()
    await w.start(claim(ping_url="https://example.test/ping", wakes_others=True))
    w.children[0].end(result(ChildEnd.FAILED, 3))
    [q] = w.completer.queued
    assert q.completion.ping_url == "https://example.test/ping" and q.wakes_others
    assert (q.completion.outcome, q.completion.exit_code) == (Outcome.FAILED, 3)


# ---------------------------------------------------------------- completion -> recorded


async def test_recorded_success_reports_and_retires(events: Callable[[], list[str]]) -> None:
    w = World()
    entry = await w.start(claim())
    w.children[0].end(result())
    assert not w.ended, "nothing is reported before the database answers"
    w.tell(True)
    assert w.ended == [AttemptEnded("job-1", "echo", AttemptOutcome.SUCCEEDED, 0.25)]
    assert entry.retired and not w.table.inflight
    assert events() == ["run_started", "run_succeeded"]


async def test_recorded_failure_schedules_a_retry_or_is_dead(
    events: Callable[[], list[str]],
) -> None:
    w = World()
    await w.start(claim(1))
    w.children[0].end(result(ChildEnd.TIMED_OUT, None, error="timed out after 1s"))
    w.tell(True)
    await w.start(claim(2, attempts=3))
    w.children[1].end(result(ChildEnd.FAILED, 1, error="exited with status 1"))
    w.tell(True)
    assert [(e.outcome, e.dead) for e in w.ended] == [
        (AttemptOutcome.TIMED_OUT, False),
        (AttemptOutcome.FAILED, True),
    ]
    assert [e for e in events() if e != "run_started"] == [
        "run_timed_out", "run_retry_scheduled", "run_failed", "run_dead",
    ]  # fmt: skip


async def test_recorded_late_is_counted_rejected_late(events: Callable[[], list[str]]) -> None:
    w = World()
    entry = await w.start(claim())
    w.children[0].end(result())
    w.tell(False)
    assert [e.outcome for e in w.ended] == [AttemptOutcome.REJECTED_LATE]
    assert entry.retired and events()[-1] == "run_late_result_rejected"


async def test_recorded_none_at_shutdown_reports_no_attempt(
    events: Callable[[], list[str]],
) -> None:
    w = World()
    entry = await w.start(claim())
    w.children[0].end(result())
    w.tell(None)
    assert not w.ended and entry.retired and events()[-1] == "run_result_unrecorded"


async def test_recorded_whose_report_raises_still_retires(events: Callable[[], list[str]]) -> None:
    w = World()

    def broken(ended: AttemptEnded) -> None:
        raise RuntimeError("a bug in a metric")

    w.life.on_ended = broken
    entry = await w.start(claim())
    w.children[0].end(result())
    w.tell(True)
    assert entry.retired and not w.table.inflight and events()[-1] == "executor_crash"


# ---------------------------------------------------------------- retire


async def test_retire_is_once_and_wakes_a_drain() -> None:
    w = World()
    entry = await w.start(claim())
    drained = asyncio.ensure_future(w.executor.drain(5.0))
    await asyncio.sleep(0)
    assert not drained.done()
    w.children[0].end(result())
    w.tell(True)
    assert await drained is True
    w.life.retire(entry)  # again: nothing changes
    assert w.table.running == 0 and w.slots_freed == 1


# ---------------------------------------------------------------- leases on the way


async def test_a_renewal_moves_the_keepers_deadline_and_a_fence_kills_in_time() -> None:
    w = World()
    entry = await w.start(claim())
    child = w.children[0]
    before = entry.valid_until
    w.executor.renewed(w.executor.leases(), {1}, time.monotonic())
    assert entry.valid_until > before and len(child.kill_bys) == 1
    w.executor.fence_check(entry.valid_until - TTL * 0.2)  # less than SELF_FENCE left
    assert entry.phase is Phase.FENCED and w.executor.self_fenced == 1
    w.executor.fence_check(entry.valid_until - TTL * 0.1)
    assert w.executor.self_fenced == 1, "fenced once"
    await asyncio.sleep(0)  # the kill's task: half what was left, at most kill_grace
    assert child.kills == [("self-fenced: could not renew the lease", w.table.kill_grace)]
    [q] = w.completer.queued
    assert q.completion.outcome is Outcome.LEASE_LOST


async def test_phases_move_only_forward() -> None:
    w = World()
    entry = await w.start(claim())
    w.children[0].end(result())
    with pytest.raises(AssertionError, match="no move"):
        entry.move(Phase.LOST)
