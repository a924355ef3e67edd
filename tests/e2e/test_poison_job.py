"""One job a host cannot plan (its zone is missing from this host's tzdata) must not stop
that host: the supervisor keeps planning and running everything else, and says which job
it skipped in /readyz."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from supervisor.core import jobs
from supervisor.core.store import Store

from ..api_support import READER, TOKENS, http
from ..factory import delete_runs, set_job
from ..helpers import job, wait_for
from .procs import Cluster, free_port
from .scenario import LIMITS, all_in, create_runs


def _readyz(port: int, token: str | None = None) -> dict[str, object]:
    return dict(json.loads(http(f"http://127.0.0.1:{port}/readyz", token=token)[2]))


async def test_an_unplannable_job_is_skipped_and_reported(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    bad = await jobs.create_job(
        store, job("zone-from-the-future", "append", cron="* * * * *"), LIMITS
    )
    # A zone this host's tzdata lacks, and no run planned yet: the planner must try it.
    now = await store.now()
    await set_job(store, bad.id, timezone="Mars/Olympus_Mons", planned_until=None, plan_after=now)
    await delete_runs(store, bad.id)
    port = free_port()
    # The side door's details need one of api_tokens' tokens; anyone else learns the kind.
    env = {"PUNCHCLOCK_API_TOKENS": TOKENS[1]}
    sup = await cluster.start_ready("a", ["append"], metrics_port=port, env=env)
    event = await sup.wait_event("plan_failed", 15, job_id=bad.id)
    assert "Mars/Olympus_Mons" in event["error"]
    anonymous = await asyncio.to_thread(_readyz, port)
    assert anonymous == {"status": "ready", "warnings": ["unplannable_jobs"]}
    body = await asyncio.to_thread(_readyz, port, READER)
    assert body["unplannable_jobs"] == [
        {"job_id": bad.id, "job_name": "zone-from-the-future", "error": event["error"]}
    ]
    # Everything else goes on.
    ids = await create_runs(store, "append", 3, {"out": str(tmp_path / "out.csv")})
    await wait_for(lambda: all_in(store, ids, "succeeded"), 20, "the other jobs to run")
    assert sup.running, sup.tail()
    assert sup.stop() == 0, sup.tail()
