"""The host's handler registry: type name -> command and how it runs (identity, environment,
limits, concurrency: validated by isolation.py), from TOML files and handler directories.

Handlers are registered on each host, never through the API: the API can only name a type.
Bad entries are collected as `Rejected` with a reason instead of stopping the host, so
`punchclock handlers list` / `check` can show every problem at once.
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisor import isolation
from supervisor.core.model import TYPE, TYPE_RULE
from supervisor.isolation import Identity

_IDENTITY_KEYS = {"user", "group", "supplementary_groups"}
_ENV_KEYS = {"env", "pass_env", "env_files"}
_KEYS = {
    "command", "shell", "timeout_seconds", "cwd", "umask", "concurrency",
    *_IDENTITY_KEYS, *_ENV_KEYS, *isolation.RLIMITS,
}  # fmt: skip
_IGNORED_SUFFIXES = {".md", ".txt", ".toml", ".pyc"}


@dataclass(frozen=True)
class Handler:
    type: str
    argv: tuple[str, ...]
    source: str
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict, repr=False)  # values may be secrets
    timeout_seconds: float | None = None
    identity: Identity | None = None  # run as this user; None: as the supervisor
    umask: int | None = None
    limits: tuple[tuple[str, int], ...] = ()  # (isolation.RLIMITS key, value or UNLIMITED)
    concurrency: int | None = None  # children of this type at once here; None: any slot
    pass_env: tuple[str, ...] = ()  # names copied from the supervisor's environment
    env_files: tuple[str, ...] = ()  # KEY=VALUE files read at each spawn

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The child's environment before env_files and the run variables."""
        return isolation.clean_env(self.identity, self.pass_env, self.env, environ)


@dataclass(frozen=True)
class Rejected:
    source: str
    type: str
    reason: str


@dataclass
class Registry:
    handlers: dict[str, Handler] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)

    @property
    def types(self) -> list[str]:
        return sorted(self.handlers)

    def add(self, handler: Handler) -> None:
        if handler.type in self.handlers:
            first = self.handlers[handler.type].source
            self.rejected.append(
                Rejected(handler.source, handler.type, f"type already defined by {first}")
            )
            return
        self.handlers[handler.type] = handler


def load_registry(
    paths: list[str] | tuple[str, ...],
    *,
    switch_problem: Callable[[], str | None] = isolation.identity_switch_problem,
    environ: Mapping[str, str] = os.environ,
) -> Registry:
    """`switch_problem` says why this process cannot run a child as another user (None: it
    can); asked once, only if a handler sets `user`."""
    reg = Registry()
    host = _Host(functools.cache(switch_problem), environ)
    for p in paths:
        path = Path(p)
        if path.is_dir():
            _load_dir(reg, path)
        elif path.is_file():
            _load_toml(reg, path, host)
        else:
            reg.rejected.append(Rejected(str(path), "*", "no such file or directory"))
    return reg


@dataclass(frozen=True)
class _Host:
    switch_problem: Callable[[], str | None]
    environ: Mapping[str, str]


def _executable_problem(path: Path) -> str | None:
    if not path.exists():
        return f"command {str(path)!r} does not exist"
    if not path.is_file():
        return f"command {str(path)!r} is not a file"
    if not os.access(path, os.X_OK):
        return f"command {str(path)!r} is not executable (chmod +x)"
    return None


def _load_dir(reg: Registry, directory: Path) -> None:
    for path in sorted(directory.iterdir()):
        if path.name.startswith((".", "_")) or path.suffix in _IGNORED_SUFFIXES or path.is_dir():
            continue
        type_name = path.stem
        if not TYPE.fullmatch(type_name):
            reg.rejected.append(Rejected(str(path), type_name, f"file name: type {TYPE_RULE}"))
            continue
        problem = _executable_problem(path)
        if problem:
            reg.rejected.append(Rejected(str(path), type_name, problem))
            continue
        reg.add(Handler(type_name, (str(path.resolve()),), str(path)))


def _load_toml(reg: Registry, path: Path, host: _Host) -> None:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        reg.rejected.append(Rejected(str(path), "*", f"cannot read: {exc}"))
        return
    unknown_top = sorted(set(data) - {"handlers"})
    if unknown_top:
        reg.rejected.append(Rejected(str(path), "*", f"unknown keys: {', '.join(unknown_top)}"))
    tables = data.get("handlers", {})
    if not isinstance(tables, dict):
        reg.rejected.append(Rejected(str(path), "*", "[handlers] must be a table"))
        return
    for type_name, spec in tables.items():
        source = f"{path}[handlers.{type_name}]"
        try:
            reg.add(_parse_entry(type_name, spec, source, path.parent, host))
        except ValueError as exc:
            reg.rejected.append(Rejected(source, type_name, str(exc)))


def _parse_entry(type_name: str, spec: Any, source: str, base: Path, host: _Host) -> Handler:
    if not TYPE.fullmatch(type_name):
        raise ValueError(f"type name {TYPE_RULE}")
    if not isinstance(spec, dict):
        raise ValueError("must be a table")
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise ValueError(f"unknown keys: {', '.join(unknown)}")
    if ("command" in spec) == ("shell" in spec):
        raise ValueError("give exactly one of command (argv list) or shell (string)")
    if "command" in spec:
        cmd = spec["command"]
        if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise ValueError("command must be a non-empty list of strings (argv, no shell)")
        exe = Path(cmd[0])
        if not exe.is_absolute() and "/" in cmd[0]:
            exe = (base / exe).resolve()
            cmd = [str(exe), *cmd[1:]]
        if exe.is_absolute():
            problem = _executable_problem(exe)
            if problem:
                raise ValueError(problem)
        argv = tuple(cmd)
    else:
        if not isinstance(spec["shell"], str) or not spec["shell"].strip():
            raise ValueError("shell must be a non-empty string")
        argv = ("/bin/sh", "-c", spec["shell"])
    timeout = spec.get("timeout_seconds")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ValueError("timeout_seconds must be a positive number")
    cwd = spec.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not Path(cwd).is_dir()):
        raise ValueError(f"cwd {cwd!r} is not a directory")
    return Handler(
        type_name,
        argv,
        source,
        cwd,
        isolation.check_env_table(spec.get("env", {})),
        timeout,
        identity=_identity(spec, host),
        umask=None if "umask" not in spec else isolation.parse_umask(spec["umask"]),
        limits=tuple(
            (key, isolation.parse_limit(key, spec[key])) for key in isolation.RLIMITS if key in spec
        ),
        concurrency=_concurrency(spec.get("concurrency")),
        pass_env=isolation.parse_env_names("pass_env", spec.get("pass_env", [])),
        env_files=isolation.parse_env_files(spec.get("env_files", []), base, host.environ),
    )


def _identity(spec: dict[str, Any], host: _Host) -> Identity | None:
    if "user" not in spec:
        extra = sorted(_IDENTITY_KEYS & set(spec))
        if extra:
            raise ValueError(f"{extra[0]}: set user too (a handler runs as a whole identity)")
        return None
    identity = isolation.resolve_identity(
        spec["user"], spec.get("group"), spec.get("supplementary_groups")
    )
    problem = host.switch_problem()
    if problem:  # fail closed: never run it as the supervisor's user instead
        raise ValueError(f"user: cannot run as {identity.user!r}: {problem}")
    return identity


def _concurrency(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("concurrency must be a positive integer")
    return value
