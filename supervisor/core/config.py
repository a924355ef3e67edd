"""One frozen Config, read once at start-up: defaults < TOML file < environment < flags.

Each setting is declared once (name, type, default, meaning); docs/configuration.md's table
is generated from the same list (`punchclock check --settings`). Unknown keys and invalid
values stop start-up with a message that names them.
"""

from __future__ import annotations

import os
import socket
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from supervisor.core.credfile import apply_files
from supervisor.core.tokenspec import parse_tokens

DEFAULT_CONFIG_FILE = Path("/etc/punchclock/punchclock.toml")


class ConfigError(Exception):
    pass


def _default_concurrency() -> int:
    return 8 * (os.cpu_count() or 1)


def _setting(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class Config:
    database_url: str = _setting("", "PostgreSQL DSN (postgresql://user:pass@host:port/db)")
    database_url_file: str = _setting(
        "",
        "a file holding database_url (mode 0600, or $CREDENTIALS_DIRECTORY/NAME from systemd's "
        "LoadCredential=): keeps the password off argv and out of env files",
    )
    database_pooler: str = _setting(
        "none",
        "what database_url reaches: none (PostgreSQL, or a session pooler) or transaction "
        "(PgBouncer in transaction mode)",
    )
    listen_database_url: str = _setting(
        "",
        "a direct PostgreSQL DSN for LISTEN and migrations (empty: database_url, unless it "
        "is a transaction pooler; then the supervisor polls)",
    )
    listen_database_url_file: str = _setting(
        "", "a file holding listen_database_url (as database_url_file)"
    )
    pool_size: int = _setting(1, "connections to database_url for this supervisor's queries")
    handlers: tuple[str, ...] = _setting((), "handler TOML files or directories (repeatable)")
    concurrency: int = _setting(0, "children run at once by this supervisor (0: 8 x CPU cores)")
    worker_id: str = _setting("", "this supervisor's id (default: host name + pid)")
    lease_ttl: float = _setting(30.0, "seconds a claimed run's lease lasts without renewal")
    drain_timeout: float = _setting(30.0, "seconds running children get to finish at shutdown")
    kill_grace: float = _setting(10.0, "seconds between SIGTERM and SIGKILL for a child's group")
    output_limit: int = _setting(65536, "bytes of stdout and of stderr kept per attempt (tail)")
    cgroups: str = _setting(
        "handler",
        "a cgroup per run: handler (those that set cgroup or a limit), all (every run), or off",
    )
    misfire_grace: float = _setting(
        60.0, "seconds a run may wait past its time before the catch-up policy calls it missed"
    )
    claim_ahead: float = _setting(
        0.25, "claim runs this many seconds before their instant; each starts at its instant"
    )
    plan_horizon: float = _setting(86400.0, "seconds of future runs the planner keeps planned")
    plan_max_runs: int = _setting(100, "at most this many runs planned per job per pass")
    poll_interval: float = _setting(5.0, "fallback poll when no notification arrives (seconds)")
    poll_gap: float = _setting(
        0.04,
        "seconds between the fleet's polls of a type: each host polls every poll_gap x the "
        "hosts offering it (never more often than poll_interval while it LISTENs)",
    )
    metrics_listen: str = _setting(
        "", "[host:]port for /metrics and /readyz, unauthenticated (no host: 127.0.0.1; empty: off)"
    )
    api_listen: str = _setting("127.0.0.1:8080", "host:port the API listens on")
    tls_cert: str = _setting(
        "", "PEM certificate (chain) the API serves HTTPS with; give tls_key too (empty: HTTP)"
    )
    tls_key: str = _setting("", "PEM private key of tls_cert (a file only its user can read)")
    behind_proxy: bool = _setting(
        False,
        "a TLS-terminating proxy fronts the API: allows a non-loopback api_listen without "
        "tls_cert (the proxy must reach it over a private network)",
    )
    api_allowed_hosts: tuple[str, ...] = _setting(
        (),
        "more Host names the API and dashboard answer to, besides loopback and api_listen's "
        "host (.example.com: and subdomains; a wildcard api_listen without any: every name)",
    )
    api_auth_throttle: int = _setting(
        10,
        "failed bearer tokens and dashboard logins a client address may make per minute "
        "before it gets 429 for the rest of that minute (0: no limit)",
    )
    api_tokens: tuple[str, ...] = _setting(
        (),
        "API bearer tokens as ROLE:NAME:TOKEN (ROLE read, operator or admin; NAME shows in "
        "logs; ROLE:TOKEN is named ROLE-<digest>) (repeatable)",
    )
    api_tokens_file: str = _setting(
        "",
        "a file holding api_tokens, one per line or comma separated (mode 0600, or "
        "$CREDENTIALS_DIRECTORY/NAME from systemd's LoadCredential=)",
    )
    session_secret: str = _setting(
        "",
        "key that signs dashboard sessions, at least 32 characters (empty: random per API "
        "process: sessions end when it restarts and other processes refuse them)",
    )
    session_idle_timeout: float = _setting(
        3600.0, "seconds a dashboard session lasts unused (each use extends it; 12 h at most)"
    )
    api_max_body: int = _setting(1048576, "largest request body the API accepts (bytes)")
    ready_max_lag: float = _setting(60.0, "/readyz fails when a due run waited longer (seconds)")
    retention_succeeded_days: float = _setting(30.0, "keep succeeded and skipped runs this long")
    retention_failed_days: float = _setting(90.0, "keep dead and cancelled runs this long")
    retention_deliveries_days: float = _setting(
        30.0, "keep delivered and failed notification deliveries this long (by event time)"
    )
    log_level: str = _setting("info", "debug, info, warning or error")
    log_runs: str = _setting(
        "failures",
        "per-run log lines at info: failures (failed, retried, dead, killed) or all (also "
        "run_started and run_succeeded, which are debug otherwise)",
    )
    notify_allowed_hosts: tuple[str, ...] = _setting(
        (), "hosts notification channels may send to (.example.com: and subdomains; empty: any)"
    )
    notify_allow_private: bool = _setting(
        False,
        "notification channels, ping URLs and the heartbeat may reach loopback, private and "
        "link-local addresses (cloud metadata addresses stay refused)",
    )
    notify_retry_window: float = _setting(
        86400.0, "seconds a notification delivery is retried before it is marked failed"
    )
    notify_timeout: float = _setting(10.0, "seconds one notification request may take")
    live_output_interval: float = _setting(
        1.0, "seconds between writes of running children's output so far (0: off)"
    )
    heartbeat_ping_url: str = _setting(
        "", "URL the planners GET once a minute while any plans (an outside dead-man's switch)"
    )

    @property
    def effective_concurrency(self) -> int:
        return self.concurrency or _default_concurrency()

    @property
    def pooled(self) -> bool:
        """database_url reaches a transaction pooler: no session state, no LISTEN there."""
        return self.database_pooler == "transaction"

    @property
    def direct_database_url(self) -> str:
        """Where LISTEN and migrations go ('' : nowhere; the supervisor polls)."""
        return self.listen_database_url or ("" if self.pooled else self.database_url)

    @property
    def effective_worker_id(self) -> str:
        return self.worker_id or f"{socket.gethostname()}:{os.getpid()}"


_FIELDS = {f.name: f for f in fields(Config)}
ENV_PREFIX = "PUNCHCLOCK_"


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _coerce(name: str, value: Any, source: str) -> Any:
    f = _FIELDS[name]
    kind = f.type
    try:
        if kind == "tuple[str, ...]":
            if isinstance(value, str):
                value = [v for v in value.split(",") if v]
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise ValueError("expected a list of strings")
            return tuple(value)
        if kind == "bool":
            if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("false", "0", "no", "off", ""):
                return False
            if not isinstance(value, bool):
                raise ValueError("expected true or false")
            return value
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError("expected a whole number")
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError("expected a number")
            return float(value)
        if not isinstance(value, str):
            raise ValueError("expected a string")
        return value
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {name}: {exc} (got {value!r})") from None


def _validate(cfg: Config) -> None:
    problems = []
    positive = ("lease_ttl", "drain_timeout", "plan_horizon", "poll_interval", "ready_max_lag",
                "notify_retry_window", "notify_timeout", "poll_gap")  # fmt: skip
    for name in positive:
        if getattr(cfg, name) <= 0:
            problems.append(f"{name}: must be greater than 0")
    for name in (
        "kill_grace",
        "misfire_grace",
        "concurrency",
        "live_output_interval",
        "claim_ahead",
    ):
        if getattr(cfg, name) < 0:
            problems.append(f"{name}: must not be negative")
    if cfg.claim_ahead >= cfg.lease_ttl / 2:
        problems.append("claim_ahead: must be less than half of lease_ttl")
    if cfg.pool_size < 1:
        problems.append("pool_size: must be at least 1")
    if cfg.database_pooler not in {"none", "transaction"}:
        problems.append(
            f"database_pooler: must be none or transaction, not {cfg.database_pooler!r}"
        )
    if cfg.api_auth_throttle < 0:
        problems.append("api_auth_throttle: must not be negative (0: no limit)")
    if cfg.plan_max_runs < 1:
        problems.append("plan_max_runs: must be at least 1")
    if cfg.output_limit < 0:
        problems.append("output_limit: must not be negative")
    if cfg.cgroups not in {"handler", "all", "off"}:
        problems.append(f"cgroups: must be handler, all or off, not {cfg.cgroups!r}")
    if cfg.log_runs not in {"failures", "all"}:
        problems.append(f"log_runs: must be failures or all, not {cfg.log_runs!r}")
    if cfg.log_level.lower() not in {"debug", "info", "warning", "error"}:
        problems.append(f"log_level: must be debug, info, warning or error, not {cfg.log_level!r}")
    try:
        parse_tokens(cfg.api_tokens)
    except ValueError as exc:
        problems.append(str(exc))
    if cfg.session_secret and len(cfg.session_secret) < 32:
        problems.append("session_secret: must be at least 32 characters (or empty: random)")
    if cfg.session_idle_timeout <= 0:
        problems.append("session_idle_timeout: must be greater than 0")
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        have, missing = ("tls_cert", "tls_key") if cfg.tls_cert else ("tls_key", "tls_cert")
        problems.append(f"{missing}: required with {have} (give both, or neither for HTTP)")
    for name in ("metrics_listen", "api_listen"):
        value = getattr(cfg, name)
        if value and not _valid_listen(value):
            problems.append(f"{name}: expected [HOST:]PORT, got {value!r}")
    if cfg.heartbeat_ping_url:
        from supervisor.core.egress import destinations
        from supervisor.core.events import check_url

        bad: list[Any] = []
        check_url(bad, cfg.heartbeat_ping_url, destinations(cfg), "heartbeat_ping_url")
        problems += [str(e) for e in bad]
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))


def _valid_listen(value: str) -> bool:
    _, _, port = value.rpartition(":")
    return port.isascii() and port.isdigit() and 0 <= int(port) < 65536


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT, or :PORT / PORT for loopback: nothing listens beyond the host unless the
    operator names an address (0.0.0.0:9464 for every interface)."""
    host, _, port = value.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def load(
    *,
    config_file: Path | None = None,
    environ: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Config:
    """Build the Config. `config_file` None means the default path, if it exists."""
    environ = dict(os.environ) if environ is None else environ
    values: dict[str, Any] = {}
    path = config_file
    if path is None and env_name("config") in environ:
        path = Path(environ[env_name("config")])
    if path is None and DEFAULT_CONFIG_FILE.exists():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise ConfigError(f"config file {path}: unknown keys: {', '.join(unknown)}")
        values.update({k: _coerce(k, v, str(path)) for k, v in data.items()})
    for name in _FIELDS:
        if env_name(name) in environ:
            values[name] = _coerce(name, environ[env_name(name)], env_name(name))
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, value, "--" + name.replace("_", "-"))
    try:
        values = apply_files(values, environ)
    except ValueError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    cfg = replace(Config(), **values)
    _validate(cfg)
    if problems := dsn_problems(cfg.database_url, environ) + dsn_problems(
        cfg.listen_database_url, environ, "listen_database_url"
    ):
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    return cfg


# Session attributes that only ever choose a server that accepts writes.
_WRITABLE_ATTRS = ("read-write", "primary")


def split_hosts(dsn: str) -> list[str]:
    """One DSN per host of a libpq multi-host URL, in order (credentials, database and query
    kept); a single-host DSN comes back alone, unchanged."""
    parts = urlsplit(dsn)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    hosts = hostlist.split(",")
    if len(hosts) < 2:
        return [dsn]
    return [urlunsplit(parts._replace(netloc=f"{userinfo}{at}{host}")) for host in hosts]


def dsn_problems(
    dsn: str, environ: dict[str, str] | None = None, name: str = "database_url"
) -> list[str]:
    """What is wrong with a (multi-host) database_url; never echoes the URL (it may hold a
    password). Several hosts need target_session_attrs=read-write (or primary), else a
    connection may land on a standby and every write fails."""
    if not dsn:
        return []
    hosts = split_hosts(dsn)
    problems = []
    for i, one in enumerate(hosts):
        try:
            urlsplit(one).port  # noqa: B018 - raises on a malformed port
        except ValueError:
            problems.append(f"{name}: host {i + 1} has an invalid port")
    if len(hosts) > 1:
        env = os.environ if environ is None else environ
        default = env.get("PGTARGETSESSIONATTRS", "any")
        attrs = parse_qs(urlsplit(dsn).query).get("target_session_attrs", [default])[-1]
        if attrs not in _WRITABLE_ATTRS:
            problems.append(
                f"{name}: several hosts need ?target_session_attrs=read-write (or primary), "
                f"not {attrs!r}: otherwise a connection may land on a standby"
            )
    return problems


def settings_table() -> str:
    """docs/configuration.md's settings table, generated from the declarations above."""
    lines = ["| setting | environment | default | meaning |", "| --- | --- | --- | --- |"]
    for f in fields(Config):
        default = f.default if f.default not in ("", ()) else "—"
        lines.append(f"| `{f.name}` | `{env_name(f.name)}` | {default} | {f.metadata['help']} |")
    return "\n".join(lines)
