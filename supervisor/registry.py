"""The host's handler registry: type name -> command and how it runs (identity, environment,
limits, concurrency: validated by proc/isolation.py; a cgroup per run and its limits:
proc/cgroups.py and proc/cglimits.py),
from TOML files and handler directories.

Handlers are registered on each host, never through the API: the API can only name a type.
Bad entries are collected as `Rejected` with a reason instead of stopping the host, so
`punchclock handlers list` / `check` can show every problem at once.
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from supervisor.core.model import TYPE, TYPE_RULE
from supervisor.proc import cglimits, cgroups, isolation
from supervisor.proc.cglimits import Limits
from supervisor.proc.isolation import Identity

_IDENTITY_KEYS = {"user", "group", "supplementary_groups"}
_ENV_KEYS = {"env", "pass_env", "env_files"}
_KEYS = {
    "command", "shell", "timeout_seconds", "cwd", "umask", "concurrency",
    "cgroup", *cglimits.LIMIT_KEYS, *_IDENTITY_KEYS, *_ENV_KEYS, *isolation.RLIMITS,
}  # fmt: skip
CGROUP_MODES = ("handler", "all", "off")  # the supervisor-wide `cgroups` setting
_T = TypeVar("_T")
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
    cgroup: bool = False  # each run in a cgroup of its own (cgroups.py)
    cgroup_limits: Limits = field(default_factory=Limits)

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The child's environment before env_files and the run variables."""
        return isolation.clean_env(self.identity, self.pass_env, self.env, environ)


@dataclass(frozen=True)
class Rejected:
    source: str
    type: str
    reason: str


def describe_isolation(host: cgroups.Host) -> str:
    """One line for `check` and `handlers list`: which isolation this host gives runs."""
    if not host.usable:
        why = host.problem or "no cgroup.kill in a writable v2 tree and no v1 freezer"
        return f"process group + environment marker (no cgroup per run: {why})"
    where = [f"v2 {host.v2}" if host.v2 else "", *(f"v1 {c}" for c in sorted(host.v1))]
    ctl = sorted({*host.v2_controllers, *(c for c in host.v1 if c in cgroups.V2_CONTROLLERS)})
    return (
        f"cgroup per run (kill: {host.kill_method}; limits: {', '.join(ctl) or 'none'}; "
        f"{'; '.join(w for w in where if w)})"
    )


@dataclass
class Registry:
    handlers: dict[str, Handler] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)
    cgroup_host: cgroups.Host | None = None  # where runs get their cgroup, when any does
    # Types a reload removed: still runnable for runs claimed before it, never offered.
    retiring: frozenset[str] = frozenset()
    # Reads handler paths again as load_registry did (same host view); None: built by hand.
    loader: Callable[[Sequence[str]], Registry] | None = field(default=None, repr=False)

    @property
    def types(self) -> list[str]:
        """What this host offers: claims and advertises."""
        return sorted(t for t in self.handlers if t not in self.retiring)

    def reload(self, paths: Sequence[str]) -> Registry:
        """`paths` read again with this registry's view of the host (its cgroups as prepared
        at start-up): a new registry, this one untouched."""
        if self.loader is None:
            raise RuntimeError("this registry was not loaded from files")
        return self.loader(paths)

    def problems_new_in(self, new: Registry) -> list[Rejected]:
        """Entries `new` rejects that this one did not: what refuses a reload. A problem
        the host started with (and runs without) does not block every reload after it."""
        known = set(self.rejected)
        return [r for r in new.rejected if r not in known]

    def succeeded_by(self, new: Registry, in_flight: Collection[str]) -> Registry:
        """`new`, keeping this registry's handlers of the types it drops that still have
        runs here (`in_flight`) or that a claim sent before the reload may still return:
        those finish with the handler they were claimed under."""
        keep = {
            t: h
            for t, h in self.handlers.items()
            if t not in new.handlers and (t not in self.retiring or t in in_flight)
        }
        if not keep:
            return new
        return replace(
            new,
            handlers={**new.handlers, **keep},
            retiring=frozenset(keep),
            cgroup_host=new.cgroup_host or self.cgroup_host,
        )

    def changes(self, new: Registry) -> dict[str, list[str]]:
        """The offered types `new` adds, removes and changes (their definitions differ)."""
        old_types, new_types = set(self.types), set(new.types)
        return {
            "added": sorted(new_types - old_types),
            "removed": sorted(old_types - new_types),
            "changed": sorted(
                t for t in old_types & new_types if self.handlers[t] != new.handlers[t]
            ),
        }

    def add(self, handler: Handler) -> None:
        if handler.type in self.handlers:
            first = self.handlers[handler.type].source
            self.rejected.append(
                Rejected(handler.source, handler.type, f"type already defined by {first}")
            )
            return
        self.handlers[handler.type] = handler


def load_registry(
    paths: Sequence[str],
    *,
    switch_problem: Callable[[], str | None] = isolation.identity_switch_problem,
    environ: Mapping[str, str] = os.environ,
    cgroup_host: Callable[[], cgroups.Host] = cgroups.probe,
    cgroups_mode: str = "handler",
    euid: Callable[[], int] = os.geteuid,
) -> Registry:
    """`switch_problem` says why this process cannot run a child as another user (None: it
    can); asked once, only if a handler sets `user`. `cgroup_host` says what this host offers
    for a cgroup per run (asked once, when one is wanted); `cgroups_mode`: `handler` (runs of
    handlers that set `cgroup = true` or a cgroup limit), `all` (every run, where the host
    can; `cgroup = false` opts out), `off` (none: such handlers are rejected)."""
    if cgroups_mode not in CGROUP_MODES:
        raise ValueError(f"cgroups must be one of {', '.join(CGROUP_MODES)}, not {cgroups_mode!r}")
    switch_problem, cgroup_host = _once(switch_problem), _once(cgroup_host)
    reg = Registry(
        loader=lambda again: load_registry(
            again,
            switch_problem=switch_problem,
            environ=environ,
            cgroup_host=cgroup_host,
            cgroups_mode=cgroups_mode,
            euid=euid,
        )
    )
    host = _Host(switch_problem, environ, cgroup_host, cgroups_mode, euid)
    for p in paths:
        path = Path(p)
        if path.is_dir():
            _load_dir(reg, path, host)
        elif path.is_file():
            _load_toml(reg, path, host)
        else:
            reg.rejected.append(Rejected(str(path), "*", "no such file or directory"))
    if any(h.cgroup for h in reg.handlers.values()):
        reg.cgroup_host = host.cgroup_host()
    return reg


def _once(ask: Callable[[], _T]) -> Callable[[], _T]:
    """`ask`, asked once (a reload's loader passes it on already cached)."""
    return ask if hasattr(ask, "cache_info") else functools.cache(ask)


@dataclass(frozen=True)
class _Host:
    switch_problem: Callable[[], str | None]
    environ: Mapping[str, str]
    cgroup_host: Callable[[], cgroups.Host]
    cgroups_mode: str
    euid: Callable[[], int]


def _executable_problem(path: Path) -> str | None:
    if not path.exists():
        return f"command {str(path)!r} does not exist"
    if not path.is_file():
        return f"command {str(path)!r} is not a file"
    if not os.access(path, os.X_OK):
        return f"command {str(path)!r} is not executable (chmod +x)"
    return None


def _load_dir(reg: Registry, directory: Path, host: _Host) -> None:
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
        wanted = host.cgroups_mode == "all" and host.cgroup_host().usable
        reg.add(Handler(type_name, (str(path.resolve()),), str(path), cgroup=wanted))


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
    identity = _identity(spec, host)
    cgroup, limits = _cgroup(spec, host)
    if cgroup and identity is not None:
        # The identity switch runs after the cgroup join, in setpriv(1): an exec'd program
        # keeps no capabilities of a non-root supervisor (its ambient set is cleared).
        if host.euid() != 0:
            raise ValueError(
                "user: with a cgroup per run, the supervisor must run as root (the switch "
                "happens after the run joins its cgroup, where capabilities are gone)"
            )
        if isolation.setpriv_path() is None:
            raise ValueError("user: with a cgroup per run, needs setpriv(1) on PATH")
    return Handler(
        type_name,
        argv,
        source,
        cwd,
        isolation.check_env_table(spec.get("env", {})),
        timeout,
        identity=identity,
        umask=None if "umask" not in spec else isolation.parse_umask(spec["umask"]),
        limits=tuple(
            (key, isolation.parse_limit(key, spec[key])) for key in isolation.RLIMITS if key in spec
        ),
        concurrency=_concurrency(spec.get("concurrency")),
        pass_env=isolation.parse_env_names("pass_env", spec.get("pass_env", [])),
        env_files=isolation.parse_env_files(spec.get("env_files", []), base, host.environ),
        cgroup=cgroup,
        cgroup_limits=limits,
    )


def _cgroup(spec: dict[str, Any], host: _Host) -> tuple[bool, Limits]:
    """Whether runs get a cgroup of their own, and its limits. Fail closed: a handler that
    asks for one (or for a limit) on a host that cannot give it is rejected."""
    asked = spec.get("cgroup")
    if asked is not None and not isinstance(asked, bool):
        raise ValueError("cgroup must be true or false")
    limits = cglimits.parse_limits(spec)
    if asked is False and limits:
        first = next(k for k, v in limits.items().items() if v is not None)
        raise ValueError(f"cgroup: false, but {first} needs a cgroup per run")
    if not (asked or limits):
        return host.cgroups_mode == "all" and asked is None and host.cgroup_host().usable, limits
    if host.cgroups_mode == "off":
        raise ValueError("cgroup: this supervisor runs with cgroups = off")
    cg_host = host.cgroup_host()
    if not cg_host.usable:
        raise ValueError(
            f"cgroup: this host cannot give a run its own cgroup: {describe_isolation(cg_host)}"
        )
    if problem := cg_host.limit_problem(limits):
        raise ValueError(problem)
    return True, limits


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
