"""One drain of N /bin/true runs by 2 supervisors, printed as one JSON line: run as a file
with the working directory at a checkout's root (bench/ab.py does), so the checkout's own
bench and supervisor packages are the ones imported, whichever commit it is."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, ".")  # the checkout in the working directory, not this file's


async def main(n: int) -> None:
    from bench.common import Context, Databases, Processes, admin_dsn
    from bench.throughput import drain

    with admin_dsn() as admin, tempfile.TemporaryDirectory(prefix="pc-ab-") as tmp:
        dbs = Databases(admin)
        await dbs.create()
        procs = Processes(Path(tmp))
        try:
            ctx = Context(dbs=dbs, procs=procs, workdir=Path(tmp), smoke=False)
            r = await drain(ctx, 2, n)
        finally:
            procs.stop_all()
            await dbs.drop()
    out = {"runs_per_s": r["runs_per_s"], "ok": r["exactly_once"]["ok"]}
    print(json.dumps({**out, "cpu_ms_per_run": r["cpu_ms_per_run"]}))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
