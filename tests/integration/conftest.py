"""Fixtures of the integration tests that more than one module uses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from supervisor.core.store import Store

from ..api_support import api_client
from ..notify_support import Receiver


@pytest.fixture
async def api(store: Store) -> AsyncIterator[TestClient[Any, Any]]:
    """The API in-process, unauthenticated (loopback), on this test's database."""
    async with api_client(store) as client:
        yield client


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A webhook receiver on loopback (notify_support.Receiver), stopped afterwards."""
    r = Receiver()
    await r.start()
    try:
        yield r
    finally:
        await r.stop()
