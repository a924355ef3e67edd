"""Handler-controlled text in log lines cannot act on the operator's terminal: the text
format (stderr a terminal) shows ESC, other C0 and C1 controls and bidi overrides as escapes;
JSON lines escape them through json. The string is what a failing handler's stderr tail
puts in `run_dead`'s `stderr_tail` and in the attempt's error."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from supervisor.core.log import JsonFormatter, log_event, setup_logging, terminal_safe

# OSC 52 (write "evil" to the clipboard), clear the screen, a one-byte C1 CSI, a bidi
# override, a carriage return that would overwrite the start of the line.
HOSTILE = "\x1b]52;c;ZXZpbA==\x07 \x1b[2J\x9b1;1H\u202egnp.exe\r"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_the_text_format_escapes_what_a_terminal_would_act_on(restore_logging: None) -> None:
    stream = _Tty()
    setup_logging("info", stream)  # a terminal: the text format
    log_event(
        logging.getLogger("punchclock.executor"),
        "run_dead",
        level=logging.WARNING,
        run_id=7,
        stderr_tail=HOSTILE + "\tnext\nsecond line",
    )
    line = stream.getvalue()
    for ch in RAW:
        assert ch not in line, repr(line)
    assert "\\x1b]52;c;ZXZpbA==\\x07 \\x1b[2J\\x9b1;1H\\u202egnp.exe\\x0d" in line
    assert "\tnext" in line  # tab and newline stay, and a value's next line is indented
    assert line.endswith("\\x0d\tnext\n    second line\n"), repr(line)
    assert line.count("\n") == 2


def test_json_lines_escape_them_and_keep_the_value() -> None:
    record = logging.LogRecord(
        "punchclock.executor", logging.WARNING, "", 0, "run_dead", None, None
    )
    record.punchclock_fields = {"stderr_tail": HOSTILE}
    line = JsonFormatter().format(record)
    for ch in RAW:
        assert ch not in line, repr(line)
    assert json.loads(line)["stderr_tail"] == HOSTILE


def test_terminal_safe_leaves_ordinary_text_alone() -> None:
    text = "exit 1: Traceback (most recent call last):\n\tfile «x» — naïve ✓"
    assert terminal_safe(text) == text
    assert terminal_safe("\x00\x7f\x85\u2066") == "\\x00\\x7f\\x85\\u2066"
