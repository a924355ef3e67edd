"""A throwaway PgBouncer (1.18, Debian's) in front of a PostgreSQL, for tests and benchmarks.

LocalPgBouncer runs `pgbouncer <workdir>/pgbouncer.ini` as a foreground child on 127.0.0.1 (as
the server user when we are root: pgbouncer refuses root, see pgbin._server_user), with a
watchdog (watchdog.py) that stops it when the launcher dies however it dies.

Auth: the userlist holds the server DSN's password in plain text and auth_type is
scram-sha-256: clients log in with SCRAM, and pgbouncer logs in to the server with the same
password (it can only reuse a SCRAM *secret* for a client that itself used SCRAM; the plain
password works for any server auth). A DSN without a password (a trust server) gets a random
one for pgbouncer's clients.

Startup parameters: asyncpg sends user, database and client_encoding, plus each
`server_settings` item and each DSN query parameter it does not know. pgbouncer 1.18 tracks
client_encoding, DateStyle, TimeZone, standard_conforming_strings and application_name and
refuses any other with "unsupported startup parameter" (track_extra_parameters came in
1.20): supervisor.core.db.create_pool's jit, plan_cache_mode and enable_* are refused. To
drop them silently instead, pass settings={"ignore_startup_parameters": "extra_float_digits,
jit,..."} and set them on the server. `extra_float_digits` (sent by JDBC and psycopg2-era
drivers, not asyncpg) is ignored by default.

Transaction pooling with 1.18 means no prepared statements across transactions: connect
asyncpg with statement_cache_size=0.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import csv
import functools
import io
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

import asyncpg

from supervisor.core.db import CONNECT_ERRORS, DB_ERRORS
from supervisor.local.pgbin import _as_user, _server_user, servers
from supervisor.local.pgchain import with_database
from supervisor.local.pgserver import _bindable
from supervisor.local.watchdog import forget_line, watch_line
from supervisor.proc import parentwatch

__all__ = ["LocalPgBouncer", "PgBouncerError", "find_pgbouncer"]

_T = TypeVar("_T")
_POLL = 0.05
# Safe shutdown (PAUSE, then SHUTDOWN: running transactions finish), then SIGKILL. In session
# mode a connected client holds its server connection, so PAUSE waits out the grace.
_STOP_GRACE = 10.0
_STOP_STEPS = [(signal.SIGINT, _STOP_GRACE), (signal.SIGKILL, 1.0)]
# What a probe may meet while pgbouncer starts.
_NOT_YET: tuple[type[BaseException], ...] = (*CONNECT_ERRORS, *DB_ERRORS, TimeoutError)


class PgBouncerError(RuntimeError):
    """The local PgBouncer could not be found, configured, started or queried."""


def find_pgbouncer() -> Path | None:
    """The pgbouncer binary: on PATH, else Debian's (/usr/sbin is not on a user's PATH)."""
    found = shutil.which("pgbouncer")
    if found:
        return Path(found)
    debian = Path("/usr/sbin/pgbouncer")
    return debian if os.access(debian, os.X_OK) else None


class LocalPgBouncer:
    """One pgbouncer for `server_dsn`'s server, its files in `workdir`: pgbouncer.ini,
    userlist.txt (0600, owned by the user pgbouncer runs as), pgbouncer.pid, pgbouncer.log
    (its stderr, appended). As root `workdir`'s parent must be traversable by that user (use
    a 0755 dir under /var/tmp, as for LocalPostgres, not pytest's tmp_path).

    Every database of the server is reachable (`dsn_for`), also ones created later. The
    port is chosen at the first start (`port`, or a free one) and kept by every later start,
    so clients find it at the same address after `restart()` or `kill()` and `start()`.
    `settings` go into the [pgbouncer] section over the defaults below.
    """

    def __init__(
        self,
        workdir: Path,
        server_dsn: str,
        *,
        pool_size: int = 20,
        max_client_conn: int = 2000,
        pool_mode: str = "transaction",
        port: int | None = None,
        max_db_connections: int | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.workdir = Path(workdir).absolute()
        self.pool_size, self.max_client_conn = pool_size, max_client_conn
        self.pool_mode, self.max_db_connections = pool_mode, max_db_connections
        self.settings = dict(settings or {})
        parts = urlsplit(server_dsn)
        if "," in parts.netloc or not parts.hostname:
            raise PgBouncerError("server_dsn must name one host (no multi-host DSN)")
        self._host, self._server_port = parts.hostname, parts.port or 5432
        self._user = unquote(parts.username or "postgres")
        self._password = unquote(parts.password or "") or secrets.token_urlsafe(24)
        self._database = unquote(parts.path.lstrip("/")) or self._user
        self._wanted_port = self._port = port
        self._started = False  # once: the port is then kept
        self._proc: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._os_user: str | None = None
        self.ini_file = self.workdir / "pgbouncer.ini"
        self.log_file = self.workdir / "pgbouncer.log"
        self._userlist = self.workdir / "userlist.txt"
        self._pidfile = self.workdir / "pgbouncer.pid"

    @property
    def port(self) -> int:
        if self._port is None:
            raise PgBouncerError("the local PgBouncer was never started")
        return self._port

    @property
    def dsn(self) -> str:
        """The client DSN of the server DSN's database, through pgbouncer."""
        return self.dsn_for(self._database)

    def dsn_for(self, database: str) -> str:
        """The client DSN of another database of the server, through pgbouncer."""
        auth = f"{quote(self._user, safe='')}:{quote(self._password, safe='')}"
        return with_database(f"postgresql://{auth}@127.0.0.1:{self.port}/", database)

    @property
    def pid(self) -> int | None:
        """The running pgbouncer's pid, else None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def __enter__(self) -> LocalPgBouncer:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> str:
        """Start pgbouncer (idempotent) and wait until a query through it answers; the DSN."""
        if self._proc is not None:
            if self._proc.poll() is None:
                return self.dsn
            self.stop()  # it died under us: clean up, then start afresh
        deadline = time.monotonic() + timeout
        binary = find_pgbouncer()
        if binary is None:
            raise PgBouncerError("no pgbouncer binary: apt-get install pgbouncer")
        self._os_user = _server_user()
        try:
            self._prepare_workdir()
            self._spawn_watchdog()
            self._launch(binary, deadline)
        except BaseException:
            self.stop()
            if not self._started:
                self._port = self._wanted_port
            raise
        self._started = True
        return self.dsn

    def stop(self, grace: float = _STOP_GRACE) -> None:
        """Safe shutdown (SIGINT), SIGKILL after `grace` seconds; idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._end_watchdog(proc)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no goodbye to clients or servers. start() again after."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self.stop()

    def restart(self, timeout: float = 30.0) -> str:
        """stop() then start() on the same port; clients must reconnect."""
        self.stop()
        return self.start(timeout)

    async def show(self, what: str, timeout: float = 10.0) -> list[dict[str, str]]:  # noqa: ASYNC109
        """`SHOW <what>` (POOLS, STATS, CLIENTS, SERVERS, ...) on the admin console, one dict
        per row, every value a string ("" for NULL).

        The console speaks only the simple query protocol and asyncpg returns rows only
        from the extended one ("extended query protocol not supported by admin console"),
        so this runs `psql --csv` (Debian's, or the PostgreSQL binaries LocalPostgres uses).
        """
        if not re.fullmatch(r"[A-Za-z_]+", what):
            raise ValueError(f"not a SHOW subject: {what!r}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(
            PGHOST="127.0.0.1", PGPORT=str(self.port), PGDATABASE="pgbouncer",
            PGUSER=self._user, PGPASSWORD=self._password, PGSSLMODE="disable",
            PGCONNECT_TIMEOUT=str(max(2, int(timeout))),
        )  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            str(_find_psql()), "-X", "--csv", "-c", f"SHOW {what.upper()}",
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise PgBouncerError(f"SHOW {what} took over {timeout}s") from None
        if proc.returncode != 0:
            raise PgBouncerError(f"SHOW {what} failed: {err.decode(errors='replace').strip()}")
        return list(csv.DictReader(io.StringIO(out.decode())))

    def _prepare_workdir(self) -> None:
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._own(self.workdir)
        if self._os_user is not None:
            probe = ["test", "-w", str(self.workdir), "-a", "-x", str(self.workdir)]
            run = subprocess.run(probe, check=False, timeout=10, **_as_user(self._os_user))
            if run.returncode:
                raise PgBouncerError(
                    f"user {self._os_user!r} cannot reach {self.workdir}: as root, put it under "
                    "a world-traversable path such as /var/tmp"
                )
        self._write(self._userlist, f"{_quoted(self._user)} {_quoted(self._password)}\n")
        self._pidfile.unlink(missing_ok=True)  # ours is dead; a stale pid could be reused

    def _config(self, port: int) -> str:
        server = f"host={self._host} port={self._server_port}"
        db = self._database.replace("'", "''")
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(port),
            "unix_socket_dir": "",  # TCP only: no socket file to clash or outlive us
            "auth_type": "scram-sha-256",
            "auth_file": str(self._userlist),
            "admin_users": self._user,  # SHOW ... on the `pgbouncer` admin database
            "pidfile": str(self._pidfile),
            "pool_mode": self.pool_mode,
            "default_pool_size": str(self.pool_size),
            "max_client_conn": str(self.max_client_conn),
            # A burst of clients connecting at once must not overflow the default 128.
            "listen_backlog": str(max(128, self.max_client_conn)),
            "ignore_startup_parameters": "extra_float_digits",
        }
        if self.pool_mode == "transaction":
            settings["server_reset_query"] = ""  # not run in transaction mode anyway
        if self.max_db_connections is not None:
            settings["max_db_connections"] = str(self.max_db_connections)
        settings.update(self.settings)
        lines = ["[databases]"]
        if re.fullmatch(r"\w+", self._database, re.ASCII):  # 1.18 fails on a quoted name
            lines.append(f"{self._database} = {server} dbname='{db}'")
        lines += [f"* = {server}", "", "[pgbouncer]"]  # any database: the same name there
        lines += [f"{k} = {v}".rstrip() for k, v in settings.items()]
        return "\n".join(lines) + "\n"

    def _write(self, path: Path, text: str) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self._own(tmp)
        tmp.rename(path)

    def _own(self, path: Path) -> None:
        if self._os_user is not None:
            shutil.chown(path, self._os_user, _as_user(self._os_user)["group"])

    def _spawn_watchdog(self) -> None:
        # Before pgbouncer, so that none runs unwatched; own session: Ctrl-C is the launcher's.
        with open(self.log_file, "ab") as log:
            self._watchdog = parentwatch.spawn(
                "supervisor.local.watchdog", [], stdout=log, stderr=log, start_new_session=True
            )

    def _end_watchdog(self, proc: subprocess.Popen[bytes] | None) -> None:
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            try:  # nothing left to stop; then EOF lets it exit
                watchdog.communicate(forget_line(proc.pid) if proc else b"", timeout=10)
            except subprocess.TimeoutExpired:
                watchdog.kill()
                watchdog.wait()

    def _launch(self, binary: Path, deadline: float) -> None:
        fixed = self._port is not None  # asked for, or kept from an earlier start
        for _ in range(5):
            port = self._port if self._port is not None else _bindable(0) or 0
            self._write(self.ini_file, self._config(port))
            with open(self.log_file, "ab") as log:
                offset = log.tell()
                self._proc = subprocess.Popen(
                    [str(binary), str(self.ini_file)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    start_new_session=True,  # Ctrl-C on the terminal is the launcher's
                    **_as_user(self._os_user),
                )
            assert self._watchdog is not None and self._watchdog.stdin is not None
            self._watchdog.stdin.write(watch_line(self._proc.pid, _STOP_STEPS))
            self._port = port
            error = _run_sync(self._ready(self._proc, deadline))
            if error is None:
                return
            with open(self.log_file, "rb") as log:
                log.seek(offset)
                output = log.read().decode(errors="replace")
            if not fixed and "in use" in output and self._proc.poll() is not None:
                self._port = None  # someone took the free port between our probe and the bind
                continue
            raise PgBouncerError(f"pgbouncer did not start: {error}\n{output[-2000:]}")
        raise PgBouncerError("could not find a free TCP port for pgbouncer")

    async def _ready(self, proc: subprocess.Popen[bytes], deadline: float) -> str | None:
        """None once a query through pgbouncer answers; else why not (exited, or too late)."""
        last = "no attempt"
        while proc.poll() is None:
            try:
                left = max(deadline - time.monotonic(), 0.5)
                conn = await asyncpg.connect(self.dsn, timeout=left, statement_cache_size=0)
                try:
                    await conn.fetchval("SELECT 1", timeout=left)
                    return None
                finally:
                    await conn.close()
            except _NOT_YET as e:
                last = f"{type(e).__name__}: {e}".removesuffix(": ")
            if time.monotonic() > deadline:
                return f"no answer in time (last: {last}); {self.log_file} ends"
            await asyncio.sleep(_POLL)
        return f"exited with {proc.returncode}"


def _quoted(value: str) -> str:
    """A userlist field: double quotes, inner ones doubled."""
    return '"' + value.replace('"', '""') + '"'


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` to completion from sync code, also when this thread runs an event loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@functools.cache
def _find_psql() -> Path:
    if found := shutil.which("psql"):
        return Path(found)
    for _, bindir in servers():  # the embedded wheel's, Debian's, pg_config's
        if (bindir / "psql").is_file():
            return bindir / "psql"
    raise PgBouncerError("no psql for the admin console: apt-get install postgresql-client")
