"""Structured logging: one line per event, JSON when stderr is not a terminal, text when it is.

`log_event(logger, "run_succeeded", run_id=1, ...)` is the only way services log events, so
every line carries the event name and its fields as data (journald and shippers parse it).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

_FIELDS = "punchclock_fields"


def log_event(
    logger: logging.Logger, event: str, *, level: int = logging.INFO, **fields: Any
) -> None:
    if logger.isEnabledFor(level):
        # The record is built here: Logger.log would walk the stack for a caller's file and
        # line that no formatter of ours prints (a few µs, and several lines per run).
        record = logging.LogRecord(logger.name, level, "", 0, event, None, None)
        setattr(record, _FIELDS, fields)
        logger.handle(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        line.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created).strftime("%H:%M:%S.%f")[:-3]
        fields = getattr(record, _FIELDS, {})
        kv = " ".join(f"{k}={v}" for k, v in fields.items())
        text = f"{ts} {record.levelname:<7} {record.getMessage()} {kv}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup_logging(
    level: str = "info", stream: TextIO | None = None, json_lines: bool | None = None
) -> None:
    stream = stream or sys.stderr
    # Our formatters print none of these: skip collecting them for every record.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    if json_lines is None:
        json_lines = not stream.isatty()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log duplicates our own request logging at info level.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("asyncpg.pool").addFilter(_one_line)


def _one_line(record: logging.LogRecord) -> bool:
    """asyncpg's pool logs each failed reconnect with a traceback (a fleet while PgBouncer or
    PostgreSQL restarts: one per host per retry); keep it as one line with the error."""
    if record.exc_info and record.exc_info[1] is not None:
        setattr(record, _FIELDS, {"error": repr(record.exc_info[1])})
        record.exc_info = None
        record.exc_text = None
    return True
