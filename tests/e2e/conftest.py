"""E2E fixtures: a cluster of supervisor processes that always ends, and orphan adoption."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from .procs import Cluster, ThrowawayPostgres, reap_adopted, set_subreaper
from .scenario import start_migrated


@pytest.fixture(autouse=True)
def adopt_orphans() -> Iterator[None]:
    """Make this test process the subreaper of everything it starts, for the test's span.

    A child that outlives its supervisor (the bug these tests hunt) is reparented to us
    instead of init, so the no-stray-children check in tests/conftest.py sees it.
    """
    set_subreaper(True)
    try:
        yield
    finally:
        set_subreaper(False)
        reap_adopted()


@pytest.fixture
def cluster(tmp_path: Path, dsn: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, dsn)
    try:
        yield c
    finally:
        c.stop_all()


@pytest.fixture
async def pg() -> AsyncIterator[ThrowawayPostgres]:
    """A migrated cluster of this test's own (the newest PostgreSQL here), to break or to
    measure; never the shared server."""
    server = ThrowawayPostgres()
    try:
        await start_migrated(server)
        yield server
    finally:
        await asyncio.to_thread(server.close)
