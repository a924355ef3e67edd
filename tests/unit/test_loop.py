"""The service loop against what a database can raise: a transient error (a deadlock, a
serialization failure, a lost connection) is retried; anything else ends the service."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from supervisor.loop import Loop, Pass


class Flaky(Loop):
    name = "flaky"

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__(interval=0.0, max_backoff=0.01)
        self.pending = errors
        self.passes = 0

    async def run_once(self) -> Pass:
        if self.pending:
            raise self.pending.pop(0)
        self.passes += 1
        if self.passes == 3:
            self.stop()
        return Pass(0.0)


async def test_a_deadlock_or_a_lost_connection_is_retried_not_fatal() -> None:
    # The failover test once ended a supervisor: renew_leases hit 40P01 (deadlock detected),
    # which was not counted as a database error, and escaped the heartbeater's loop.
    loop = Flaky(
        [
            asyncpg.DeadlockDetectedError("deadlock detected"),
            asyncpg.SerializationError("could not serialize access"),
            ConnectionResetError(),
        ]
    )
    await asyncio.wait_for(loop.run(), 10)
    assert (loop.errors, loop.passes) == (3, 3)


async def test_a_bug_is_not_mistaken_for_a_database_error() -> None:
    with pytest.raises(ZeroDivisionError):
        await asyncio.wait_for(Flaky([ZeroDivisionError()]).run(), 10)
