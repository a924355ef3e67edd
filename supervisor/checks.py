"""What `punchclock check` asks beyond the handlers: the database, and an insecure
configuration."""

from __future__ import annotations

import asyncio

from supervisor.core.config import Config
from supervisor.core.errors import SchemaMismatch


def security_warnings(cfg: Config) -> list[str]:
    """What an insecure configuration risks (DESIGN.md, Threat model): warnings, not problems,
    since a lab may choose them."""
    from api import gate, permissions, tls
    from supervisor.core import credfile, egress

    checks = (gate, permissions, tls, credfile, egress)
    return [w for m in checks for w in m.config_warnings(cfg)]


def database_problems(dsn: str, pooled: bool) -> list[str]:
    """Reachable, migrated, and behind a transaction pooler, the role's settings made."""
    from supervisor.core.db import connect, role_settings_problems
    from supervisor.core.migrator import pending_migrations

    async def run() -> list[str]:
        try:
            conn = await connect(dsn, pooled=pooled)
        except Exception as exc:
            return [f"database unreachable: {exc}"]
        try:
            pending = await pending_migrations(conn)
            roles = await role_settings_problems(conn) if pooled else []
        except SchemaMismatch as exc:
            return [str(exc)]
        finally:
            await conn.close()
        return [f"migrations pending: {', '.join(pending)}"] * bool(pending) + [
            f"database_pooler = transaction: {p}" for p in roles
        ]

    return asyncio.run(run())
