"""A reload's pieces without a database: what a successor registry keeps, which settings
apply live, and the Reloader's all-or-nothing and coalescing (the processes: e2e/test_reload)."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import pytest

from supervisor.compose import Services, reloaded_config
from supervisor.core.config import Config, ConfigError
from supervisor.core.log import _FIELDS
from supervisor.core.store import Store
from supervisor.registry import Registry, load_registry
from supervisor.reload import Reloader
from supervisor.sdnotify import Notifier

from ..helpers import wait_for


def _exe(directory: Path, name: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


def _load(directory: Path) -> Registry:
    return load_registry([str(directory)], switch_problem=lambda: None)


def test_a_successor_keeps_removed_handlers_only_while_runs_may_need_them(tmp_path: Path) -> None:
    _exe(tmp_path, "a")
    _exe(tmp_path, "b")
    first = _load(tmp_path)
    (tmp_path / "b").unlink()
    second = first.succeeded_by(first.reload([str(tmp_path)]), in_flight=set())
    # b is still runnable (a claim sent before the reload may return one) but not offered.
    assert (second.types, sorted(second.handlers), second.retiring) == (["a"], ["a", "b"], {"b"})
    assert first.changes(second) == {"added": [], "removed": ["b"], "changed": []}
    # At the next reload it stays while a run of it is here, and goes once none is.
    again = second.reload([str(tmp_path)])
    assert sorted(second.succeeded_by(again, in_flight={"b"}).handlers) == ["a", "b"]
    third = second.succeeded_by(again, in_flight=set())
    assert (sorted(third.handlers), third.retiring) == (["a"], frozenset())
    # A removed type added back is offered again, with its new definition.
    _exe(tmp_path, "b")
    fourth = second.succeeded_by(second.reload([str(tmp_path)]), in_flight=set())
    assert (fourth.types, fourth.retiring) == (["a", "b"], frozenset())
    assert second.changes(fourth)["added"] == ["b"]


def test_only_new_problems_refuse_a_reload(tmp_path: Path) -> None:
    (tmp_path / "known").write_text("not executable")
    first = _load(tmp_path)
    assert [r.type for r in first.rejected] == ["known"]
    assert first.problems_new_in(first.reload([str(tmp_path)])) == []
    (tmp_path / "fresh").write_text("not executable either")
    [problem] = first.problems_new_in(first.reload([str(tmp_path)]))
    assert problem.source == str(tmp_path / "fresh") and "chmod +x" in problem.reason


def test_live_settings_apply_and_the_others_need_a_restart() -> None:
    old = Config(handlers=("/a",), lease_ttl=30.0, kill_grace=10.0)
    new = replace(old, handlers=("/a", "/b"), kill_grace=2.0, lease_ttl=60.0, concurrency=3)
    cfg, live, restart = reloaded_config(old, new)
    assert (live, restart) == (["handlers", "kill_grace"], ["concurrency", "lease_ttl"])
    assert (cfg.handlers, cfg.kill_grace, cfg.lease_ttl, cfg.concurrency) == (
        ("/a", "/b"),
        2.0,
        30.0,
        0,
    )


@dataclass
class _Executor:
    inflight: dict[int, Any] = field(default_factory=dict)


@dataclass
class _Services:
    executor: _Executor = field(default_factory=_Executor)
    applied: list[tuple[Config, Registry]] = field(default_factory=list)

    def apply(self, cfg: Config, registry: Registry) -> None:
        self.applied.append((cfg, registry))


def _reloader(
    tmp_path: Path, read: Any, services: _Services
) -> tuple[Reloader, asyncio.Event, list[Registry]]:
    _exe(tmp_path, "a")
    cfg = Config(handlers=(str(tmp_path),))
    asked = asyncio.Event()
    seen: list[Registry] = []
    reloader = Reloader(
        cfg,
        _load(tmp_path),
        cast(Services, services),
        cast(Store, None),  # types never change here: nothing is advertised
        owner="w",
        asked=asked,
        read_config=read,
        notifier=Notifier({}),
        on_applied=lambda _cfg, reg: seen.append(reg),
    )
    return reloader, asked, seen


async def test_signals_during_a_reload_ask_for_one_more(tmp_path: Path) -> None:
    reading = threading.Event()
    release = threading.Event()
    reads = 0

    def read() -> Config:  # the first read is held until the test has sent its signals
        nonlocal reads
        reads += 1
        if reads == 1:
            reading.set()
            release.wait(10)
        return Config(handlers=(str(tmp_path),), kill_grace=float(reads))

    services = _Services()
    reloader, asked, _ = _reloader(tmp_path, read, services)
    runner = asyncio.create_task(reloader.run())
    try:
        asked.set()
        assert await asyncio.to_thread(reading.wait, 10)  # the first reload reads
        asked.set()
        asked.set()
        release.set()
        await wait_for(lambda: len(services.applied) == 2, 10, "the second reload")
        assert not asked.is_set() and reads == 2
        assert [cfg.kill_grace for cfg, _ in services.applied] == [1.0, 2.0]
    finally:
        runner.cancel()


async def test_a_config_error_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def read() -> Config:
        raise ConfigError("config file /etc/punchclock/punchclock.toml: Expected '=' (line 3)")

    services = _Services()
    reloader, _, seen = _reloader(tmp_path, read, services)
    with caplog.at_level(logging.INFO, logger="punchclock.supervisor"):
        assert not await reloader.reload()
    assert services.applied == [] and seen == []
    [failed] = [r for r in caplog.records if r.getMessage() == "reload_failed"]
    assert "punchclock.toml: Expected" in failed.__dict__[_FIELDS]["reason"]


def test_the_supervisor_unit_reloads_with_sighup() -> None:
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    unit = (deploy / "punchclock-supervisor.service").read_text()
    assert "\nExecReload=/bin/kill -HUP $MAINPID\n" in unit and "\nType=notify\n" in unit
    # The API ends on SIGHUP: its unit must not offer a reload that would stop it.
    assert "ExecReload=" not in (deploy / "punchclock-api.service").read_text()
