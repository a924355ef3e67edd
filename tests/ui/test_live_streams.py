"""A run page's live streams (SSE): capped per session and per process (429 beyond), one
poller per run whatever the number of viewers, and an end after their maximum life (issue
62, item 9)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import ClientResponse, web

from api.ui import live
from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..helpers import job, wait_for
from .conftest import Ui


def hub_of(ui: Ui) -> live.Hub:
    """The dashboard sub-application's hub, to read its counts and shrink its caps."""
    for resource in ui.client.app.router.resources():
        if isinstance(resource, web.PrefixedSubAppResource):
            return resource._app[live.HUB]
    raise AssertionError("no dashboard sub-application")


async def scheduled_run(store: Store) -> int:
    job_id = (await jobs.create_job(store, job("watched", cron="0 0 1 1 *"), factory.LIMITS)).id
    [run_id] = await factory.insert_runs(store, job_id, 1, status="scheduled")
    return run_id


async def next_event(response: ClientResponse, timeout: float = 10.0) -> tuple[str, str] | None:
    """The next event (name, data), or None when the stream ends."""
    name, data = "message", []
    async with asyncio.timeout(timeout):
        async for raw in response.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif not line and data:
                return name, "\n".join(data)
    return None


async def open_stream(ui: Ui, run_id: int) -> ClientResponse:
    r = await ui.client.get(f"/ui/runs/{run_id}/live")
    assert r.status == 200, await r.text()
    first = await next_event(r)
    assert first is not None and first[0] == "run"
    return r


async def snapshot(store: Store) -> list[Any]:
    return [dict(r) for r in await factory.sql_rows(store, "SELECT * FROM runs ORDER BY id")]


async def test_a_session_gets_429_beyond_its_cap(ui_reader: Ui, store: Store) -> None:
    run_id = await scheduled_run(store)
    before = await snapshot(store)
    streams = [await open_stream(ui_reader, run_id) for _ in range(live.PER_SESSION)]
    r = await ui_reader.client.get(f"/ui/runs/{run_id}/live")
    assert r.status == 429
    assert f"a session may follow {live.PER_SESSION} at once" in await r.text()
    assert await snapshot(store) == before, "a refused stream writes nothing"
    hub = hub_of(ui_reader)
    for s in streams:
        s.close()
    await wait_for(lambda: hub.open == 0 and not hub.pollers, 10, "the streams to close")
    await open_stream(ui_reader, run_id)  # room again once they closed


async def test_the_process_gets_429_beyond_its_cap(ui_reader: Ui, store: Store) -> None:
    run_id = await scheduled_run(store)
    hub = hub_of(ui_reader)
    hub.per_session, hub.per_process = 100, 3
    streams = [await open_stream(ui_reader, run_id) for _ in range(3)]
    r = await ui_reader.client.get(f"/ui/runs/{run_id}/live")
    assert r.status == 429 and "on this server (3 at once)" in await r.text()
    for s in streams:
        s.close()


async def test_viewers_of_one_run_share_one_poller(ui_reader: Ui, store: Store) -> None:
    run_id = await scheduled_run(store)
    hub = hub_of(ui_reader)
    hub.every = 3600.0  # a poll only when poked: the count below is the pollers' and no clock's
    streams = [await open_stream(ui_reader, run_id) for _ in range(3)]
    assert (hub.pollers_started, hub.polls) == (1, 1), "three viewers, one read"
    assert hub.pollers[run_id].viewers == 3
    await factory.finish_run(store, run_id, "succeeded")
    hub.pollers[run_id].poke()
    for s in streams:  # every viewer gets the change, then done
        changed = await next_event(s)
        assert changed is not None and 's-succeeded">succeeded' in changed[1]
        assert await next_event(s) == ("done", "final")
    assert hub.polls == 2 and hub.pollers_started == 1
    for s in streams:
        s.close()
    await wait_for(lambda: not hub.pollers and hub.open == 0, 10, "the poller to stop")


async def test_a_stream_ends_after_its_life(ui_reader: Ui, store: Store) -> None:
    run_id = await scheduled_run(store)
    hub = hub_of(ui_reader)
    hub.live_for = 0.2
    r = await open_stream(ui_reader, run_id)
    assert await next_event(r) is None, "the stream ended without done (the browser reconnects)"
    await wait_for(lambda: not hub.pollers and hub.open == 0, 10, "its poller to stop")
