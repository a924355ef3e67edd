"""Connections to PostgreSQL: multi-host DSNs tried host by host, pools with the jsonb
codec, and what a lost, restarting or read-only database raises (DB_ERRORS). The store's
queries run over these; only this module and store.py name asyncpg's errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from supervisor.core.config import split_hosts
from supervisor.core.log import log_event

log = logging.getLogger("punchclock.db")
Conn = asyncpg.Connection | PoolConnectionProxy
Record = asyncpg.Record
Pool = asyncpg.Pool
# What a first connection can fail with (unreachable, refused, bad credentials or database).
CONNECT_ERRORS: tuple[type[BaseException], ...] = (OSError, asyncpg.PostgresError)

# What a lost or restarting database raises through asyncpg: a service that sees one backs
# off and retries (loop.py).
DB_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    # 57P01: the server is shutting down (a failover stops the old primary). asyncpg closes
    # the connection; the pool replaces it on the next acquire, on whichever host is writable.
    asyncpg.AdminShutdownError,
    # 25006: the server refuses writes (a standby, or a primary fenced read-only). Nothing was
    # decided there; the store's pool drops its connections (store.create_pool) and the retry
    # reconnects with target_session_attrs=read-write.
    asyncpg.ReadOnlySQLTransactionError,
    asyncpg.CrashShutdownError,
    # 40001/40P01: a serialization failure or a deadlock rolled the statement back; trying
    # again is the documented answer (writes are fenced and idempotent).
    asyncpg.TransactionRollbackError,
    asyncpg.QueryCanceledError,
    # Reconnect storms after a restart can briefly exceed max_connections.
    asyncpg.TooManyConnectionsError,
    # asyncpg's protocol can be caught between the server's "terminating connection" error
    # and the socket closing ("cannot switch to state 15; another operation (2) is in
    # progress", MagicStack/asyncpg#784, #1069). The pool drops that connection on release;
    # the next attempt gets a fresh one, so it is retried like any lost connection.
    asyncpg.InternalClientError,
    ConnectionError,
    OSError,
    asyncio.TimeoutError,
)


# 53300: every connection slot of the server is taken (max_connections); named so that a
# supervisor says so plainly instead of logging a reconnect loop.
SERVER_FULL = asyncpg.TooManyConnectionsError


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


# Every array and enum type the statements bind or return. asyncpg resolves a statement's
# types it has no codec for on the statement's first use, per connection, with one
# introspection query each time: 2-35 ms of the server's CPU (the first on a new backend
# warms its catalog caches), 8-10 times per supervisor over its connections. Naming them all
# once at connect costs one such query per connection. A type missing here is still
# introspected when first used (tests/integration/test_known_types.py keeps the list whole).
KNOWN_TYPES = (
    "bigint[]",
    "int[]",
    "bool[]",
    "float8[]",
    "timestamptz[]",
    "run_status",
    "run_status[]",
    "attempt_outcome",
    "run_trigger",
    "catchup_policy",
    "overlap_policy",
)
_KNOWN_TYPES_SQL = "SELECT " + ", ".join(f"NULL::{t}" for t in KNOWN_TYPES)


Warm = Callable[[asyncpg.Connection], Awaitable[None]]


def _pool_init(warm: Warm | None) -> Callable[[asyncpg.Connection], Coroutine[Any, Any, None]]:
    async def init(conn: asyncpg.Connection) -> None:
        await _init_connection(conn)
        # An unmigrated database has no enums yet: its statements introspect on first use.
        with contextlib.suppress(asyncpg.UndefinedObjectError):
            await conn.fetchrow(_KNOWN_TYPES_SQL)
        if warm is not None:
            try:
                await warm(conn)
            except DB_ERRORS:
                raise
            except asyncpg.PostgresError as exc:  # an unmigrated or older schema: warmed later
                log_event(log, "pool_warm_skipped", level=logging.DEBUG, error=repr(exc))

    return init


# Per host of a multi-host DSN, as libpq's connect_timeout: asyncpg's one `timeout` spans
# the whole host list, so a first host that drops packets (a dead machine) would hide the rest.
HOST_CONNECT_TIMEOUT = 5.0
# Why a host is passed over for the next one: unreachable, starting or stopping, full, or not
# what target_session_attrs asks for (TargetServerAttributeNotMatched, an InternalClientError).
_NEXT_HOST = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InternalClientError,
)
# The host that answered last, per DSN: tried first, so after a failover new connections do
# not wait on the old primary each time.
_last_good: dict[str, int] = {}


async def open_connection(dsn: str, **kwargs: Any) -> asyncpg.Connection:
    """asyncpg.connect, trying each host of a multi-host DSN in turn with its own timeout.

    asyncpg applies target_session_attrs per host (read-write: a standby, or a server with
    default_transaction_read_only, is passed over). A single-host DSN goes to asyncpg as is.
    """
    hosts = split_hosts(dsn)
    if len(hosts) == 1:
        return cast(asyncpg.Connection, await asyncpg.connect(dsn, **kwargs))
    kwargs.setdefault("timeout", HOST_CONNECT_TIMEOUT)
    first = _last_good.get(dsn, 0)
    order = [*range(first, len(hosts)), *range(first)]
    for n, i in enumerate(order):
        try:
            conn = cast(asyncpg.Connection, await asyncpg.connect(hosts[i], **kwargs))
        except _NEXT_HOST:
            if n == len(order) - 1:
                raise
            continue
        _last_good[dsn] = i
        return conn
    raise AssertionError("unreachable")  # the loop returns or raises


# True on a server that takes writes (in recovery transaction_read_only is always on).
WRITABLE_PROBE = "SELECT current_setting('transaction_read_only') = 'off'"


async def open_listener(
    dsn: str, channel: str, on_notify: Callable[[str], None], step_seconds: float
) -> tuple[asyncpg.Connection, int]:
    """A connection LISTENing on `channel` on a writable server, and that server's port;
    each step waits at most `step_seconds`; `on_notify` gets each payload. A server that
    refuses writes raises one of DB_ERRORS (the caller retries elsewhere)."""
    conn = await open_connection(dsn, timeout=step_seconds)
    try:
        if not await conn.fetchval(WRITABLE_PROBE, timeout=step_seconds):
            raise asyncpg.TargetServerAttributeNotMatched("the server refuses writes: no LISTEN")
        await conn.add_listener(channel, lambda _c, _p, _ch, payload: on_notify(payload))
        port = await conn.fetchval("SELECT inet_server_port()", timeout=step_seconds)
    except BaseException:
        conn.terminate()
        raise
    return conn, port


# How a connection through a transaction pooler (PgBouncer, pool_mode = transaction) is
# made: no named statements (PgBouncer before 1.21 cannot carry them between server
# connections). asyncpg then sends each statement's Parse again with its Bind, Execute and
# Sync, so the pair lands on one server connection even outside a transaction
# (Connection._get_statement: "assuming people are running PgBouncer").
# client_encoding as the server spells it: asyncpg's own 'utf-8' never matches the server
# connection's UTF8 in PgBouncer 1.18's eyes, which then sent a SET before every statement
# (half of an idle fleet's transactions, bench/fleet.py).
POOLED: dict[str, Any] = {"statement_cache_size": 0, "server_settings": {"client_encoding": "UTF8"}}

# What a supervisor's pool sends at connect, and behind a transaction pooler (which refuses
# them as startup parameters, and would not keep them per client) expects from its role
# instead: `ALTER ROLE ... SET`, checked by `punchclock check` (role_settings_problems).
ROLE_SETTINGS = {
    # JIT off: these are short statements; a plan whose estimate crosses jit_above_cost
    # (the claim's limit CTEs guess 1,000 rows per generate_series) spent 190 ms compiling
    # on every claim.
    "jit": "off",
    # Every supervisor statement reads a few rows in index order (claim, next due run,
    # reap, prune, plan). Statistics from when the tables were small made the generic
    # claim a bitmap scan of every due run plus a sort: after a bulk insert of 5,000
    # runs the burst took 1.27x the spawn bound, 1.13x with this (docs/performance.md).
    "enable_bitmapscan": "off",
    # Likewise a table whose statistics say it is empty (a new deployment, a drain's
    # first minute before autovacuum's ANALYZE) was read whole by a completion of a few
    # runs: run_attempts once per batch, jobs 1.5 times per run (2,000-run drains: 346 ->
    # 91 rows read per run; bench.ab 1.01x and 1.03x, CPU per run -2 % and -4 %). A
    # table with no index on the join still gets its sequential scan.
    "enable_seqscan": "off",
}


async def role_settings_problems(conn: asyncpg.Connection) -> list[str]:
    """What the connected role lacks of ROLE_SETTINGS (behind a transaction pooler)."""
    names = list(ROLE_SETTINGS)
    got = await conn.fetchrow(
        "SELECT " + ", ".join(f"current_setting('{n}')" for n in names) + ", current_user"
    )
    assert got is not None
    return [
        f"{n} is {got[i]!r}, wants {want!r}: ALTER ROLE {got[len(names)]} SET {n} = {want}"
        for i, (n, want) in enumerate(ROLE_SETTINGS.items())
        if got[i] != want
    ]


async def connect(dsn: str, *, pooled: bool = False) -> asyncpg.Connection:
    """One connection with the jsonb codec (`pooled`: through a transaction pooler)."""
    conn = await open_connection(dsn, **(POOLED if pooled else {}))
    await _init_connection(conn)
    return conn


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release without asyncpg's reset round trip (RESET ALL, UNLISTEN *, unlock all).

    Nothing borrowed from a pool changes session state: transactions are closed by their
    context managers (asyncpg rolls back an open one before calling this), LISTEN runs on
    a connection of its own, and the migrator releases its advisory lock itself.
    """


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    generic_plans: bool = False,
    warm: Warm | None = None,
    pooled: bool = False,
    command_timeout: float = 30.0,
) -> asyncpg.Pool:
    """A pool of connections with the jsonb codec, JIT off.

    `generic_plans`: the supervisor's statements are few, fixed and written so their
    generic plans use the same indexes as custom ones; forcing generic plans saves
    PostgreSQL planning each claim afresh (the claim's `LIMIT $n` otherwise makes the
    planner prefer a custom plan every time: about 0.6 ms per claim). DESIGN.md, Database
    sessions.

    `warm`: run on each new connection after the types are named (the supervisor's hot
    statements with nothing to do, so their plans are made before the connection serves).

    `pooled`: `dsn` is a transaction pooler: no startup settings (the role carries them),
    no named statements (POOLED), nothing warmed (an unnamed statement is planned at each
    use).
    """
    settings = {"jit": ROLE_SETTINGS["jit"]}
    if generic_plans:
        settings = dict(ROLE_SETTINGS, plan_cache_mode="force_generic_plan")
    extra: dict[str, Any] = {"server_settings": settings}
    if pooled:
        extra, warm = POOLED, None
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        connect=cast(Any, open_connection),  # the stubs' protocol spells out every keyword
        init=_pool_init(warm),
        reset=_keep_session,
        **extra,
        # Short command timeout: a hung connection must not hold a lease renewal hostage.
        command_timeout=command_timeout,
    )
    assert pool is not None
    return pool


async def read_only_seen(pool: asyncpg.Pool) -> None:
    """25006: the server refuses writes (a standby after a failover, or an old primary fenced
    with default_transaction_read_only), and the rest of the pool likely sits on it too.
    Expired connections are closed and replaced on the next acquire, where
    target_session_attrs=read-write picks the writable host."""
    log_event(log, "db_read_only", level=logging.WARNING)
    await pool.expire_connections()
