"""A real supervisor pings a real receiver: a job's ping_url gets /start, then itself on
success or /fail when the run ends dead (the claim's URL carried to the completion by the
executor), and the deployment's heartbeat URL is pinged while the supervisor plans."""

from __future__ import annotations

from pathlib import Path

from supervisor.core.store import Store

from ..helpers import wait_for
from ..notify_support import ALLOW_PRIVATE_ENV, Receiver
from .procs import Cluster
from .scenario import create_runs, status_is


async def test_a_supervisor_pings_start_success_fail_and_the_heartbeat(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    receiver = Receiver()
    await receiver.start()
    try:
        base = f"http://127.0.0.1:{receiver.port}/ping"
        env = {"PUNCHCLOCK_HEARTBEAT_PING_URL": f"{base}/heartbeat", **ALLOW_PRIVATE_ENV}
        await cluster.start_ready("a", ["append", "fail"], env=env)
        [ok] = await create_runs(
            store, "append", 1, {"out": str(tmp_path / "out")}, ping_url=f"{base}/good"
        )
        [bad] = await create_runs(store, "fail", 1, {}, max_attempts=1, ping_url=f"{base}/bad")
        wanted = {"/ping/good/start", "/ping/good", "/ping/bad/start", "/ping/bad/fail"}
        await wait_for(lambda: wanted <= set(receiver.pings), 30, "the four job pings")
        await wait_for(lambda: "/ping/heartbeat" in receiver.pings, 30, "the heartbeat")
        assert await status_is(store, ok, "succeeded") and await status_is(store, bad, "dead")
        job_pings = [p for p in receiver.pings if p != "/ping/heartbeat"]
        assert sorted(job_pings) == sorted(wanted), "each once"
    finally:
        await receiver.stop()
