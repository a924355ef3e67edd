"""The dashboard's forms without a browser: an oversized job form is read field by field
(the fields that fit kept, the rest named), anywhere else refused unread with a page that
says the limit; the preview of a one-off, and of a UTC cron in one column."""

from __future__ import annotations

from api.ui.forms import READ_AT_MOST, _Pairs
from supervisor.core import jobs
from supervisor.core.store import Store

from .. import factory
from ..helpers import job
from .conftest import Ui

FORM = {"name": "huge", "type": "echo", "kind": "cron", "cron": "0 * * * *"}
MIB = 1024 * 1024
HX = {"HX-Request": "true"}


async def test_an_oversized_job_form_comes_back_with_its_other_fields(
    ui_admin: Ui, store: Store
) -> None:
    r = await ui_admin.post("/ui/jobs/new", {**FORM, "payload": "x" * (3 * MIB)})
    html = await r.text()
    assert r.status == 413 and 'id="payload-error"' in html and "is 3.0 MiB as sent" in html
    assert 'value="huge"' in html and 'value="0 * * * *"' in html
    assert await store.get_job_by_name("huge") is None
    r = await ui_admin.post("/ui/jobs/new", {**FORM, "payload": "x" * (READ_AT_MOST + 1)})
    html = await r.text()
    assert r.status == 413 and "Form too large" in html and 'href="/ui/jobs/new"' in html
    assert await store.get_job_by_name("huge") is None


async def test_an_oversized_trigger_form_comes_back_with_the_error_at_the_payload(
    ui_admin: Ui, store: Store
) -> None:
    made = await jobs.create_job(store, job("billing"), factory.LIMITS)
    r = await ui_admin.post(f"/ui/jobs/{made.id}/trigger", {"payload": "x" * (2 * MIB)})
    html = await r.text()
    assert r.status == 413 and 'id="payload-error"' in html and "is 2.0 MiB as sent" in html
    assert "<h1>Run now <code>billing</code></h1>" in html
    assert await factory.count(store, "runs", "trigger = 'manual'") == 0


async def test_elsewhere_an_oversized_form_gets_the_limit_page(ui_admin: Ui, store: Store) -> None:
    made = await jobs.create_job(store, job("billing"), factory.LIMITS)
    r = await ui_admin.post(f"/ui/jobs/{made.id}/pause", {"reason": "x" * (2 * MIB)})
    html = await r.text()
    assert r.status == 413 and "<h1>413 · Form too large</h1>" in html
    assert "at most 1.0 MiB (1048576 bytes, its api_max_body setting)" in html
    assert f'href="/ui/jobs/{made.id}/pause">Back to the form' in html
    assert (await store.get_job(made.id)).spec.paused is False  # type: ignore[union-attr]


async def test_an_anonymous_oversized_form_is_not_read(ui_anon: Ui) -> None:
    await ui_anon.get("/ui/login")
    r = await ui_anon.post("/ui/jobs/new", {**FORM, "payload": "x" * (2 * MIB)})
    assert r.status == 413 and "Form too large" in await r.text()


def test_pairs_keep_what_fits_and_name_the_rest() -> None:
    pairs = _Pairs(100)
    for piece in (b"csrf=abc", b"pay", b"load=" + b"x" * 500, b"name=a%20b", b"", b"e="):
        pairs.feed(piece)
        if not piece.startswith(b"pay"):
            pairs.end()
    assert pairs.kept == [("csrf", "abc"), ("name", "a b"), ("e", "")]
    assert pairs.dropped == {"payload": 508}


async def test_preview_of_a_one_off_and_of_a_utc_cron(ui_admin: Ui) -> None:
    q = "kind=once&run_at=2031-06-01T08:00&timezone=Europe/Berlin"
    status, html = await ui_admin.get(f"/ui/jobs/preview?{q}", headers=HX)
    assert status == 200 and "Runs once" in html and html.count("<tr") == 2
    assert "2031-06-01T06:00:00Z" in html and "2031-06-01T08:00:00+02:00" in html
    status, html = await ui_admin.get(
        "/ui/jobs/preview?kind=once&run_at=2020-01-01T00:00", headers=HX
    )
    assert "already past" in html and "<th>Note</th>" in html
    status, html = await ui_admin.get("/ui/jobs/preview?kind=once&run_at=noon", headers=HX)
    assert 'id="preview-error"' in html and "run_at: must be a date and time" in html
    status, html = await ui_admin.get("/ui/jobs/preview?cron=0+*+*+*+*&timezone=UTC", headers=HX)
    assert "<th>UTC</th></tr>" in html and "DST" not in html
