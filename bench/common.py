"""What every scenario shares: a PostgreSQL server, a fresh migrated database per scenario,
real supervisor and API processes (always stopped, by pid), percentiles, the result rows
and the table printer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import random
import re
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import psutil

from supervisor.core.db import open_connection
from supervisor.local.pgchain import admin_dsn as pgchain_admin_dsn
from supervisor.local.plumbing import LoggedProcess, TemplateDatabase

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# The benchmarks' API processes take this admin token (a fresh one per bench run).
BENCH_TOKEN = uuid.uuid4().hex
AUTH = {"Authorization": f"Bearer {BENCH_TOKEN}"}


@contextlib.asynccontextmanager
async def dashboard_session(base: str) -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client logged in to the dashboard at `base` as the bench's admin token."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(base + "/ui/login") as resp:  # a session cookie and its CSRF token
            found = re.search(r'name="csrf" value="([^"]+)"', await resp.text())
        form = {"token": BENCH_TOKEN, "next": "/ui/", "csrf": found.group(1) if found else ""}
        async with http.post(
            base + "/ui/login", data=form, headers={"Origin": base}, allow_redirects=False
        ) as resp:
            if resp.status != 303 and resp.status != 302:
                raise RuntimeError(f"dashboard login: HTTP {resp.status}")
        yield http


# ---------------------------------------------------------------- results


@dataclass
class Metric:
    """One row of the table. `ok` is None when the metric has no target."""

    scenario: str
    name: str
    value: float | None
    unit: str
    target: str = ""
    ok: bool | None = None
    baseline: float | None = None  # the same quantity without punchclock, same run
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline


@dataclass
class ScenarioResult:
    name: str
    metrics: list[Metric] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)  # correctness, e.g. exactly-once
    seconds: float = 0.0
    error: str | None = None

    def add(self, name: str, value: float | None, unit: str, **kw: Any) -> Metric:
        m = Metric(self.name, name, value, unit, **kw)
        self.metrics.append(m)
        return m

    def to_json(self) -> dict[str, Any]:
        return {
            "metrics": [{**asdict(m), "ratio": m.ratio} for m in self.metrics],
            "checks": self.checks,
            "details": self.details,
            "seconds": round(self.seconds, 2),
            "error": self.error,
        }


def summary(values: Sequence[float]) -> dict[str, float]:
    """n, p50, p99, max and mean of `values` (nearest-rank percentiles)."""
    if not values:
        return {"n": 0, "p50": math.nan, "p99": math.nan, "max": math.nan, "mean": math.nan}
    s = sorted(values)
    return {
        "n": len(s),
        "p50": percentile(s, 50),
        "p99": percentile(s, 99),
        "max": s[-1],
        "mean": sum(s) / len(s),
    }


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("runs", "jobs", "rows", "requests") or float(value).is_integer():
        return f"{value:,.0f} {unit}".strip()
    if abs(value) >= 100:
        return f"{value:,.0f} {unit}".strip()
    if abs(value) >= 10:
        return f"{value:.1f} {unit}".strip()
    return f"{value:.2f} {unit}".strip()


def table(results: Sequence[ScenarioResult]) -> str:
    """A plain-text table (also valid Markdown) of every metric."""
    header = ("scenario", "metric", "value", "target", "met", "baseline", "ratio")
    rows: list[tuple[str, ...]] = []
    for r in results:
        if r.error:
            rows.append((r.name, "ERROR", r.error.splitlines()[-1][:60], "", "", "", ""))
        for m in r.metrics:
            met = "" if m.ok is None else ("yes" if m.ok else "NO")
            ratio = "" if m.ratio is None else f"{m.ratio:.2f}x"
            base = "" if m.baseline is None else _fmt(m.baseline, m.unit)
            rows.append((r.name, m.name, _fmt(m.value, m.unit), m.target, met, base, ratio))
        for check, passed in r.checks.items():
            rows.append((r.name, f"check: {check}", "pass" if passed else "FAIL", "", "", "", ""))
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(header)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "loadavg_at_start": [round(x, 2) for x in load],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


# ---------------------------------------------------------------- the database server


@contextlib.contextmanager
def admin_dsn() -> Iterator[str]:
    """The tests' fixture chain (supervisor.local.pgchain), with a bench URL taking precedence.
    A throwaway cluster gets PostgreSQL's default shared_buffers (128MB), not the tests' 32MB:
    the dashboard reads a million-run history that a deployment's cache holds."""
    with pgchain_admin_dsn(
        ("PUNCHCLOCK_BENCH_DATABASE_URL", "PUNCHCLOCK_TEST_DATABASE_URL"),
        "pc-bench-",
        settings={"shared_buffers": "128MB"},
    ) as url:
        yield url


async def settle(conn: asyncpg.Connection) -> None:
    """Write out what is dirty (PostgreSQL's buffers, then the kernel's) before a measurement:
    a CHECKPOINT (it needs superuser or pg_checkpoint) and a sync."""
    with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
        await conn.execute("CHECKPOINT")
    await asyncio.to_thread(os.sync)


class Databases(TemplateDatabase):
    """A migrated template, and a fresh copy of it per scenario (dropped afterwards)."""

    def __init__(self, admin: str) -> None:
        super().__init__(admin, prefix="pc_bench_")

    @contextlib.asynccontextmanager
    async def fresh(self, tag: str) -> AsyncIterator[str]:
        async with self.copy(tag) as dsn:
            # Flush what earlier scenarios wrote (their databases, their processes' logs) now:
            # the kernel's writeback 30 s later, or the checkpointer, would otherwise stall
            # this scenario's commits mid-measurement.
            conn = await open_connection(self.admin_dsn)
            try:
                await settle(conn)
            finally:
                await conn.close()
            yield dsn

    async def server_info(self) -> dict[str, Any]:
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            settings = {
                name: await conn.fetchval(f"SHOW {name}")
                for name in ("server_version", "shared_buffers", "synchronous_commit", "fsync")
            }
        finally:
            await conn.close()
        return settings


# ---------------------------------------------------------------- processes


class Proc(LoggedProcess):
    """A supervisor or API OS process with its JSON log file."""

    def rss(self) -> int:
        return int(psutil.Process(self.pid).memory_info().rss)


class Processes:
    """Starts supervisors and API processes and stops every one of them (by pid)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[Proc] = []

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None) -> Proc:
        log_path = self.workdir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        proc = Proc.spawn(name, argv, log_path, cwd=ROOT, env=env)
        self.procs.append(proc)
        return proc

    def supervisor(
        self,
        dsn: str,
        name: str,
        handlers: dict[str, list[str]],
        *,
        concurrency: int = 8,
        lease_ttl: float = 30.0,
        misfire_grace: float | None = None,
        env: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> Proc:
        toml = write_handlers(
            self.workdir / f"handlers-{name}-{uuid.uuid4().hex[:6]}.toml", handlers
        )
        argv = [PYTHON, "-m", "supervisor", "supervise", "--database-url", dsn,
                "--handlers", str(toml), "--concurrency", str(concurrency),
                "--worker-id", name, "--lease-ttl", str(lease_ttl),
                "--drain-timeout", "5", "--kill-grace", "1"]  # fmt: skip
        if misfire_grace is not None:
            argv += ["--misfire-grace", str(misfire_grace)]
        argv += list(extra_args)
        return self._spawn(name, argv, env)

    def api(self, dsn: str, name: str = "api") -> Proc:
        argv = [PYTHON, "-m", "supervisor", "api", "--database-url", dsn,
                "--listen", "127.0.0.1:0", "--api-token", f"admin:bench:{BENCH_TOKEN}"]  # fmt: skip
        return self._spawn(name, argv, None)

    def python(self, name: str, args: list[str]) -> Proc:
        return self._spawn(name, [PYTHON, *args], None)

    def stop(self, proc: Proc, timeout: float = 20.0) -> int | None:
        """Stop `proc`, SIGKILLed when it does not exit within `timeout`: never raises."""
        try:
            return proc.stop(timeout)
        except AssertionError:  # killed
            return proc.popen.returncode
        finally:
            if proc in self.procs:
                self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):  # SIGTERM all first: they drain in parallel
            proc.send(signal.SIGTERM)
        for proc in list(self.procs):
            self.stop(proc)


async def start_supervisors(procs: Processes, count: int, **kw: Any) -> list[Proc]:
    """`count` supervisors named sup-0.., each started and serving."""
    dsn = kw.pop("dsn")
    started = [procs.supervisor(dsn, f"sup-{i}", **kw) for i in range(count)]
    for p in started:
        await p.wait_event("supervisor_started", timeout=60)
    return started


async def api_url(proc: Proc) -> str:
    rec = await proc.wait_event("api_listening", timeout=60)
    return str(rec["urls"][0])


def write_handlers(path: Path, handlers: dict[str, list[str]]) -> Path:
    lines = []
    for type_name, argv in handlers.items():
        lines += [f'[handlers."{type_name}"]', f"command = {json.dumps(argv)}", ""]
    path.write_text("\n".join(lines))
    return path


@dataclass
class Context:
    dbs: Databases
    procs: Processes
    workdir: Path
    smoke: bool


async def timed_request(
    http: aiohttp.ClientSession, method: str, url: str, ok: Callable[[int], bool], **kw: Any
) -> float:
    """Milliseconds for one request read to its end; RuntimeError on a status `ok` refuses."""
    started = time.perf_counter()
    async with http.request(method, url, **kw) as resp:
        await resp.read()
        if not ok(resp.status):
            raise RuntimeError(f"{method} {url}: {resp.status} {await resp.text()}")
    return (time.perf_counter() - started) * 1000


async def interleaved(
    names: Sequence[str],
    rounds: int,
    warmup: int,
    seed: int,
    request: Callable[[str, int], Awaitable[float]],
) -> dict[str, list[float]]:
    """Every round makes each named request once, in a shuffled order so noise hits every
    one alike; `request(name, round)` returns its milliseconds. Those after `warmup`."""
    out: dict[str, list[float]] = {name: [] for name in names}
    rng = random.Random(seed)
    for i in range(warmup + rounds):
        order = list(names)
        rng.shuffle(order)
        for name in order:
            ms = await request(name, i)
            if i >= warmup:
                out[name].append(ms)
    return out
