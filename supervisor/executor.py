"""Runs claimed runs as child processes and reports their results, fenced by the lease.

Owns the in-flight table (run id -> lease token, child, local lease deadline). The
heartbeater renews what `leases()` lists and calls `renewed()`; the fence watch
kills a child whose lease may expire before a renewal could succeed (self-fencing).
Every finished child yields exactly one fenced completion, recorded in batches by its
Completer; the database decides whether it is still ours (recorded) or late (dropped and
counted).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import timedelta
from typing import Any

from supervisor import lease
from supervisor.completer import Completer
from supervisor.core.db import DB_ERRORS
from supervisor.core.log import log_event
from supervisor.core.model import Outcome, RunStatus, utc_iso
from supervisor.core.records import Claim
from supervisor.core.runpath import Completion
from supervisor.core.store import Store
from supervisor.faces import AttemptEnded, LiveOutput
from supervisor.inflight import InFlight, Phase
from supervisor.proc.child import ChildResult, ChildSpec
from supervisor.proc.isolation import EnvFileError, read_env_files
from supervisor.proc.orphans import Orphans
from supervisor.proc.runner import Child
from supervisor.proc.watcher import Watcher
from supervisor.registry import Registry
from supervisor.verdict import ERROR_STDERR_CHARS, not_run, verdict

DEFAULT_TIMEOUT = 3600.0
# The planner holds off from HOLD_BEFORE before a claimed-ahead run's start until HOLD_AFTER
# past it, so the spawn and the child's start-up do not queue behind planning CPU.
HOLD_BEFORE = 0.03
HOLD_AFTER = 0.01

log = logging.getLogger("punchclock.executor")


class Executor:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        owner: str,
        concurrency: int,
        lease_ttl: float,
        kill_grace: float,
        output_limit: int,
        keeper: Any = None,
        orphans: Orphans | None = None,
        on_slot_free: Callable[[], None] | None = None,
        on_started: Callable[[str, float], None] | None = None,
        on_ended: Callable[[AttemptEnded], None] | None = None,
        log_runs: bool = False,
    ) -> None:
        self.store = store
        # run_started and run_succeeded: info with `log_runs`, else debug (two lines per run
        # were a tenth of a supervisor's CPU per run at the throughput benchmark's rates).
        self._routine_level = logging.INFO if log_runs else logging.DEBUG
        self.registry = registry
        self.owner = owner
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.kill_grace = kill_grace
        self.output_limit = output_limit
        self.keeper = keeper
        self.orphans = orphans
        self.watcher = Watcher()  # watches every child it starts
        self.on_slot_free = on_slot_free
        self.on_started = on_started  # (type, queue delay in seconds)
        self.on_ended = on_ended
        self.self_fenced = 0
        self.inflight: dict[int, InFlight] = {}
        # Runs whose child is starting or running: what `concurrency` limits. The in-flight
        # table also holds runs whose result is being recorded (their leases still renew).
        self.running = 0
        self.running_by_type: dict[str, int] = {}  # what a handler's `concurrency` limits
        self._envs: dict[str, dict[str, str]] = {}  # type -> clean environment (isolation.py)
        self._batch: tuple[float, str] | None = None  # (claimed_at, prefix) of the last claim
        self._batch_left: dict[str, int] = {}  # prefix -> children not yet started
        self.completer = Completer(store, owner=owner, lease_ttl=lease_ttl)
        self._retirements: list[asyncio.Future[None]] = []  # resolved when a run retires
        self._starting: list[tuple[InFlight, Claim]] = []  # runs _start_batch starts next

    def use_handlers(self, registry: Registry, kill_grace: float, output_limit: int) -> None:
        """A reload's handlers and settings, for children started from now on (each type's
        environment is derived from its handler again)."""
        self.registry = registry
        self._envs.clear()
        self.kill_grace, self.output_limit = kill_grace, output_limit

    # ------------------------------------------------------------ capacity and leases

    @property
    def free_slots(self) -> int:
        return max(0, self.concurrency - self.running)

    def room(self) -> dict[str, int]:
        """How many more children each type with its own `concurrency` may start now."""
        return {
            t: max(0, h.concurrency - self.running_by_type.get(t, 0))
            for t, h in self.registry.handlers.items()
            if h.concurrency is not None
        }

    def held(self) -> Collection[int]:
        return self.inflight.keys()

    def in_flight(self) -> int:
        return len(self.inflight)

    def live_output(self, older_than: float) -> list[LiveOutput]:
        since = time.monotonic() - older_than
        out = []
        for e in self.inflight.values():
            child = e.child
            if (
                e.phase is Phase.RUNNING
                and child is not None
                and child.started_monotonic < since
                and (live := child.live_output()) is not None
            ):
                out.append(LiveOutput(e.run_id, e.attempt, e.lease_token, *live))
        return out

    def hold_off(self, now: float | None = None) -> float:
        """Seconds until no start of a run claimed ahead is near (0: none is), as seen at
        the monotonic instant `now` (default: this one)."""
        now = time.monotonic() if now is None else now
        near = [
            e.start_at
            for e in self.inflight.values()
            if now - HOLD_AFTER < e.start_at <= now + HOLD_BEFORE
        ]
        return max(near) + HOLD_AFTER - now if near else 0.0

    def leases(self) -> list[tuple[int, int]]:
        return [(e.run_id, e.lease_token) for e in self.inflight.values()]

    def renewed(self, leases: list[tuple[int, int]], ok: set[int], sent_at: float) -> None:
        for run_id, token in leases:
            entry = self.inflight.get(run_id)
            if entry is None or entry.lease_token != token:
                continue
            if run_id in ok:
                if sent_at + self.lease_ttl > entry.valid_until:
                    entry.valid_until = sent_at + self.lease_ttl
                    if entry.child is not None:
                        entry.child.set_kill_by(
                            lease.keeper_kill_by(entry.valid_until, self.lease_ttl)
                        )
            elif entry.phase in (Phase.RUNNING, Phase.FENCED):
                entry.move(Phase.LOST)
                self._event("lease_lost", entry, reason="the run is no longer ours")
                self._kill(entry, "lease lost", grace=0)

    def fence_check(self, now: float | None = None) -> None:
        """Kill children whose lease could expire before another renewal succeeds."""
        now = time.monotonic() if now is None else now
        margin = self.lease_ttl * lease.SELF_FENCE
        for entry in self.inflight.values():
            remaining = entry.valid_until - now
            if remaining < margin and entry.phase is Phase.RUNNING:
                entry.move(Phase.FENCED)
                self.self_fenced += 1
                self._event("self_fenced", entry, remaining_seconds=round(remaining, 3))
                self._kill(entry, "self-fenced: could not renew the lease", grace=remaining / 2)

    def _kill(self, entry: InFlight, reason: str, grace: float | None = None) -> None:
        if entry.child is not None:
            grace = None if grace is None else max(0.0, min(grace, self.kill_grace))
            asyncio.get_running_loop().create_task(entry.child.kill(reason, grace))

    # ------------------------------------------------------------ running

    def start(self, row: Claim, claimed_at: float) -> None:
        entry = InFlight(
            run_id=row.id,
            lease_token=row.lease_token,
            attempt=row.attempts,
            job_name=row.job_name,
            type=row.type,
            valid_until=claimed_at + self.lease_ttl,
            wakes_others=row.wakes_others,
            # From the reply, not from `claimed_at` (when the claim was sent): never early.
            start_at=time.monotonic() + row.start_in if row.start_in > 0 else 0.0,
        )
        if self.keeper is not None:
            entry.batch = self._announced(claimed_at, entry.valid_until)
        old = self.inflight.get(entry.run_id)
        self.inflight[entry.run_id] = entry
        self.running += 1
        self.running_by_type[entry.type] = self.running_by_type.get(entry.type, 0) + 1
        handler = self.registry.handlers.get(row.type)
        if old is None and not entry.start_at and (handler is None or not handler.env_files):
            # The usual run: started with the rest of its claim once the claimer yields
            # (_start_batch), with no task of its own.
            if not self._starting:
                asyncio.get_running_loop().call_soon(self._start_batch)
            self._starting.append((entry, row))
        else:
            entry.task = asyncio.get_running_loop().create_task(self._prepare(entry, row, old))

    def _announced(self, claimed_at: float, valid_until: float) -> str:
        """The keeper's announcement covering the children of the claim made at
        `claimed_at` (one per claim: a supervisor frozen before it names a child's group
        still has it killed before its lease ends)."""
        if self._batch is None or self._batch[0] != claimed_at:
            prefix = uuid.uuid4().hex[:12]
            self.keeper.announce_batch(prefix, lease.keeper_kill_by(valid_until, self.lease_ttl))
            self._batch = (claimed_at, prefix)
            self._batch_left[prefix] = 0
        prefix = self._batch[1]
        self._batch_left[prefix] += 1
        return prefix

    def _spawned(self, entry: InFlight) -> None:
        """Its child started (and is registered) or never will: the batch needs it no more.
        The batch is withdrawn on the next loop iteration, once its claim's other runs have
        started too (they start one after another within this one: one announcement and
        one withdrawal per claim, not per child)."""
        if not entry.batch:
            return
        prefix, entry.batch = entry.batch, ""
        self._batch_left[prefix] -= 1
        if self._batch_left[prefix] == 0:
            asyncio.get_running_loop().call_soon(self._withdraw, prefix)

    def _withdraw(self, prefix: str) -> None:
        if self._batch_left.get(prefix) != 0:
            return  # a run of the same claim took it again meanwhile, or it is withdrawn
        del self._batch_left[prefix]
        if self._batch is not None and self._batch[1] == prefix:
            self._batch = None
        self.keeper.withdraw(prefix)

    def _free_slot(self, entry: InFlight) -> None:
        if not entry.slot_freed:
            entry.slot_freed = True
            self.running -= 1
            self.running_by_type[entry.type] -= 1
            if self.on_slot_free:
                self.on_slot_free()

    async def _supersede(self, old: InFlight) -> None:
        """End an execution whose claim the database lost before the new one starts: two
        executions of one run never overlap on this host."""
        if old.phase is Phase.COMPLETING:
            return  # its child has ended; its result is fenced by its own token
        old.move(Phase.SUPERSEDED)
        self._event("superseded", old, reason="the run was claimed again: its claim was lost")
        if old.child is not None:
            await old.child.kill("superseded: the run was claimed again", 0)

    # A run's way through here is a chain of callbacks: start -> _start_batch (or
    # _prepare, for a run that must wait first) -> _start_runs -> the child's end ->
    # _child_ended -> the completer's batch -> _recorded -> _retire. No task, future or
    # extra loop iteration per run in the usual case (DESIGN.md, Lease and fencing
    # protocol). Each link catches what it raises and retires the run, so a bug costs that
    # run's result, never the slot.

    async def _prepare(self, entry: InFlight, row: Claim, old: InFlight | None) -> None:
        """What a run may have to wait for before its child starts: the end of a superseded
        execution, its handler's environment files, its instant (claimed ahead)."""
        try:
            if old is not None:
                await self._supersede(old)
            extra = await self._env_files(row)
            if (wait := entry.start_at - time.monotonic()) > 0:
                await asyncio.sleep(wait)
        except asyncio.CancelledError:  # given back while it waited (_give_back)
            self._spawned(entry)
            self._retire(entry)
            raise
        except Exception:
            self._spawned(entry)
            self._crashed(entry)
            return
        self._start_runs([(entry, row, extra)])

    async def _env_files(self, row: Claim) -> dict[str, str] | ChildResult:
        """The handler's environment files, read at each spawn (a bad file fails this
        attempt alone), or the result of an attempt that cannot start because of them."""
        handler = self.registry.handlers.get(row.type)
        if handler is None or not handler.env_files:
            return {}
        try:
            return await asyncio.to_thread(read_env_files, handler.env_files)
        except EnvFileError as exc:
            return not_run(str(exc))

    def _start_batch(self) -> None:
        """Start the runs `start` queued in one loop iteration (a claim's)."""
        batch, self._starting = self._starting, []
        self._start_runs([(entry, row, {}) for entry, row in batch])

    def _start_runs(self, runs: list[tuple[InFlight, Claim, dict[str, str] | ChildResult]]) -> None:
        """What to start for each run (`extra`: its environment files' variables, or the
        result of an attempt they keep from starting), then their children together
        (Child.start_many: the spawns back to back, the bookkeeping after them, warm), then
        each one's start event; an attempt that cannot start ends at once."""
        ready: list[tuple[InFlight, Claim, ChildSpec]] = []
        # A claim that came back with too little lease left (a slow server, a starved host)
        # is fenced now, before its child costs a spawn only to be killed at once.
        self.fence_check()
        for entry, row, extra in runs:
            try:
                if isinstance(extra, ChildResult):
                    spec: ChildSpec | ChildResult = extra
                elif entry.phase is not Phase.RUNNING:
                    # Lost, fenced or given back before the child even started: starting it
                    # now could overlap another host's execution of the same run.
                    spec = not_run("not started: the lease was lost or given back first")
                else:
                    spec = self._child_spec(entry, row, extra)
            except Exception:
                self._spawned(entry)
                self._crashed(entry)
                continue
            if isinstance(spec, ChildResult):
                self._spawned(entry)
                self._child_ended(entry, row, spec)
            else:
                ready.append((entry, row, spec))
        try:
            children = Child.start_many(
                [s for _, _, s in ready], self.watcher, self.keeper, self.orphans
            )
        except Exception:  # Child.start_many catches each child's own failure
            for entry, _, _ in ready:
                self._spawned(entry)
                self._crashed(entry)
            return
        for (entry, row, _), child in zip(ready, children, strict=True):
            entry.child = child
            self._spawned(entry)
            self._started(entry, row, child)
            child.when_done(functools.partial(self._child_ended, entry, row))

    def _started(self, entry: InFlight, row: Claim, child: Child) -> None:
        """Its start event and metric. Never raises: the child runs on whatever happens here,
        and its end must still reach _child_ended."""
        try:
            self._report_start(entry, row, child)
        except Exception:
            log.exception("executor_crash", extra={"punchclock_fields": {"run_id": entry.run_id}})

    def _report_start(self, entry: InFlight, row: Claim, child: Child) -> None:
        queue_delay = (row.started_at - row.due_at).total_seconds()
        if log.isEnabledFor(self._routine_level):  # its fields cost more than the check
            cg = {} if child.cgroup is None else {"cgroup": child.cgroup.dirs[0]}
            self._event(
                "started",
                entry,
                pid=child.pid,
                scheduled_at=utc_iso(row.scheduled_at),
                queue_delay=round(queue_delay, 4),
                **cg,
            )
        if self.on_started:
            self.on_started(entry.type, max(0.0, queue_delay))

    def _child_ended(self, entry: InFlight, row: Claim, result: ChildResult) -> None:
        try:
            if entry.phase in (Phase.RELEASED, Phase.SUPERSEDED):
                self._retire(entry)  # no completion: the run went back, or is running anew
                return
            self._free_slot(entry)  # refill now; the completer records the result meanwhile
            completion = self._completion(entry, row, result)  # reads the phase
            entry.move(Phase.COMPLETING)
            told = functools.partial(self._recorded, entry, result, completion)
            self.completer.enqueue(completion, entry.wakes_others, told)
        except Exception:
            self._crashed(entry)

    def _recorded(
        self, entry: InFlight, result: ChildResult, completion: Completion, recorded: bool | None
    ) -> None:
        try:
            self._finished(
                entry,
                result,
                completion.status,
                completion.outcome,
                recorded,
                retry_in=completion.retry_in,
            )
        except Exception:
            self._crashed(entry)
        else:
            self._retire(entry)

    def _crashed(self, entry: InFlight) -> None:
        log.exception("executor_crash", extra={"punchclock_fields": {"run_id": entry.run_id}})
        self._retire(entry)

    def _retire(self, entry: InFlight) -> None:
        """Its execution here is over: out of the table (unless a new claim of the run
        replaced it there), its slot free, and whoever waits for that told."""
        if entry.retired:
            return
        entry.retired = True
        if self.inflight.get(entry.run_id) is entry:
            del self.inflight[entry.run_id]
        self._free_slot(entry)
        if self._retirements:
            waiters, self._retirements = self._retirements, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def _child_spec(
        self, entry: InFlight, row: Claim, extra: dict[str, str]
    ) -> ChildSpec | ChildResult:
        """What to start for this run (`extra`: from its environment files), or the result
        of an attempt that cannot start."""
        handler = self.registry.handlers.get(row.type)
        if handler is None:  # unregistered since the claim: fail the attempt, keep going
            return not_run(f"no handler registered for type {row.type!r} on this host")
        timeout = row.timeout_seconds or handler.timeout_seconds or DEFAULT_TIMEOUT
        deadline = row.db_now + timedelta(seconds=row.start_in + timeout)
        env = self._envs.get(row.type)
        if env is None:
            env = self._envs[row.type] = handler.environment(os.environ)
        env = {
            **env,
            **extra,
            "PUNCHCLOCK_RUN_ID": str(row.id),
            "PUNCHCLOCK_JOB_NAME": row.job_name,
            "PUNCHCLOCK_JOB_TYPE": row.type,
            "PUNCHCLOCK_ATTEMPT": str(row.attempts),
            "PUNCHCLOCK_SCHEDULED_AT": utc_iso(row.scheduled_at),
            "PUNCHCLOCK_LEASE_TOKEN": str(row.lease_token),
            "PUNCHCLOCK_DEADLINE": utc_iso(deadline),
        }
        return ChildSpec(
            argv=list(handler.argv),
            env=env,
            stdin=row.payload.encode(),
            cwd=handler.cwd,
            user=None if handler.identity is None else handler.identity.uid,
            group=None if handler.identity is None else handler.identity.gid,
            extra_groups=None if handler.identity is None else handler.identity.groups,
            umask=handler.umask,
            limits=handler.limits,
            cgroup=self.registry.cgroup_host if handler.cgroup else None,
            cgroup_limits=handler.cgroup_limits,
            timeout=timeout,
            kill_grace=self.kill_grace,
            output_limit=self.output_limit,
            kill_by=lease.keeper_kill_by(entry.valid_until, self.lease_ttl),
            announced=entry.batch,
        )

    def _completion(self, entry: InFlight, row: Claim, result: ChildResult) -> Completion:
        kill_by = lease.keeper_kill_by(entry.valid_until, self.lease_ttl)
        c = verdict(
            entry.run_id,
            entry.lease_token,
            result,
            lease_gone=entry.lease_gone,
            keeper_killed=result.signal == signal.SIGKILL and time.monotonic() >= kill_by,
            attempts=row.attempts,
            max_attempts=row.max_attempts,
            retry_base=row.retry_base_seconds,
            retry_cap=row.retry_cap_seconds,
            policy=row.exit_policy,
        )
        return c if row.ping_url is None else replace(c, ping_url=row.ping_url)

    def _finished(
        self,
        entry: InFlight,
        result: ChildResult,
        status: RunStatus,
        completion_outcome: Outcome,
        recorded: bool | None,
        retry_in: float = 0.0,
    ) -> None:
        duration = round(result.duration, 3)
        if recorded is None:  # shutdown gave up on an unreachable database; the reaper decides
            self._event("result_unrecorded", entry, child_end=result.outcome, duration=duration)
            return
        if self.on_ended:
            outcome = completion_outcome if recorded else "rejected_late"
            dead = bool(recorded) and status == RunStatus.DEAD
            self.on_ended(AttemptEnded(entry.job_name, entry.type, outcome, duration, dead))
        if not recorded:
            self._event(
                "late_result_rejected", entry, outcome=completion_outcome, duration=duration
            )
            return
        if status == RunStatus.SUCCEEDED:
            self._event("succeeded", entry, duration=duration)
            return
        fields = {
            "error": result.error,
            "exit_code": result.exit_code,
            "duration": duration,
            "outcome": completion_outcome,
        }
        named = {Outcome.TIMED_OUT: "timed_out", Outcome.OOM_KILLED: "oom_killed"}
        self._event(named.get(completion_outcome, "failed"), entry, **fields)
        if status == RunStatus.DEAD:
            self._event("dead", entry, stderr_tail=result.stderr_tail[-ERROR_STDERR_CHARS:])
        else:
            self._event("retry_scheduled", entry, retry_in=retry_in)

    # ------------------------------------------------------------ shutdown

    async def drain(self, within: float, hurry: asyncio.Event | None = None) -> bool:
        """Wait for in-flight runs to finish; True if all did within `within` seconds."""
        return await self._until(lambda: not self.inflight, within, hurry)

    async def _until(
        self, done: Callable[[], bool], within: float, hurry: asyncio.Event | None = None
    ) -> bool:
        """Wait until `done()`, checked as runs retire; False after `within` seconds, or
        once `hurry` is set."""
        deadline = time.monotonic() + within
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (hurry is not None and hurry.is_set()):
                return False
            fut = asyncio.get_running_loop().create_future()
            self._retirements.append(fut)
            await asyncio.wait({fut}, timeout=min(0.2, remaining))  # 0.2: to see `hurry`
        return True

    async def release_waiting(self) -> int:
        """At shutdown, before the drain: runs claimed ahead whose instant has not come go
        back unstarted (no attempt spent), to start on time on another host."""
        now = time.monotonic()
        return await self._give_back(
            [
                e
                for e in self.inflight.values()
                if e.child is None and e.phase is Phase.RUNNING and e.start_at > now
            ]
        )

    async def interrupt_all(self) -> int:
        """Kill what is left and give the runs back without consuming an attempt."""
        # A run whose child already ended has its result queued: the completer records it.
        # Releasing it instead would run a finished handler a second time elsewhere.
        return await self._give_back(
            [e for e in self.inflight.values() if e.phase is not Phase.COMPLETING]
        )

    async def _give_back(self, entries: list[InFlight]) -> int:
        if not entries:
            return 0
        leases = [(e.run_id, e.lease_token) for e in entries]
        for e in entries:
            e.move(Phase.RELEASED)
        await asyncio.gather(
            *(e.child.kill("supervisor shutting down") for e in entries if e.child is not None),
            return_exceptions=True,
        )
        released: set[int] = set()
        try:
            released = await self.store.release_runs(leases, self.owner)
        except DB_ERRORS as exc:
            log_event(log, "release_failed", level=logging.WARNING, error=repr(exc))
        for e in entries:
            if e.run_id in released:
                self._event("interrupted", e)
                if self.on_ended:
                    self.on_ended(AttemptEnded(e.job_name, e.type, "interrupted", None))
        for e in entries:
            if e.child is None and e.task is not None:
                e.task.cancel()  # still waiting for its instant: it retires now
        await self._until(lambda: all(e.retired for e in entries), self.kill_grace + 5)
        return len(released)

    def _event(self, event: str, entry: InFlight, **fields: Any) -> None:
        level = (
            self._routine_level
            if event in ("started", "succeeded")
            else logging.INFO
            if event == "retry_scheduled"
            else logging.WARNING
        )
        if not log.isEnabledFor(level):
            return
        data = {
            "run_id": entry.run_id,
            "job_name": entry.job_name,
            "type": entry.type,
            "attempt": entry.attempt,
            "worker_id": self.owner,
            **fields,
        }
        log_event(log, f"run_{event}", level=level, **data)
