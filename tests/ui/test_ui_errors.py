"""The dashboard answers errors by the API's table (api/request.py STATUS): a value the
database refuses is the API's 422, on a readable page, logged as the API logs it (a
validation gap), never a logged 500."""

from __future__ import annotations

import logging

import pytest

from api.request import STATUS
from supervisor.core.errors import RefusedValue
from supervisor.core.store import Store

from .. import factory
from .conftest import Ui
from .test_ui_jobs import make

NUL = "a\x00b"  # PostgreSQL's text refuses NUL (22021): the store raises RefusedValue


def _status_of(kind: type[BaseException]) -> int:
    return next(status for kinds, status in STATUS if kinds is kind)


async def test_a_form_post_with_a_value_the_database_refuses_is_the_apis_422(
    ui_admin: Ui, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The bulk requeue's job filter goes to the database as typed (a substring of names):
    with a NUL in it the database refuses the query."""
    a = await make(store, "alpha")
    dead = await factory.insert_runs(store, a, 2, status="dead")
    with caplog.at_level(logging.WARNING):
        r = await ui_admin.post("/ui/runs/requeue", {"job": NUL})
        html = await r.text()
    assert r.status == _status_of(RefusedValue) == 422, html
    assert r.content_type == "text/html"
    assert "<h1>422 · Unprocessable Entity</h1>" in html
    assert "form: a value the database refuses:" in html  # the field, then the database's words
    assert await factory.statuses(store, dead) == {"dead": 2}  # nothing moved
    events = [r.getMessage() for r in caplog.records]
    assert "api_data_error" in events and "ui_internal_error" not in events


async def test_a_query_with_a_value_the_database_refuses_is_a_422_page(ui_admin: Ui) -> None:
    for path in ("/ui/jobs?q=a%00b", "/ui/runs?job=a%00b"):
        status, html = await ui_admin.get(path)
        assert status == 422, (path, html)
        assert "query: a value the database refuses:" in html


async def test_the_pause_reason_follows_the_apis_rules(ui_admin: Ui, store: Store) -> None:
    """Not the database's refusal but the API's own check (jobs.validate_pause), at the field."""
    job_id = await make(store, "alpha")
    await ui_admin.get(f"/ui/jobs/{job_id}/pause")
    r = await ui_admin.post(f"/ui/jobs/{job_id}/pause", {"reason": NUL})
    html = await r.text()
    assert r.status == 422 and "must not contain NUL characters" in html, html
    r = await ui_admin.post(f"/ui/jobs/{job_id}/pause", {"reason": "x" * 501})
    assert r.status == 422 and "must be at most 500 characters" in await r.text()
    assert not (await store.get_job(job_id)).spec.paused  # type: ignore[union-attr]
