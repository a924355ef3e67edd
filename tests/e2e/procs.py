"""The e2e harness: real `python -m supervisor supervise` processes, real signals.

Each supervisor gets its own handler TOML (the types it offers) and its own log file under
tmp_path; its JSON log lines are parsed on demand. Stopping always has a deadline and
ends in SIGKILL, so a hung supervisor fails its test instead of hanging the suite.
It also answers "is this process gone?" for pids the handlers report: zombies count as
gone, and orphans this test process adopted as a subreaper are reaped on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from supervisor.local.pgbin import _as_user, _server_user, find_bindir
from supervisor.local.pgserver import LocalPostgres
from supervisor.local.plumbing import LoggedProcess

from ..api_support import TOKENS, http
from ..helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = Path(__file__).resolve().parent / "handlers"
LEASE_TTL = 2.0
_PR_SET_CHILD_SUBREAPER = 36

# Pids of supervisors a Popen owns: the only children of ours that reap_adopted() leaves alone.
_managed: set[int] = set()


def handler_argv(name: str) -> list[str]:
    """How a supervisor runs test handler `name`: our interpreter, isolated, no site.

    Not the `#!/usr/bin/env python3` line: that may be a slow shim (pyenv) or another Python.
    """
    return [sys.executable, "-I", "-S", str(HANDLERS / f"{name}.py")]


def write_handlers_toml(
    path: Path, types: dict[str, str], settings: dict[str, str] | None = None
) -> Path:
    """A handler TOML offering each type in `types` (type name -> test handler name), with
    `settings[type]` (TOML lines) added to its table."""
    lines = []
    for type_name, handler in types.items():
        # JSON string syntax is valid TOML basic-string syntax.
        lines += [f"[handlers.{type_name}]", f"command = {json.dumps(handler_argv(handler))}"]
        lines += [(settings or {}).get(type_name, ""), ""]
    path.write_text("\n".join(lines))
    return path


class Supervisor(LoggedProcess):
    """One supervisor (or API) OS process and its log file, named by its worker id."""

    @property
    def worker_id(self) -> str:
        return self.name

    def frozen(self) -> bool:
        """Stopped by SIGSTOP (and not continued)."""
        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_STOPPED
        except psutil.NoSuchProcess:
            return False

    def wait(self, timeout: float) -> int:
        try:
            return super().wait(timeout)
        finally:
            _managed.discard(self.pid)  # reaped: a new process with this pid is no Popen's

    async def wait_exit(self, timeout: float) -> int:
        """Like wait(), but polling, so the test's event loop keeps serving meanwhile."""
        with contextlib.suppress(AssertionError):
            await wait_for(lambda: not self.running, timeout, f"{self.worker_id} to exit")
        return self.wait(0)


class Cluster:
    """Starts supervisors against one database and makes sure all of them end."""

    def __init__(self, tmp_path: Path, dsn: str) -> None:
        self.tmp_path = tmp_path
        self.dsn = dsn
        self.supervisors: list[Supervisor] = []

    def start(
        self,
        worker_id: str,
        types: Iterable[str] | dict[str, str] = ("append",),
        *,
        concurrency: int = 4,
        lease_ttl: float = LEASE_TTL,
        drain_timeout: float = 5.0,
        kill_grace: float = 0.5,
        poll_interval: float = 1.0,
        dsn: str | None = None,
        metrics_port: int | None = None,
        extra_args: Sequence[str] = (),
        settings: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> Supervisor:
        """Start a supervisor offering `types` (type -> handler; a bare name is both), with
        `settings` (type -> TOML lines) in their handler tables; `env`: supervisor settings
        as environment variables (PUNCHCLOCK_*), since ours never leak into it."""
        mapping = dict(types) if isinstance(types, dict) else {t: t for t in types}
        path = self.tmp_path / f"handlers-{worker_id}.toml"
        toml = write_handlers_toml(path, mapping, settings)
        log_path = self.tmp_path / f"{worker_id}.log"
        argv = [
            sys.executable,
            "-m",
            "supervisor",
            "supervise",
            "--database-url",
            dsn or self.dsn,
            "--handlers",
            str(toml),
            "--lease-ttl",
            str(lease_ttl),
            "--concurrency",
            str(concurrency),
            "--worker-id",
            worker_id,
            "--drain-timeout",
            str(drain_timeout),
            "--kill-grace",
            str(kill_grace),
            "--poll-interval",
            str(poll_interval),
            "--log-runs",  # the tests read run_started / run_succeeded
            "all",
        ]
        if metrics_port is not None:
            argv += ["--metrics-listen", f"127.0.0.1:{metrics_port}"]
        argv += extra_args
        return self._spawn(worker_id, argv, log_path, env)

    def start_api(self, port: int, *, dsn: str | None = None) -> Supervisor:
        """Start the API process on 127.0.0.1:`port` with api_support's tokens (callers send
        ADMIN); its log and its exit are handled like a supervisor's (worker id "api")."""
        argv = [sys.executable, "-m", "supervisor", "api", "--database-url", dsn or self.dsn]
        argv += ["--listen", f"127.0.0.1:{port}", "--api-token", TOKENS[0]]
        return self._spawn("api", argv, self.tmp_path / "api.log")

    def _spawn(
        self, worker_id: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None
    ) -> Supervisor:
        sup = Supervisor.spawn(worker_id, argv, log_path, cwd=ROOT, env=env)
        _managed.add(sup.pid)
        self.supervisors.append(sup)
        return sup

    async def start_ready(self, worker_id: str, *args: Any, **kw: Any) -> Supervisor:
        """start() and wait until it serves (signal handlers installed, worker row written)."""
        sup = self.start(worker_id, *args, **kw)
        await sup.wait_event("supervisor_started", timeout=20)
        return sup

    def stop_all(self) -> None:
        """Teardown: SIGTERM everything still running, SIGKILL what does not exit in time."""
        for sup in self.supervisors:
            sup.send(signal.SIGCONT)
            sup.send(signal.SIGTERM)
        for sup in self.supervisors:
            with contextlib.suppress(AssertionError):
                sup.wait(15.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(port: int) -> dict[str, float]:
    """A supervisor's /metrics as {"name{labels}": value} (blocking: call via to_thread)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


# ---------------------------------------------------------------- processes the handlers report


def set_subreaper(on: bool) -> None:
    """Adopt orphaned descendants, so a leaked grandchild stays our child and gets noticed.

    Without it an orphan is reparented to init and the no-stray-children check is blind to
    exactly the processes these tests are about (a killed supervisor's children).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_adopted() -> None:
    """Reap zombie children that no Popen owns (orphans adopted while we are a subreaper)."""
    for child in psutil.Process().children():
        if child.pid in _managed:
            continue
        with contextlib.suppress(psutil.Error, ChildProcessError):
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)


class Proc:
    """A process a handler reported, watched by pid and start time (pids get reused)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._handle: psutil.Process | None = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self._handle = None  # already gone when we first looked

    def __repr__(self) -> str:
        return f"Proc({self.pid}, gone={self.gone()})"

    def gone(self) -> bool:
        reap_adopted()
        if self._handle is None:
            return True
        try:
            return not self._handle.is_running() or self._handle.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True


def watch(pids: Iterable[int]) -> list[Proc]:
    return [Proc(pid) for pid in pids]


async def wait_gone(procs: list[Proc], timeout: float, what: str) -> int:
    """Wait until every process is gone; returns time.time_ns() when that was first seen.

    The stamp is an upper bound of the moment the last of them died (polled every 20 ms).
    """
    await wait_for(lambda: all(p.gone() for p in procs), timeout, f"{what} to be gone: {procs}")
    return time.time_ns()


def read_pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()]


def readyz(port: int) -> int:
    """The HTTP status of a supervisor's /readyz, 0 when it does not answer (blocking)."""
    try:
        return http(f"http://127.0.0.1:{port}/readyz")[0]
    except OSError:
        return 0


# ---------------------------------------------------------------- executions stamp.py reports


@dataclass
class Execution:
    """One execution of a run as handlers/stamp.py recorded it (its own clock, not ours)."""

    run_id: int
    attempt: int
    lease_token: int
    pid: int
    ppid: int  # the supervisor that started it
    start_ns: int
    end_ns: int | None = None  # None: it never reached its end (killed, or still running)

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_ns)


class PidMonitor:
    """An observer that trusts no punchclock code: it reads the stamps handlers/stamp.py
    writes and polls each reported pid, recording the last moment it was surely alive.

    `last_alive[key]` is a time.time_ns() taken *before* a check that found the process
    alive (not a zombie), so the process certainly lived until at least then: a lower bound
    of its death, which makes the overlap check free of false alarms.
    """

    def __init__(self, stamps: Path, interval: float = 0.02) -> None:
        self.stamps = stamps
        self.interval = interval
        self.executions: dict[tuple[int, int], Execution] = {}
        self.last_alive: dict[tuple[int, int], int] = {}
        self.gone_at: dict[tuple[int, int], int] = {}  # first seen gone (an upper bound)
        self._handles: dict[tuple[int, int], psutil.Process | None] = {}
        self._offset = 0
        self._task: asyncio.Task[None] | None = None

    def read(self) -> None:
        """Take in the stamps written since the last read (only whole lines)."""
        if not self.stamps.exists():
            return
        with open(self.stamps, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        for line in whole.decode().splitlines():
            kind, *fields = line.split(",")
            run_id, attempt, token, pid, ppid, ns = map(int, fields)
            if kind == "start":
                e = Execution(run_id, attempt, token, pid, ppid, ns)
                self.executions[e.key] = e
                self._handles[e.key] = _handle(pid, ns)
                continue
            for e in self.executions.values():
                if (e.run_id, e.attempt, e.pid, e.end_ns) == (run_id, attempt, pid, None):
                    e.end_ns = ns
                    break
            else:
                raise AssertionError(f"an end without a start: {line}")

    def poll(self) -> None:
        self.read()
        reap_adopted()
        for key, handle in self._handles.items():
            if key in self.gone_at:
                continue
            before = time.time_ns()
            if _alive(handle):
                self.last_alive[key] = before
            else:
                self.gone_at[key] = time.time_ns()

    def alive(self) -> list[Execution]:
        """Executions not yet seen gone (as of the last poll)."""
        return [e for k, e in self.executions.items() if k not in self.gone_at]

    def alive_until(self, e: Execution) -> int:
        """The latest instant `e` is known to have been alive (its start at least)."""
        return max(e.start_ns, e.end_ns or 0, self.last_alive.get(e.key, 0))

    def start(self) -> None:
        async def loop() -> None:
            while True:
                self.poll()
                await asyncio.sleep(self.interval)  # the polling cadence

        self._task = asyncio.get_running_loop().create_task(loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.poll()


def _handle(pid: int, start_ns: int) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        # A pid reused between the stamp and this look would be a younger process.
        return proc if proc.create_time() <= start_ns / 1e9 + 1.0 else None
    except psutil.NoSuchProcess:
        return None


def _alive(handle: psutil.Process | None) -> bool:
    if handle is None:
        return False
    try:
        return handle.is_running() and handle.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---------------------------------------------------------------- a database to break


class ThrowawayPostgres:
    """A cluster of this test's own (never the shared server) that `pg_ctl` restarts and
    stops: pgserver.LocalPostgres starts it; restarts keep its port and settings.

    A postmaster pg_ctl starts is adopted by this test process (the e2e subreaper) and
    outlives LocalPostgres's watchdog's knowledge, so close() stops it with pg_ctl too.
    """

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        # Short path: the unix socket lives in the data dir. Traversable: the server may run
        # as the `postgres` user (we may be root).
        self.tmp = Path(tempfile.mkdtemp(prefix="pcr-", dir="/tmp"))
        self.tmp.chmod(0o755)
        # Commits durable before they are acknowledged, as in production: the throwaway
        # default (synchronous_commit=off) forgets the last acknowledged claims and
        # completions in an immediate restart, and the runs execute again.
        # `settings`: more server settings (max_connections for a fleet or a full server).
        durable = {"synchronous_commit": "on", **(settings or {})}
        self.server = LocalPostgres(self.tmp / "pg", persistent=False, settings=durable)
        self.data_dir = self.server.data_dir
        self.dsn = ""
        self._opts: list[str] = []

    def start(self) -> str:
        self.dsn = self.server.start()
        # The server's own command line, for `pg_ctl start` after a stop (restart reads it).
        argv = shlex.split((self.data_dir / "postmaster.opts").read_text())
        self._opts = argv[3:] if argv[1:2] == ["-D"] else argv[1:]
        return self.dsn

    def restart(self, mode: str) -> None:
        """`pg_ctl restart -m fast|immediate`, waiting until it accepts connections again."""
        self._pg_ctl("restart", "-m", mode)

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("stop", "-m", mode)

    def start_again(self) -> None:
        """`pg_ctl start` after stop(), with the same settings and port."""
        self._pg_ctl("start", "-o", " ".join(shlex.quote(o) for o in self._opts))

    def close(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(AssertionError):
                self._pg_ctl("stop", "-m", "immediate")
        self.server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _pg_ctl(self, *args: str) -> None:
        # -l: the postmaster writes there, not into our pipe (else run() waits for it).
        argv = [str(find_bindir() / "pg_ctl"), *args, "-D", str(self.data_dir), "-w", "-t", "60"]
        argv += ["-l", str(self.data_dir / "pg_ctl.log")]
        as_user = _as_user(_server_user())
        out = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=90, **as_user
        )
        if out.returncode != 0:
            raise AssertionError(f"pg_ctl {' '.join(args)} failed: {out.stdout}{out.stderr}")
