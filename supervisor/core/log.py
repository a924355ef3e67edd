"""Structured logging: one line per event, JSON when stderr is not a terminal, text when it is.

`log_event(logger, "run_succeeded", run_id=1, ...)` is the only way services log events, so
every line carries the event name and its fields as data (journald and shippers parse it).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

_FIELDS = "punchclock_fields"
# What a terminal would act on rather than show: C0 controls but tab and newline (ESC starts
# CSI and OSC sequences: cursor moves, clearing, the title, OSC 52 writes the clipboard), DEL,
# C1 controls (0x9b is a one-byte CSI), and the bidi overrides that reorder a line.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """`text` with every character a terminal would act on shown as an escape (`\\x1b`):
    for text a handler controls (its output, its errors) on its way to an operator's
    terminal."""
    return _UNSAFE.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if m[0] < "\u0100" else f"\\u{ord(m[0]):04x}", text
    )


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
        # A value's own lines are indented: none can pass for an event line of its own.
        kv = " ".join(f"{k}={v}".replace("\n", "\n    ") for k, v in fields.items())
        text = f"{ts} {record.levelname:<7} {record.getMessage()} {kv}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return terminal_safe(text)  # JSON lines need nothing: json.dumps escapes them all


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
