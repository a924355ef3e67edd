"""The `punchclock` command: exit status 0 ok, 1 failed, 2 usage or invalid input."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from api.client_colour import for_terminal, use_colour
from supervisor import __version__
from supervisor.cli_format import handlers_json, handlers_text, preview_lines
from supervisor.core.config import Config, ConfigError, load, settings_table
from supervisor.core.errors import InvalidSpec, PunchclockError
from supervisor.core.log import setup_logging

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


def _config(args: argparse.Namespace, **extra: Any) -> Config:
    overrides = {
        name: getattr(args, name, None)
        for name in (
            "database_url",
            "database_pooler",
            "listen_database_url",
            "concurrency",
            "worker_id",
            "lease_ttl",
            "drain_timeout",
            "kill_grace",
            "metrics_listen",
            "api_listen",
            "poll_interval",
            "misfire_grace",
            "claim_ahead",
            "log_level",
            "log_runs",
        )
    }
    if getattr(args, "handlers", None):
        overrides["handlers"] = args.handlers
    if getattr(args, "api_token", None):
        overrides["api_tokens"] = args.api_token
    overrides.update(extra)
    return load(config_file=getattr(args, "config", None), overrides=overrides)


def _need_db(cfg: Config) -> str:
    if not cfg.database_url:
        raise UsageError(
            "no database: set PUNCHCLOCK_DATABASE_URL_FILE (or database_url_file), "
            "PUNCHCLOCK_DATABASE_URL or --database-url"
        )
    return cfg.database_url


def _need_direct_db(cfg: Config) -> str:
    """Where session work goes (migrations hold a session advisory lock)."""
    _need_db(cfg)
    if not cfg.direct_database_url:
        raise UsageError(
            "database_pooler = transaction: migrations need a direct connection; "
            "pass --listen-database-url or set PUNCHCLOCK_LISTEN_DATABASE_URL"
        )
    return cfg.direct_database_url


# ---------------------------------------------------------------- commands


def cmd_migrate(args: argparse.Namespace) -> int:
    from supervisor.core.db import connect
    from supervisor.core.migrator import migrate

    cfg = _config(args)
    setup_logging(cfg.log_level)

    async def run() -> list[str]:
        conn = await connect(_need_direct_db(cfg))
        try:
            return await migrate(conn)
        finally:
            await conn.close()

    applied = asyncio.run(run())
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return EXIT_OK


def cmd_supervise(args: argparse.Namespace) -> int:
    from supervisor.app import Supervisor
    from supervisor.proc.spawn import install_fast_child_watcher
    from supervisor.registry import load_registry

    cfg = _config(args)
    setup_logging(cfg.log_level)
    _need_db(cfg)
    registry = load_registry(cfg.handlers, **_cgroup_args(cfg, prepare=True))
    install_fast_child_watcher()

    async def run() -> int:
        return await Supervisor(
            cfg, registry, auto_migrate=args.migrate, read_config=lambda: _config(args)
        ).run()

    return asyncio.run(run())


def _cgroup_args(cfg: Config, *, prepare: bool = False) -> dict[str, Any]:
    """load_registry's view of this host's cgroups; `prepare` (the supervisor only): set the
    supervisor up for them first (cgroups.prepare: its own leaf, controllers, stale runs)."""
    from supervisor.core.log import log_event
    from supervisor.proc import cgroups

    host = cgroups.probe() if cfg.cgroups != "off" else cgroups.Host(problem="cgroups = off")
    if prepare and cfg.cgroups != "off":
        host, warning = cgroups.prepare(host)
        if warning:
            log_event(
                logging.getLogger("punchclock.cgroups"),
                "cgroups_limited",
                level=logging.WARNING,
                reason=warning,
            )
    return {"cgroup_host": lambda: host, "cgroups_mode": cfg.cgroups}


def cmd_up(args: argparse.Namespace) -> int:
    from supervisor.local.pgbin import PgServerError
    from supervisor.local.up import run_up

    cfg = _config(args)
    setup_logging(cfg.log_level)
    try:
        return run_up(cfg, demo=not args.no_demo, data_dir=args.data_dir)
    except PgServerError as exc:  # expected (no binaries, dir in use, wrong major): no traceback
        print(f"punchclock up: {exc}", file=sys.stderr)
        return EXIT_FAILED


def cmd_api(args: argparse.Namespace) -> int:
    from api.app import serve

    overrides = {"api_max_body": args.max_body} if args.max_body is not None else {}
    cfg = _config(args, **overrides)
    setup_logging(cfg.log_level)
    _need_db(cfg)
    return asyncio.run(serve(cfg, auto_migrate=args.migrate))


def cmd_schedule_preview(args: argparse.Namespace) -> int:
    from api.ui.preview import preview  # the dashboard's: instants with their DST marks
    from supervisor.core import schedule

    after = schedule.parse_instant(args.after, "--after") if args.after else datetime.now(UTC)
    if not 1 <= args.count <= 1000:
        raise InvalidSpec("--count", "must be between 1 and 1000")
    instants = preview(args.expression, args.tz, after, args.count)
    _print(preview_lines(instants, args.json), plain=args.json)
    return EXIT_OK


def cmd_handlers_list(args: argparse.Namespace) -> int:
    from supervisor.registry import describe_isolation, load_registry

    cfg = _config(args)
    cg = _cgroup_args(cfg)
    reg = load_registry(cfg.handlers, **cg)
    isolation = describe_isolation(cg["cgroup_host"]())
    text = handlers_json(reg, isolation) if args.json else handlers_text(reg, isolation)
    _print(text, plain=args.json)
    return EXIT_FAILED if reg.rejected else EXIT_OK


def _print(text: str, *, plain: bool = False) -> None:
    """Human output: terminal-safe, in colour on a terminal (client_colour); JSON as it is."""
    print(text if plain else for_terminal(text, use_colour(sys.stdout)))


def cmd_check(args: argparse.Namespace) -> int:
    from supervisor.checks import database_problems, security_warnings
    from supervisor.registry import describe_isolation, load_registry

    if args.settings:
        print(settings_table())
        return EXIT_OK
    cfg = _config(args)
    cg = _cgroup_args(cfg)
    print(f"isolation: {describe_isolation(cg['cgroup_host']())}")
    problems = [
        f"handler {r.type} ({r.source}): {r.reason}"
        for r in load_registry(cfg.handlers, **cg).rejected
    ]
    if cfg.database_url:
        problems += database_problems(cfg.database_url, cfg.pooled)
    for w in security_warnings(cfg):
        print(f"warning: {w}")
    for p in problems:
        print(f"problem: {p}")
    print("configuration ok" if not problems else f"{len(problems)} problem(s)")
    return EXIT_FAILED if problems else EXIT_OK


# ---------------------------------------------------------------- parser


def _common(p: argparse.ArgumentParser, *, db: bool = True) -> None:
    p.add_argument(
        "--config", type=Path, help="TOML config file (default /etc/punchclock/punchclock.toml)"
    )
    if db:
        p.add_argument(
            "--database-url",
            help="PostgreSQL DSN [PUNCHCLOCK_DATABASE_URL]; argv is visible to every local "
            "user: keep a password in database_url_file [PUNCHCLOCK_DATABASE_URL_FILE]",
        )
        p.add_argument(
            "--database-pooler",
            choices=("none", "transaction"),
            help="transaction: --database-url is PgBouncer in transaction mode "
            "[PUNCHCLOCK_DATABASE_POOLER]",
        )
        p.add_argument(
            "--listen-database-url",
            help="direct PostgreSQL DSN for LISTEN and migrations behind a pooler (a "
            "password: listen_database_url_file) [PUNCHCLOCK_LISTEN_DATABASE_URL_FILE]",
        )
    p.add_argument("--log-level", help="debug, info, warning, error [PUNCHCLOCK_LOG_LEVEL]")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="punchclock", description="Distributed job scheduler on PostgreSQL."
    )
    parser.add_argument("--version", action="version", version=f"punchclock {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("migrate", help="apply database migrations")
    _common(p)
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("supervise", help="run this host's supervisor")
    _common(p)
    p.add_argument(
        "--handlers", action="append", help="handler TOML file or directory (repeatable)"
    )
    p.add_argument("--concurrency", type=int, help="children at once [PUNCHCLOCK_CONCURRENCY]")
    p.add_argument("--worker-id", help="worker id (default host:pid) [PUNCHCLOCK_WORKER_ID]")
    p.add_argument("--lease-ttl", type=float, help="lease seconds [PUNCHCLOCK_LEASE_TTL]")
    p.add_argument(
        "--drain-timeout", type=float, help="shutdown drain seconds [PUNCHCLOCK_DRAIN_TIMEOUT]"
    )
    p.add_argument(
        "--kill-grace", type=float, help="SIGTERM to SIGKILL seconds [PUNCHCLOCK_KILL_GRACE]"
    )
    p.add_argument(
        "--poll-interval", type=float, help="fallback poll seconds [PUNCHCLOCK_POLL_INTERVAL]"
    )
    p.add_argument(
        "--log-runs",
        choices=("failures", "all"),
        help="per-run lines at info: failures, or all (also started/succeeded) "
        "[PUNCHCLOCK_LOG_RUNS]",
    )
    p.add_argument("--misfire-grace", type=float, help="seconds before a late run is missed")
    p.add_argument(
        "--claim-ahead", type=float, help="claim runs this early [PUNCHCLOCK_CLAIM_AHEAD]"
    )
    p.add_argument("--metrics-listen", help="HOST:PORT for metrics [PUNCHCLOCK_METRICS_LISTEN]")
    p.add_argument("--migrate", action="store_true", help="apply pending migrations first")
    p.set_defaults(func=cmd_supervise)

    p = sub.add_parser(
        "up", help="start everything here: embedded PostgreSQL, a supervisor and the API"
    )
    _common(p)
    p.add_argument("--handlers", action="append", help="handler TOML file or directory")
    p.add_argument("--api-listen", help="API HOST:PORT (default 127.0.0.1:8080)")
    p.add_argument("--metrics-listen", help="supervisor metrics HOST:PORT (default off)")
    p.add_argument("--data-dir", type=Path, help="embedded PostgreSQL data directory")
    p.add_argument("--no-demo", action="store_true", help="do not create the demo jobs")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("api", help="serve the management REST API")
    _common(p)
    p.add_argument(
        "--listen",
        dest="api_listen",
        help="HOST:PORT (default 127.0.0.1:8080; port 0 picks one) [PUNCHCLOCK_API_LISTEN]",
    )
    p.add_argument(
        "--api-token",
        action="append",
        metavar="ROLE:NAME:TOKEN",
        help="a bearer token, ROLE read, operator or admin (repeatable; none: an admin token "
        "generated into the state directory); argv is visible to every local user: use "
        "api_tokens_file [PUNCHCLOCK_API_TOKENS_FILE]",
    )
    p.add_argument("--max-body", type=int, help="largest request body in bytes (default 1 MiB)")
    p.add_argument("--migrate", action="store_true", help="apply pending migrations first")
    p.set_defaults(func=cmd_api)

    p = sub.add_parser("schedule", help="schedule tools")
    ssub = p.add_subparsers(dest="schedule_command", required=True, metavar="SUBCOMMAND")
    pp = ssub.add_parser("preview", help="print the next run instants of a cron expression")
    pp.add_argument("expression", help="cron expression (5 fields, or 6 with seconds first)")
    pp.add_argument("--tz", default="UTC", help="IANA time zone (default UTC)")
    pp.add_argument("--after", help="start after this ISO-8601 instant (default now)")
    pp.add_argument("--count", type=int, default=10, help="how many (default 10)")
    pp.add_argument(
        "--json", action="store_true", help="print JSON (a DST-marked instant: rule and note)"
    )
    pp.set_defaults(func=cmd_schedule_preview)

    p = sub.add_parser("handlers", help="handler registry tools")
    hsub = p.add_subparsers(dest="handlers_command", required=True, metavar="SUBCOMMAND")
    hp = hsub.add_parser("list", help="show the handlers this host offers and rejected entries")
    hp.add_argument(
        "--config", type=Path, help="TOML config file (default /etc/punchclock/punchclock.toml)"
    )
    hp.add_argument("--handlers", action="append", help="handler TOML file or directory")
    hp.add_argument("--json", action="store_true", help="print JSON")
    hp.set_defaults(func=cmd_handlers_list)

    p = sub.add_parser("check", help="validate configuration, handlers and the database")
    _common(p)
    p.add_argument("--handlers", action="append", help="handler TOML file or directory")
    p.add_argument("--settings", action="store_true", help="print the settings table and exit")
    p.set_defaults(func=cmd_check)

    from api.client import register_client_commands  # stdlib only: cheap to import

    register_client_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except BrokenPipeError:  # `punchclock runs list | head -1`: the reader has gone
        # Python flushes stdout once more at exit: give it somewhere to go, quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except (UsageError, ConfigError, InvalidSpec) as exc:
        print(f"punchclock: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (PunchclockError, OSError) as exc:
        print(f"punchclock: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
