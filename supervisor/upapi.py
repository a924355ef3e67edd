"""`punchclock up`'s API child: `punchclock api` whose access log (its `http_request` lines)
goes to a file instead of `up`'s terminal, where the banner, warnings and failed runs stay
readable. Everything else the API logs still reaches the terminal.

Run as `python -m supervisor.upapi ACCESS_LOG api [flags]`: an entry point standing on the
CLI, so it lives beside it rather than in local/.
"""

from __future__ import annotations

import logging
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

from supervisor.core.log import JsonFormatter

ACCESS_EVENT = "http_request"  # api.app.request_log's event
MAX_BYTES = 10 * 1024 * 1024  # per file; one older file is kept (.1)


class AccessToFile(logging.Filter):
    """On the API's logger: access lines go to `handler` and no further."""

    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != ACCESS_EVENT:
            return True
        if record.levelno >= self.handler.level:
            self.handler.handle(record)
        return False


def divert_access_log(path: Path) -> None:
    handler = RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=1, encoding="utf-8")
    handler.setFormatter(JsonFormatter())
    # On the logger, not the root: `punchclock api` replaces the root's handlers at start.
    logging.getLogger("punchclock.api").addFilter(AccessToFile(handler))


def main(argv: list[str]) -> int:
    from supervisor.cli import main as cli_main

    divert_access_log(Path(argv[0]))
    return cli_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
