"""An admin DSN for throwaway databases, for the tests and the benchmarks (not the daemon).

The first that works: a URL from the environment; testcontainers' PostgreSQL when a Docker
engine answers a ping within 2 s; a throwaway local cluster (supervisor.local.pgserver, the same
code as `punchclock up`), removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def with_database(dsn: str, dbname: str) -> str:
    """The same server and credentials, another database."""
    return urlunsplit(urlsplit(dsn)._replace(path="/" + dbname))


@contextlib.contextmanager
def admin_dsn(
    env_vars: Sequence[str], prefix: str, settings: dict[str, str] | None = None
) -> Iterator[str]:
    """Yield an admin DSN; a server started here (with `settings` over the throwaway ones)
    is stopped on exit."""
    for var in env_vars:
        if url := os.environ.get(var):
            yield url
            return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer  # the `test` extra

        with PostgresContainer("postgres:16-alpine", driver=None) as pg:
            yield pg.get_connection_url()
        return
    from supervisor.local.pgserver import LocalPostgres

    with tempfile.TemporaryDirectory(prefix=prefix, dir="/tmp") as tmp:
        os.chmod(tmp, 0o755)  # the cluster may run as the `postgres` user (we may be root)
        server = LocalPostgres(Path(tmp) / "pg", persistent=False, settings=settings)
        try:
            yield server.start()
        finally:
            server.stop()


def _docker_answers(timeout: float = 2.0) -> bool:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(host.removeprefix("unix://"))
            s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b"OK" in s.recv(1024)
    except OSError:
        return False
