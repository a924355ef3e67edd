"""What the tests and bench share around real processes and databases: waiting on a condition
with a deadline, a child process with its JSON log, a migrated template database and copies.

Local tooling only (never imported by the daemon). Failures are AssertionErrors, so a test
reports them as failures and bench as a scenario's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from supervisor.core.db import connect, open_connection
from supervisor.core.migrator import migrate
from supervisor.local.pgchain import with_database

DEADLINE = 30.0


class WaitTimeout(AssertionError):
    """A condition did not hold within its deadline."""


class _Deadline:
    def __init__(self, timeout: float, what: str) -> None:
        self.timeout, self.what = timeout, what
        self.end = time.monotonic() + timeout

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise WaitTimeout(f"timed out after {self.timeout}s waiting for {self.what}")


async def wait_until(
    predicate: Callable[[], Awaitable[Any] | Any],
    timeout: float = DEADLINE,  # noqa: ASYNC109 (a polling deadline, named in the failure)
    what: str = "condition",
    every: float = 0.02,
) -> Any:
    """Poll a predicate (async or plain) until it is truthy and return that value;
    WaitTimeout after `timeout` seconds. An exception from the predicate ends the wait."""
    deadline = _Deadline(timeout, what)
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        deadline.check()
        await asyncio.sleep(every)


def wait_until_blocking(
    predicate: Callable[[], Any],
    timeout: float = DEADLINE,
    what: str = "condition",
    every: float = 0.02,
) -> Any:
    """wait_until for code without an event loop (the predicate is plain)."""
    deadline = _Deadline(timeout, what)
    while not (value := predicate()):
        deadline.check()
        time.sleep(every)
    return value


class LoggedProcess:
    """A child OS process whose stdout and stderr go to a file of JSON log lines.

    The log is parsed on demand; lines that are not JSON (a traceback, a half-written last
    line) are passed over. Stopping has a deadline and ends in SIGKILL.
    """

    def __init__(self, name: str, popen: subprocess.Popen[bytes], log_path: Path) -> None:
        self.name = name
        self.popen = popen
        self.log_path = log_path

    @classmethod
    def spawn(
        cls,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        cwd: Path,
        env: Mapping[str, str] | None = None,
    ) -> Self:
        """Start `argv` logging to `log_path`, with our environment less its PUNCHCLOCK_*
        settings (none may leak into the child) plus `env`."""
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCHCLOCK_")}
        child_env.update(env or {})
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                argv, cwd=cwd, env=child_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        return cls(name, popen, log_path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, pid={self.pid}, rc={self.popen.poll()})"

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    # ------------------------------------------------------------ the log

    def log_text(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")
        return ""

    def events(self, event: str | None = None, **match: Any) -> list[dict[str, Any]]:
        """Parsed JSON log lines, optionally only `event` with fields equal to `match`."""
        out = []
        for line in self.log_text().splitlines():
            if not line.startswith("{") or (event is not None and f'"{event}"' not in line):
                continue  # not JSON, or surely not the event (cheap: logs grow large)
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if event is not None and rec.get("event") != event:
                continue
            if all(rec.get(k) == v for k, v in match.items()):
                out.append(rec)
        return out

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    async def wait_event(
        self,
        event: str,
        timeout: float = 15.0,  # noqa: ASYNC109 (as wait_until's)
        **match: Any,
    ) -> dict[str, Any]:
        """The first `event` with fields equal to `match`; AssertionError with the log's
        tail when the process exits first or `timeout` passes."""

        def found() -> dict[str, Any] | None:
            running = self.running  # before reading: an exited process's log is complete
            recs = self.events(event, **match)
            if recs:
                return recs[0]
            if not running:
                raise AssertionError(f"{self} exited waiting for {event}:\n{self.tail()}")
            return None

        what = f"{self.name}: {event}" + (f" {match}" if match else "")
        try:
            rec: dict[str, Any] = await wait_until(found, timeout, what)
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\n{self.tail()}") from None
        return rec

    # ------------------------------------------------------------ signals and the exit

    def send(self, sig: int) -> None:
        if self.running:  # not yet reaped, so the pid is still this process's
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        """The exit status within `timeout` seconds, else AssertionError (it is killed)."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise AssertionError(
                f"{self.name} did not exit within {timeout}s:\n{self.tail()}"
            ) from None

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM (after SIGCONT, in case it is stopped) and wait() for the exit."""
        self.send(signal.SIGCONT)
        self.send(signal.SIGTERM)
        return self.wait(timeout)


class TemplateDatabase:
    """A database migrated once, and throwaway copies of it (`CREATE DATABASE ... TEMPLATE`,
    tens of milliseconds each), on the server of an admin DSN. Names start with `prefix`."""

    def __init__(self, admin_dsn: str, prefix: str = "pc_") -> None:
        self.admin_dsn = admin_dsn
        self.prefix = prefix
        self.name = f"{prefix}tpl_{os.getpid()}"

    async def execute(self, sql: str) -> None:
        """One statement on a connection of its own to the admin database."""
        conn = await open_connection(self.admin_dsn)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    async def create(self) -> None:
        """(Re)create the template and apply every migration to it."""
        await self.drop()
        await self.execute(f'CREATE DATABASE "{self.name}"')
        conn = await connect(with_database(self.admin_dsn, self.name))
        try:
            await migrate(conn)
        finally:
            await conn.close()

    async def drop(self) -> None:
        await self.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    @contextlib.asynccontextmanager
    async def copy(self, tag: str = "t") -> AsyncIterator[str]:
        """A fresh copy's DSN; the copy is dropped afterwards, with its sessions."""
        name = f"{self.prefix}{tag}_{uuid.uuid4().hex[:12]}"
        await self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"')
        try:
            yield with_database(self.admin_dsn, name)
        finally:
            await self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
