"""The dashboard's job form refuses an inner ping URL as the API does (issue 62, SSRF): the
error names ping_url and no job is written."""

from __future__ import annotations

from supervisor.core.store import Store

from .. import factory
from .conftest import Ui
from .test_ui_edit import FORM


async def test_the_job_form_refuses_a_metadata_ping_url(ui_admin: Ui, store: Store) -> None:
    before = await factory.count(store, "jobs")
    for url in ("http://169.254.169.254/", "http://127.0.0.1:9/"):
        r = await ui_admin.post("/ui/jobs/new", {**FORM, "ping_url": url})
        html = await r.text()
        assert r.status == 422, html
        assert "ping_url" in html and url.split("/")[2].split(":")[0] in html
    assert await factory.count(store, "jobs") == before
