"""The listener service: a LISTEN connection of its own that wakes the claimer on NOTIFY."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import asyncpg

from supervisor.core.db import DB_ERRORS, WRITABLE_PROBE, open_listener
from supervisor.core.log import log_event
from supervisor.core.sql import WAKE_CHANNEL
from supervisor.loop import Loop, Pass

log = logging.getLogger("punchclock.listener")
# The connection is checked every second at no cost (is it closed?) and probed with a
# statement this often (silent, or its server no longer takes writes): a probe a second was
# most of an idle host's transactions.
PROBE_EVERY = 10.0


class Listener(Loop):
    """Holds a LISTEN connection on a writable server and wakes the claimer on NOTIFY.

    LISTEN is re-armed after every reconnect. A closed connection is noticed within a second;
    every PROBE_EVERY seconds it is probed: a silent one, or one whose server stopped
    accepting writes (promoted elsewhere, fenced read-only; NOTIFYs are sent where the writes
    go), is dropped and replaced, the host chosen by the DSN's target_session_attrs. A wake
    (payload None) follows each (re)connect: notifications may have been missed meanwhile.
    """

    name = "listener"

    def __init__(self, dsn: str, on_wake: Callable[[str | None], None]) -> None:
        super().__init__(1.0, jitter=0.0)
        self.dsn = dsn
        self.on_wake = on_wake
        self.conn: asyncpg.Connection | None = None
        self._probe_at = 0.0

    def listening(self) -> bool:
        """Whether a LISTEN connection is up (else the claimer polls at the fleet's rate)."""
        return self.conn is not None and not self.conn.is_closed()

    async def run_once(self) -> Pass:
        if self.conn is not None:
            if await self._usable(self.conn):
                return Pass()
            self.conn.terminate()
            self.conn = None
        conn, port = await open_listener(self.dsn, WAKE_CHANNEL, self.on_wake, step_seconds=5)
        self.conn = conn
        self._probe_at = time.monotonic() + PROBE_EVERY
        log_event(log, "listener_connected", port=port)
        self.on_wake(None)  # notifications may have been missed while disconnected
        return Pass()

    async def _usable(self, conn: asyncpg.Connection) -> bool:
        if conn.is_closed():
            reason = "closed"
        elif time.monotonic() < self._probe_at:
            return True
        else:
            self._probe_at = time.monotonic() + PROBE_EVERY
            try:
                if await conn.fetchval(WRITABLE_PROBE, timeout=5):
                    return True
                reason = "read_only"
            except DB_ERRORS as exc:
                reason = repr(exc)
        log_event(log, "listener_lost", level=logging.WARNING, reason=reason)
        return False

    async def close(self) -> None:
        if self.conn is not None and not self.conn.is_closed():
            await self.conn.close(timeout=2)
