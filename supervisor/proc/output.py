"""Output tails: the last bytes of a child's stdout or stderr, as text that can be stored.

Handlers may print anything (gzip, pg_dump -Fc, progress bars); a tail must never make the
record that carries it fail (DESIGN.md, Handler contract: Output).
"""

from __future__ import annotations

import os


class Tail:
    """The last `limit` bytes of one output pipe, read from its (non-blocking) descriptor."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd = fd
        self.closed = False
        self.limit = max(limit, 0)
        self.buf = bytearray()
        self.truncated = False
        self.fed = 0  # bytes received so far: tells a live reader whether anything is new
        self.watched = False  # read by an event-loop reader (else only at the child's exit)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def feed(self, data: bytes) -> None:
        self.fed += len(data)
        self.buf += data
        if len(self.buf) > self.limit:
            del self.buf[: len(self.buf) - self.limit]
            self.truncated = True

    def text(self) -> tuple[str, bool]:
        """The tail as storable text, and whether bytes had to be replaced to make it so."""
        start = 0
        if self.truncated:  # the cut may have split a UTF-8 sequence: drop its orphaned bytes
            while start < min(3, len(self.buf)) and self.buf[start] & 0xC0 == 0x80:
                start += 1
        return storable_text(self.buf[start:])


def storable_text(data: bytes | bytearray) -> tuple[str, bool]:
    """Storable text (valid UTF-8, no NUL): invalid UTF-8 and NUL become U+FFFD; True if
    any did."""
    try:
        text = data.decode("utf-8")
        replaced = False
    except UnicodeDecodeError:
        text, replaced = data.decode("utf-8", errors="replace"), True
    if "\0" in text:
        text, replaced = text.replace("\0", "\ufffd"), True
    return text, replaced
