"""Colour for the CLI's human output, on a terminal only (never when stdout is not one, nor
with NO_COLOR set: no-color.org).

Formatters mark trusted words (a status, a header) with paint(); for_terminal() first escapes
everything a terminal would act on (terminal_safe: the API's text includes handlers' output),
then turns the marks into colour codes, or drops them. A mark carries a per-process nonce, so
text that came from the API cannot forge one.
"""

from __future__ import annotations

import os
import re
import secrets
from typing import TextIO

from supervisor.core.log import terminal_safe

SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
_MARK = "\x1a" + secrets.token_hex(8)  # \x1a: terminal_safe shows it as the text "\\x1a"
_MARKED = re.compile(re.escape(terminal_safe(_MARK)) + r"(\w*):")


def paint(text: str, colour: str) -> str:
    """`text` marked to show in `colour` (a key of SGR; "" or unknown: as it is)."""
    if colour not in SGR:
        return text
    return f"{_MARK}{colour}:{text}{_MARK}:"


def use_colour(stream: TextIO) -> bool:
    return not os.environ.get("NO_COLOR") and stream.isatty()


def for_terminal(text: str, colour: bool) -> str:
    """`text` safe to print (terminal_safe), its marks as colour codes or removed."""

    def code(m: re.Match[str]) -> str:
        if not colour:
            return ""
        return f"\x1b[{SGR[m[1]]}m" if m[1] else "\x1b[0m"

    return _MARKED.sub(code, terminal_safe(text))
