"""Log lines as operators read them: asyncpg's pool reconnect failures are one JSON line with
the error, not a traceback per host per retry."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from supervisor.core.log import setup_logging


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = io.StringIO()
    setup_logging("info", out, json_lines=True)
    yield out
    root.handlers[:], root.level = handlers, level
    logging.getLogger("asyncpg.pool").filters.clear()


def test_a_pool_reconnect_failure_is_one_line_with_its_error(stream: io.StringIO) -> None:
    try:
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 6432)")
    except OSError:
        logging.getLogger("asyncpg.pool").warning("Failed to restore the pool", exc_info=True)
    [line] = stream.getvalue().splitlines()
    record = json.loads(line)
    assert "exception" not in record and "Traceback" not in line
    assert record["error"].startswith("ConnectionRefusedError(111")
    assert record["logger"] == "asyncpg.pool" and record["level"] == "warning"


def test_other_tracebacks_are_kept(stream: io.StringIO) -> None:
    try:
        raise ValueError("a bug")
    except ValueError:
        logging.getLogger("punchclock.x").exception("boom")
    assert "Traceback" in json.loads(stream.getvalue())["exception"]
