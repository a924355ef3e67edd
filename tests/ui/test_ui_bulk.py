"""Bulk requeue from the runs page: the count of dead runs matching the filter comes first;
the POST moves exactly those (CSRF, admin only)."""

from __future__ import annotations

import re

from api.ui.pages_bulk import COUNT_CAP
from supervisor.core.store import Store

from .. import factory
from .conftest import Ui
from .test_ui_jobs import make


async def test_count_then_requeue_the_filtered_dead_runs(ui_admin: Ui, store: Store) -> None:
    a, b = await make(store, "alpha"), await make(store, "beta")
    dead_a = await factory.insert_runs(store, a, 3, status="dead", start_s=100)
    dead_b = await factory.insert_runs(store, b, 2, status="dead", start_s=100)
    await factory.insert_runs(store, a, 4, start_s=10)
    status, html = await ui_admin.get("/ui/runs?job=alpha")
    link = re.search(r'href="(/ui/runs/requeue\?[^"]*)"', html)
    assert link is not None and "job=alpha" in link.group(1)
    status, html = await ui_admin.get(link.group(1).replace("&amp;", "&"))
    assert status == 200 and re.search(r"<strong>3</strong> dead runs", html)
    assert await factory.statuses(store, dead_a) == {"dead": 3}  # counted, not moved
    r = await ui_admin.post("/ui/runs/requeue", {"job": "alpha"})
    assert r.status == 303 and "done=requeued_bulk&n=3" in r.headers["Location"]
    assert await factory.statuses(store, dead_a) == {"scheduled": 3}
    assert await factory.statuses(store, dead_b) == {"dead": 2}
    status, html = await ui_admin.get(r.headers["Location"])
    assert "Requeued 3 runs: they are due now." in html
    status, html = await ui_admin.get("/ui/runs/requeue?status=succeeded")
    assert "nothing to requeue" in html and 'action="/ui/runs/requeue"' not in html
    status, html = await ui_admin.get("/ui/runs/requeue")
    assert re.search(r"<strong>2</strong> dead runs", html)


async def test_a_large_match_is_counted_up_to_the_cap_and_requeued_whole(
    ui_admin: Ui, store: Store
) -> None:
    a = await make(store, "many")
    dead = await factory.insert_runs(store, a, COUNT_CAP + 5, status="dead", start_s=100)
    status, html = await ui_admin.get("/ui/runs/requeue?status=dead")
    assert status == 200 and f"At least <strong>{COUNT_CAP}</strong> dead runs" in html
    assert f"Requeue all {COUNT_CAP}+ runs" in html
    status, html = await ui_admin.get("/ui/runs/requeue?status=dead&job=nobody")
    assert "<strong>0</strong> dead runs" in html  # no such job: none, not every run
    r = await ui_admin.post("/ui/runs/requeue", {"status": "dead"})
    assert r.status == 303 and f"n={COUNT_CAP + 5}" in r.headers["Location"]
    assert await factory.statuses(store, dead) == {"scheduled": COUNT_CAP + 5}


async def test_a_read_session_cannot_requeue(ui_reader: Ui, store: Store) -> None:
    a = await make(store, "alpha")
    dead = await factory.insert_runs(store, a, 2, status="dead")
    status, html = await ui_reader.get("/ui/runs/requeue")
    assert (
        status == 200
        and "<strong>2</strong>" in html
        and '<button type="submit" class="primary"' not in html
    )
    r = await ui_reader.post("/ui/runs/requeue", {})
    assert r.status == 403 and await factory.statuses(store, dead) == {"dead": 2}
