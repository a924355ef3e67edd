"""The dashboard applies the API's permission table to sessions: every page and form of each
role is allowed exactly when permissions.TABLE says so; a refused form is a 403 that changes
nothing; a page shows only the controls its session may use, and a read session never gets a
payload."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from api.permissions import PUBLIC, TABLE, rank
from supervisor.core.store import Store

from ..role_support import (
    BEARER,
    NAMES,
    ROLES,
    SECRET,
    World,
    fingerprint,
    kill_run,
    make_world,
    role_client,
)
from .conftest import Ui

UI_ROUTES = sorted(
    (m, r) for (m, r), least in TABLE.items() if r.startswith("/ui/") and least != PUBLIC
)
FORMS: dict[str, dict[str, str]] = {
    "/ui/jobs/new": {"name": "j2", "type": "echo", "cron": "* * * * *", "timezone": "UTC"},
    "/ui/jobs/{id}/edit": {"name": "j1", "type": "echo", "cron": "5 * * * *", "timezone": "UTC"},
    "/ui/jobs/{id}/pause": {"reason": "r"},
    "/ui/jobs/{id}/backfill": {"from": "2024-01-01T00:00:00Z", "to": "2024-01-01T00:05:00Z"},
    "/ui/runs/requeue": {"status": "dead"},
}


async def session_of(store: Store, role: str) -> AsyncIterator[tuple[Ui, World]]:
    async with role_client(store) as client:
        world = await make_world(client)
        await kill_run(store, world.run)
        ui = Ui(client)
        await ui.login(BEARER[role])
        yield ui, world


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("method", "route"), UI_ROUTES)
async def test_page_or_form_by_role(store: Store, method: str, route: str, role: str) -> None:
    async for ui, world in session_of(store, role):
        before = await fingerprint(store)
        path = world.path(route)
        if method == "GET":
            status, text = await ui.get(path)
        else:
            r = await ui.post(path, FORMS.get(route, {}))
            status, text = r.status, await r.text()
        if rank(role) >= rank(TABLE[(method, route)]):
            assert status not in (401, 403) and status < 500, text
        else:
            assert status == 403, text
            assert (
                f"needs the {TABLE[(method, route)]}" in text
                and f"&#39;{NAMES[role]}&#39; has the {role} role" in text
            )
            assert await fingerprint(store) == before  # a refused form wrote nothing


# What each role's job and run pages offer (a control shows only when it would work).
CONTROLS = {
    "read": (set(), {"Run now", "Pause…", "Edit", "Delete…", "Requeue", "Backfill"}),
    "operator": ({"Run now", "Pause…", "Requeue", "Backfill"}, {"Edit", "Delete…"}),
    "admin": ({"Run now", "Pause…", "Edit", "Delete…", "Requeue", "Backfill"}, set()),
}


@pytest.mark.parametrize("role", ROLES)
async def test_pages_show_only_usable_controls_and_payloads(store: Store, role: str) -> None:
    async for ui, world in session_of(store, role):
        _, job_page = await ui.get(f"/ui/jobs/{world.job}")
        _, run_page = await ui.get(f"/ui/runs/{world.run}")
        _, jobs_page = await ui.get("/ui/jobs")
        shown, hidden = CONTROLS[role]
        pages = job_page + run_page
        for control in shown:
            assert f">{control}<" in pages, control
        for control in hidden:
            assert f">{control}<" not in pages, control
        assert f">{NAMES[role]}<" in job_page  # the session's token name, in the header
        if role == "read":
            assert SECRET not in pages + jobs_page
            assert "withheld from read sessions" in job_page
        else:
            assert pages.count(SECRET) == 2  # the job's payload and the run's
