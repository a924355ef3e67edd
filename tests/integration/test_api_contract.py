"""The OpenAPI document: valid OpenAPI 3.1, covering exactly the routes served, and a
property-based run (schemathesis, about a minute) against a live `punchclock api` that
finds no 5xx and no response contradicting the document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from openapi_spec_validator import validate

from api.app import create_app
from api.openapi import document
from supervisor.core.store import Store

from ..api_support import TOKENS, config, run_schemathesis
from ..factory import insert_runs
from ..helpers import job

Client = TestClient[Any, Any]
SCHEMATHESIS_SECONDS = 45


def test_document_is_valid_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"] == "3.1.0"
    validate(doc)


async def test_document_is_served_and_matches_the_routes(api: Client, store: Store) -> None:
    resp = await api.get("/openapi.json")
    assert resp.status == 200
    assert await resp.json() == document()
    app = create_app(config(api_tokens=TOKENS), store)
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD"
        and route.resource is not None
        and not route.resource.canonical.startswith("/ui")  # the dashboard: HTML, not the API
    }
    documented = {
        (method, path)
        for path, item in document()["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert served - {("get", "/openapi.json")} == documented


async def _seed(store: Store) -> None:
    """Rows with small ids, so generated ids often name something that exists."""
    for i in range(12):
        row = await store.insert_job(job(f"seed-{i}", cron="*/5 * * * *"))
        for status in ("dead", "failed", "scheduled", "succeeded"):
            await insert_runs(store, row.id, 2, status=status, start_s=1000 * (i + 1))
    await store.upsert_worker("seed-worker", "localhost", 1, ["echo"], 4, "test", 30.0)


@pytest.mark.timeout(SCHEMATHESIS_SECONDS + 90)
async def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    dsn: str, store: Store, tmp_path: Path
) -> None:
    await _seed(store)
    # Every check but positive_data_acceptance: a cron expression, a time zone name or an
    # opaque cursor can match its schema and still be invalid (422).
    run_schemathesis(
        dsn,
        tmp_path,
        SCHEMATHESIS_SECONDS,
        ["--checks", "all", "--exclude-checks", "positive_data_acceptance"],
    )
