"""`punchclock up`: the whole system on one machine, for trying it and for development.

Starts (or reuses) an embedded PostgreSQL when no database URL is given, migrates, creates
demo jobs, then runs the API and, once it listens, one supervisor, as child processes (the
demo's health check runs at the next minute and must find the API). Ctrl-C drains and
stops everything; if `up` itself is killed, watchdog processes (watchdog.py) stop its children
the same way (SIGTERM, SIGKILL if they outlast the drain) and the database.

The terminal keeps the banner, warnings and failed runs: the API's access log goes to a file
(supervisor/upapi.py). SIGHUP is passed on to the supervisor (it reloads its handlers),
unless the terminal `up` started in has hung up: then `up` stops as for Ctrl-C. One `up` at
a time holds an embedded data directory (`<data dir>.up`, with its pid): a second says so
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from api.client import DEFAULT_URL as DEFAULT_API_URL
from supervisor.core import jobs
from supervisor.core.config import Config, parse_listen
from supervisor.core.db import connect
from supervisor.core.errors import PunchclockError
from supervisor.core.migrator import migrate
from supervisor.core.planning import PlanLimits
from supervisor.core.secretfile import ensure_dir, generated_admin_token, state_dir
from supervisor.core.store import Store
from supervisor.local.pgbin import IncompatibleDataDir, PgServerError
from supervisor.local.plumbing import WaitTimeout, wait_until_blocking
from supervisor.local.watchdog import watch_line
from supervisor.proc import parentwatch

_WAYS_OUT = (
    "start afresh in another directory (--data-dir DIR), upgrade this one with pg_upgrade, "
    "install PostgreSQL {major}'s server, or remove {data_dir} (its data is lost)"
)

ACCESS_LOG = "api-access.log"  # in the state directory, beside admin-token

# How long the supervisor waits for the API to listen before it starts anyway (the API is
# not needed to run jobs; only the demo's health check calls it).
API_START_TIMEOUT = 30.0
DEMO_JOBS: list[dict[str, Any]] = [
    {
        "name": "demo-every-10-seconds",
        "type": "echo",
        "cron": "*/10 * * * * *",
        "payload": {"hello": "punchclock"},
    },
    {
        "name": "demo-berlin-nightly",
        "type": "echo",
        "cron": "0 2 * * *",
        "timezone": "Europe/Berlin",
    },
    {
        "name": "demo-api-health",
        "type": "http_check",
        "cron": "* * * * *",
        "payload": {"url": "http://{api}/healthz"},
    },
]


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # Own session: Ctrl-C reaches `up` alone, which then stops the children in order.
    # SIGHUP ignored until the child installs its own handler (the supervisor: a reload);
    # a forwarded one that came earlier would have ended it. Ours is restored at once.
    ours = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return subprocess.Popen(argv, env=env, start_new_session=True)
    finally:
        signal.signal(signal.SIGHUP, ours)


class DatabaseUnreachable(PunchclockError):
    """`up` could not connect to its database (refused, unknown database, bad password)."""


class AlreadyUp(PgServerError):
    """Another `punchclock up` runs on this data directory."""


def _hold_data_dir(data_dir: Path) -> int:
    """Lock `<data_dir>.up` for this `up` and write our pid in it (emptied at exit); the fd
    (closed: released).

    The embedded server's own lock waits (a watchdog may still be stopping a server there);
    this one answers at once, naming the `up` that holds it."""
    path = data_dir.with_name(data_dir.name + ".up")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise AlreadyUp(
            f"another punchclock up (pid {holder}) is running on {data_dir}: stop it "
            "(Ctrl-C in its terminal), or start this one with --data-dir DIR and --api-listen"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


async def _prepare(dsn: str, api: str, demo: bool) -> list[str]:
    try:
        conn = await connect(dsn)
    except Exception as exc:  # as `punchclock check` does: the user's to fix, no traceback
        raise DatabaseUnreachable(f"cannot connect to the database: {exc}") from None
    try:
        await migrate(conn)
        store = Store(conn)
        created = []
        for spec in DEMO_JOBS if demo else []:
            body = dict(spec)
            if "payload" in body:
                body["payload"] = {
                    k: v.replace("{api}", api) if isinstance(v, str) else v
                    for k, v in body["payload"].items()
                }
            existing = await store.get_job_by_name(spec["name"])
            if existing is None:
                await jobs.create_job(store, jobs.validate_job(body), PlanLimits())
                created.append(spec["name"])
            elif existing.spec.payload != body.get("payload", {}):
                # The API may listen elsewhere this time: keep the health check pointed at it.
                await jobs.update_job(
                    store, existing.id, {"payload": body["payload"]}, PlanLimits()
                )
        return created
    finally:
        await conn.close()


def run_up(cfg: Config, *, demo: bool = True, data_dir: Path | None = None) -> int:
    """Raises PgServerError (the CLI prints it) when the embedded server cannot start, and
    InsecureFile when the state directory or a secret in it could have been planted.

    Everything `up` keeps (the admin token; by default the embedded cluster and its password
    file) is in this user's state directory (secretfile.state_dir), checked before use."""
    from supervisor.local.pgserver import LocalPostgres

    # Before anything else: the API child finds the same token there (no secret in its env).
    token_file = None if cfg.api_tokens else generated_admin_token()[0]
    banner = _Banner(token_file, ensure_dir(state_dir()) / ACCESS_LOG)
    dsn = cfg.database_url
    embedded = None if dsn else (data_dir or ensure_dir(state_dir()) / "pg").absolute()
    held = None if embedded is None else _hold_data_dir(embedded)
    server = None
    try:
        if embedded is not None:
            print(f"starting embedded PostgreSQL in {embedded} ...", flush=True)
            server = LocalPostgres(embedded, persistent=True)
            try:
                dsn = server.start()
            except IncompatibleDataDir as exc:
                raise IncompatibleDataDir(exc.data_dir, exc.major, exc.found, _WAYS_OUT) from None
        host, port = parse_listen(cfg.api_listen)
        api = f"{host}:{port}"
        banner.created = asyncio.run(_prepare(dsn, api, demo))
        # Configured api_tokens win (the API child reads the same configuration); else the API
        # child serves the generated token, reading it from token_file itself.
        return _run_children(cfg, dsn, api, banner)
    finally:
        if server is not None:
            server.stop()
            print("embedded PostgreSQL stopped", flush=True)
        if held is not None:  # last, as the server's own lock
            os.ftruncate(held, 0)  # no stale pid for `kill -HUP "$(cat pg.up)"` to hit
            os.close(held)


def _run_children(cfg: Config, dsn: str, api: str, banner: _Banner) -> int:
    handlers = list(cfg.handlers) or [str(resources.files("handlers"))]
    env = {**os.environ, "PUNCHCLOCK_DATABASE_URL": dsn, "PUNCHCLOCK_API_LISTEN": api}
    base = [sys.executable, "-m", "supervisor"]
    supervise = [*base, "supervise", *[a for h in handlers for a in ("--handlers", h)]]
    if cfg.metrics_listen:
        supervise += ["--metrics-listen", cfg.metrics_listen]
    drain = cfg.drain_timeout + cfg.kill_grace + 5
    # Started first, it stops the children as below if `up` dies however it dies.
    watchdog = parentwatch.spawn("supervisor.local.watchdog", [], start_new_session=True)
    feed = watchdog.stdin
    assert feed is not None
    children: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        children[name] = child = _spawn(argv, env)
        feed.write(watch_line(child.pid, [(signal.SIGTERM, drain), (signal.SIGKILL, 0)]))
        return child

    stop = {"signal": 0}
    had_terminal = _has_terminal()

    def on_signal(signum: int, _: Any) -> None:
        stop["signal"] = signum

    def on_hangup(signum: int, _: Any) -> None:
        if had_terminal and not _has_terminal():  # our terminal closed: stop, as it used to
            stop["signal"] = signum
        elif (sup := children.get("supervisor")) is not None and sup.poll() is None:
            sup.send_signal(signal.SIGHUP)  # `punchclock supervise` reloads its handlers

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    old[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
    try:
        access = [sys.executable, "-m", "supervisor.upapi", str(banner.access_log)]
        api_proc = start("api", [*access, "api"])
        # The supervisor once the API listens: the demo's health check, due at the next
        # minute, found it not yet listening (exit 75, a failed first attempt in the demo).
        _wait_listening(api, api_proc, lambda: bool(stop["signal"]))
        if not stop["signal"] and api_proc.poll() is None:
            start("supervisor", supervise)
            banner.show(api, handlers)
        failed = None
        while not stop["signal"] and failed is None:
            failed = next((n for n, p in children.items() if p.poll() is not None), None)
            time.sleep(0.2)  # a supervision poll, not synchronisation
        for p in children.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + drain
        for p in children.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if failed is not None:
            print(f"punchclock up: {failed} {exit_text(children[failed].returncode)}", flush=True)
            return 1
        return 0
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        _close(watchdog)


def _wait_listening(api: str, proc: subprocess.Popen[bytes], stopped: Callable[[], bool]) -> None:
    """Until `api` (HOST:PORT) takes connections, `proc` exits, `stopped()` or the timeout."""
    host, port = parse_listen(api)
    if host in ("0.0.0.0", "::"):  # every interface: loopback is one of them
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"

    def settled() -> bool:
        if proc.poll() is not None or stopped():
            return True
        try:
            socket.create_connection((host, port), timeout=0.5).close()
        except OSError:
            return False
        return True

    with contextlib.suppress(WaitTimeout):  # the supervisor starts anyway
        wait_until_blocking(settled, API_START_TIMEOUT, "the API to listen", every=0.05)


def _close(watchdog: subprocess.Popen[bytes]) -> None:
    # EOF: it exits at once, after stopping any child still running (an error cut `up` short).
    assert watchdog.stdin is not None
    watchdog.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(1)


def exit_text(returncode: int) -> str:
    """How a child ended: "exited with status 3", "was killed by SIGKILL"."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


def _has_terminal() -> bool:
    """Whether this process still has a controlling terminal (none once it hung up)."""
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
    except OSError:
        return False
    return True


def cli_command() -> str:
    """How to run `punchclock` the way this `up` was run: a bare `punchclock` only when that
    is this installation's on PATH (from a clone it is `.venv/bin/punchclock`, not on PATH)."""
    script = Path(sys.executable).parent / "punchclock"
    if not script.exists():
        return f"{shlex.quote(sys.executable)} -m supervisor"
    found = shutil.which("punchclock")
    if found and os.path.samefile(found, script):
        return "punchclock"
    return shlex.quote(str(script))


class _Banner:
    def __init__(self, token_file: Path | None, access_log: Path) -> None:
        self.token_file, self.access_log = token_file, access_log
        self.created: list[str] = []  # the demo jobs this start created

    def show(self, api: str, handlers: list[str]) -> None:
        print(self.text(api, handlers), flush=True)

    def text(self, api: str, handlers: list[str]) -> str:
        # The file, not the token: scrollback and captured output are not secret stores.
        token_file = self.token_file
        where = f"stored in {token_file}" if token_file else "one of your api_tokens"
        token = f"$(cat {token_file})" if token_file else "$TOKEN"
        url = f"http://{api}"
        flag = "" if url == DEFAULT_API_URL else f" --api-url {url}"
        return f"""
punchclock is up.
  dashboard    {url}/ui/            (log in with the admin token)
  API          {url}/v1/jobs        (OpenAPI: {url}/openapi.json)
  metrics      {url}/metrics        readiness: {url}/readyz
  admin token  {where}
  access log   {self.access_log}
  handlers     {", ".join(handlers)}
  demo jobs    {", ".join(self.created) or "(already present)"}

Try:
  curl -s -H "Authorization: Bearer {token}" "{url}/v1/runs?limit=5"
  {cli_command()} runs list{flag}

Here: warnings and failed runs (the API's requests go to the access log).
Ctrl-C stops everything.
"""
