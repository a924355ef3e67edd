"""Named SQL: queries.sql split into `-- name:` blocks, and the base that runs them over a
pool or one connection, translating asyncpg's errors at this boundary (with db.py, the only
code that names them)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, Self

import asyncpg

from supervisor.core.db import Conn, Record, read_only_seen
from supervisor.core.errors import Conflict, RefusedValue, UniqueConflict
from supervisor.core.model import RunStatus

_QUERY_HEADER = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
# A fragment (a WITH-list entry, or a final SELECT, that several queries share) is written
# once and pasted where a query says {{NAME}}; {{NAME+K}} pastes it with its parameters
# renumbered ($1 becomes $(1+K)), so that two statements' parts can make one.
_USE = re.compile(r"\{\{(\w+)(?:\+(\d+))?\}\}")
_PARAM = re.compile(r"\$(\d+)")
_LEADING_COMMENT = re.compile(r"\A(?:--[^\n]*\n)+")
# A branch written once and repeated for every run status, joined by UNION ALL, so that
# a merge across statuses reads one runs_status_history range per status and PostgreSQL
# merges the ordered ranges (Merge Append) instead of sorting (DESIGN.md, Indexes).
_EACH_STATUS = re.compile(r"^[ \t]*-- each status:\n(.*?)^[ \t]*-- end each\n", re.M | re.S)


def _each_status(match: re.Match[str]) -> str:
    branch = match.group(1).rstrip()
    return "\nUNION ALL\n".join(branch.replace("{status}", s.value) for s in RunStatus) + "\n"


WAKE_CHANNEL = "punchclock_wake"


def load_queries() -> dict[str, str]:
    """Every `-- name:` block of the package's .sql files (queries.sql, and one file per
    feature beside it), `-- fragment:` blocks pasted in; a name defined twice is an error."""
    blocks: dict[tuple[str, str], str] = {}
    files = sorted(
        (f for f in resources.files("supervisor.core").iterdir() if f.name.endswith(".sql")),
        key=lambda f: f.name,
    )
    for file in files:
        parts = _QUERY_HEADER.split(file.read_text())
        for kind, name, text in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            if (kind, name) in blocks:
                raise ValueError(f"{file.name}: {kind} {name!r} defined twice")
            body = _EACH_STATUS.sub(_each_status, text).strip()
            if kind == "fragment":  # its comment stays in the file
                body = _LEADING_COMMENT.sub("", body)
            blocks[kind, name] = body

    def expand(text: str, within: tuple[str, ...] = ()) -> str:
        def paste(use: re.Match[str]) -> str:
            name, shift = use.group(1), int(use.group(2) or 0)
            if ("fragment", name) not in blocks:
                raise ValueError(f"no fragment {name!r}")
            if name in within:
                raise ValueError(f"fragment {name!r} pastes itself")
            body = expand(blocks["fragment", name], (*within, name))
            return _PARAM.sub(lambda p: f"${int(p.group(1)) + shift}", body) if shift else body

        return _USE.sub(paste, text)

    return {n: expand(b) for (kind, n), b in blocks.items() if kind == "name"}


QUERIES = load_queries()


class _Translated:
    """Around every query: asyncpg's unique violation becomes the domain's UniqueConflict
    and a data error its RefusedValue (errors.py); a server that refuses writes makes the
    pool drop its connections before the failing one is reused (db.read_only_seen). One
    instance per Store, no allocation."""

    __slots__ = ("pool",)

    def __init__(self, pool: asyncpg.Pool | None) -> None:
        self.pool = pool

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if isinstance(exc, asyncpg.UniqueViolationError):
            raise UniqueConflict(exc.constraint_name or "", str(exc)) from exc
        if isinstance(exc, asyncpg.ForeignKeyViolationError):  # a row others refer to
            raise Conflict(f"still referred to ({exc.constraint_name})") from exc
        if isinstance(exc, asyncpg.DataError):
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RefusedValue(getattr(exc, "sqlstate", None), message) from exc
        if isinstance(exc, asyncpg.ReadOnlySQLTransactionError) and self.pool is not None:
            await read_only_seen(self.pool)


class Queries:
    """Named queries over a pool or a connection: the base of Store (and its parts)."""

    def __init__(self, executor: asyncpg.Pool | Conn, pool: asyncpg.Pool | None = None) -> None:
        self._ex = executor
        self._pool = executor if isinstance(executor, asyncpg.Pool) else pool
        self._translated = _Translated(self._pool)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Self]:
        """The same queries bound to one connection inside a transaction."""
        async with self._translated:  # a deferred unique check fails at COMMIT
            if not isinstance(self._ex, asyncpg.Pool):
                async with self._ex.transaction():
                    yield type(self)(self._ex, self._pool)
                return
            async with self._ex.acquire() as conn, conn.transaction():
                yield type(self)(conn, self._pool)

    async def _fetch(self, name: str, *args: Any) -> list[Record]:
        async with self._translated:
            return await self._ex.fetch(QUERIES[name], *args)

    async def _fetchrow(self, name: str, *args: Any) -> Record | None:
        async with self._translated:
            return await self._ex.fetchrow(QUERIES[name], *args)

    async def _fetchval(self, name: str, *args: Any) -> Any:
        async with self._translated:
            return await self._ex.fetchval(QUERIES[name], *args)

    async def _execute(self, name: str, *args: Any) -> str:
        async with self._translated:
            return await self._ex.execute(QUERIES[name], *args)

    async def _copy_in(self, table: str, columns: Sequence[str], data: bytes) -> str:
        """COPY `data` (binary format) into `table`; the command tag ("COPY n")."""

        async def source() -> AsyncIterator[bytes]:
            yield data

        async with self._translated:
            return await self._ex.copy_to_table(
                table, source=source(), columns=list(columns), format="binary"
            )
