"""SIGHUP: the handler files and the live settings read again and applied, all or nothing
(DESIGN.md, Reload).

A reload reads the configuration and every handler path first; a problem in either (a
config error, a handler entry rejected that the handlers in force did not have) is logged
as `reload_failed`, naming the file and the problem, and nothing changes. Otherwise the new
handlers and live settings are applied in one step (compose.Services.apply), `reloaded`
says what changed, and the worker row advertises the new types. Children running are left
alone; runs of a removed type claimed before the reload finish with its old handler.

Signals are coalesced: one that arrives during a reload asks for one more after it (the
files may have changed after they were read), however many arrive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from supervisor.compose import Services, reloaded_config
from supervisor.core.config import Config
from supervisor.core.db import DB_ERRORS
from supervisor.core.fleet import fleet
from supervisor.core.log import log_event
from supervisor.core.store import Store
from supervisor.registry import Registry, Rejected
from supervisor.sdnotify import Notifier

log = logging.getLogger("punchclock.supervisor")


def log_rejected(
    rejected: Iterable[Rejected],
    event: str = "handler_rejected",
    level: int = logging.WARNING,
    **extra: Any,
) -> None:
    """One event per handler entry the registry rejected, naming its source and why."""
    for r in rejected:
        log_event(log, event, level=level, source=r.source, type=r.type, reason=r.reason, **extra)


def describe(types: list[str]) -> str:
    """systemd's STATUS= while serving."""
    return f"supervising {', '.join(types) or 'nothing'}"


class Reloader:
    """Runs the reloads `asked` requests (set by the SIGHUP handler), one at a time."""

    def __init__(
        self,
        cfg: Config,
        registry: Registry,
        services: Services,
        store: Store,
        *,
        owner: str,
        asked: asyncio.Event,
        read_config: Callable[[], Config],
        notifier: Notifier,
        on_applied: Callable[[Config, Registry], None],
    ) -> None:
        self.cfg = cfg
        self.registry = registry
        self.services = services
        self.store = store
        self.owner = owner
        self.asked = asked
        self.read_config = read_config
        self.notifier = notifier
        self.on_applied = on_applied
        self._advertise: list[str] | None = None  # types the worker row must still get

    async def run(self) -> None:
        backoff = 0.2
        while True:
            if self._advertise is None:
                await self.asked.wait()
            else:  # the database refused the last advertisement: again after a while
                try:
                    async with asyncio.timeout(backoff):
                        await self.asked.wait()
                except TimeoutError:
                    pass
            if self.asked.is_set():
                self.asked.clear()  # from here on, a signal asks for one more reload
                self.notifier.reloading()
                try:
                    await self.reload()
                finally:
                    self.notifier.ready(describe(self.registry.types))
            if self._advertise is not None:
                try:
                    await fleet(self.store).offer_types(self.owner, self._advertise)
                    self._advertise, backoff = None, 0.2
                except DB_ERRORS as exc:
                    log_event(
                        log, "reload_advertise_failed", level=logging.WARNING, error=repr(exc)
                    )
                    backoff = min(backoff * 2, 10.0)

    def _read(self) -> tuple[Config, list[str], list[str], Registry]:
        """The configuration and the handler paths read again; nothing applied yet."""
        cfg, live, restart = reloaded_config(self.cfg, self.read_config())
        return cfg, live, restart, self.registry.reload(cfg.handlers)

    async def reload(self) -> bool:
        """One reload; False: refused (logged), the handlers and settings in force stay."""
        try:  # files, and maybe user lookups: off the loop, which renews the leases
            cfg, live, restart, loaded = await asyncio.to_thread(self._read)
        except Exception as exc:  # a config error, an unreadable path: nothing changes
            log_event(
                log,
                "reload_failed",
                level=logging.ERROR,
                source="configuration",
                reason=str(exc) or repr(exc),
                detail="nothing changed: the handlers and settings in force stay",
            )
            return False
        problems = self.registry.problems_new_in(loaded)
        if problems:
            log_rejected(
                problems,
                "reload_failed",
                logging.ERROR,
                detail="nothing changed: the handlers and settings in force stay",
            )
            return False
        in_flight = {e.type for e in self.services.executor.inflight.values()}
        registry = self.registry.succeeded_by(loaded, in_flight)
        changes = self.registry.changes(registry)
        self.cfg, self.registry = cfg, registry
        self.services.apply(cfg, registry)
        logging.getLogger().setLevel(cfg.log_level.upper())
        self.on_applied(cfg, registry)
        log_rejected(loaded.rejected)  # tolerated at start-up, and still there
        if restart:
            log_event(
                log,
                "reload_needs_restart",
                level=logging.WARNING,
                settings=restart,
                detail="changed in the configuration, kept as they were until a restart",
            )
        log_event(
            log,
            "reloaded",
            added=changes["added"],
            removed=changes["removed"],
            changed=changes["changed"],
            settings=live,
            types=registry.types,
            retiring=sorted(registry.retiring),
        )
        if changes["added"] or changes["removed"]:
            self._advertise = registry.types
        return True
