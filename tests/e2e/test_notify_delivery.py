"""Three supervisor processes deliver notifications to a real receiver; the one holding a
delivery is SIGKILLed mid-request: every event still arrives, each under its one
webhook-id, and only the interrupted one arrives twice (a receiver that dedupes sees it once).
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

from supervisor.core import channels
from supervisor.core.events import ChannelSpec
from supervisor.core.store import Store

from ..factory import count, sql, sql_rows, sql_value
from ..helpers import wait_for
from ..notify_support import ALLOW_PRIVATE_ENV, SECRET, Receiver
from .procs import Cluster

WORKERS = ["n1", "n2", "n3"]


async def test_each_event_is_delivered_once_when_a_notifier_is_killed_mid_delivery(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    receiver = Receiver()
    await receiver.start()
    try:
        receiver.mode = "hold"
        spec = ChannelSpec(name="ops", url=receiver.url, secret=SECRET)
        channel = (await channels.create_channel(store, spec)).id
        sups = {w: cluster.start(w, ["append"], env=ALLOW_PRIVATE_ENV) for w in WORKERS}
        for s in sups.values():
            await s.wait_event("supervisor_started", timeout=20)
        first = await channels.test_channel(store, channel)
        await wait_for(lambda: receiver.received, 20, "the first delivery to arrive")
        holder = await sql_value(store, "SELECT lease_owner FROM outbox WHERE id = $1", first)
        sups[holder].send(signal.SIGKILL)
        sups[holder].wait(10)
        receiver.mode = "ok"
        receiver.release.set()
        rest = [await channels.test_channel(store, channel) for _ in range(20)]
        # The killed notifier's lease runs out (moved through the data, not waited for).
        await sql(store, "UPDATE outbox SET next_attempt_at = now() WHERE id = $1", first)

        async def all_delivered() -> bool:
            return await count(store, "outbox", "status = 'delivered'") == 21

        await wait_for(all_delivered, 30, "21 deliveries")
        ids = [f"msg_{i}" for i in [first, *rest]]
        seen = Counter(receiver.ids())
        assert sorted(seen) == sorted(ids), "every event arrived"
        assert {i: n for i, n in seen.items() if n > 1} in ({}, {f"msg_{first}": 2})
        assert all(r.verified for r in receiver.received)
        rows = await sql_rows(store, "SELECT id, attempts FROM outbox ORDER BY id")
        assert [r["attempts"] for r in rows] == [2] + [1] * 20
        attempts = await sql_rows(store, "SELECT * FROM delivery_attempts ORDER BY outbox_id")
        # The interrupted attempt left no record; the retry did, by a surviving notifier.
        assert len(attempts) == 21 and attempts[0]["worker_id"] != holder
        assert {a["worker_id"] for a in attempts} <= set(WORKERS) - {holder}
        for w, s in sups.items():
            if w != holder:
                assert s.stop() == 0, s.tail()
    finally:
        await receiver.stop()
