"""Output capture: the last bytes of a child's stdout and stderr (Tail), read from their pipes
at its exit, or as they come once it has run a while (Capture); as text that can be stored.

Handlers may print anything (gzip, pg_dump -Fc, progress bars); a tail must never make the
record that carries it fail (DESIGN.md, Handler contract: Output).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

_READ_SIZE = 1 << 16  # the default pipe capacity: one read empties a full pipe
_DRAIN_READS = 16  # reads of a pipe at exit before it is watched instead


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


class Capture:
    """A child's two output pipes and their tails. Read at its exit (drain), or as output
    comes once watched (watch: a reader each on the event loop); `on_closed` is called when a
    watched pipe reaches EOF (whoever waits for both to close checks `closed`)."""

    __slots__ = ("_loop", "_on_closed", "err", "out")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        out: int,
        err: int,
        limit: int,
        on_closed: Callable[[], None],
    ) -> None:
        self._loop = loop
        self.out = Tail(out, limit)
        self.err = Tail(err, limit)
        self._on_closed = on_closed

    @property
    def closed(self) -> bool:
        return self.out.closed and self.err.closed

    def live(self) -> tuple[int, str, str]:
        """(bytes received so far on both, stdout tail, stderr tail)."""
        return self.out.fed + self.err.fed, self.out.text()[0], self.err.text()[0]

    def watch(self) -> None:
        self._watch(self.out)
        self._watch(self.err)

    def drain(self) -> None:
        """At exit: read what each pipe holds; close it at EOF, else watch it (a descendant
        still holds it open, or writes on)."""
        self._drain(self.out)
        self._drain(self.err)

    def close(self) -> None:
        self._close(self.out)
        self._close(self.err)

    def _watch(self, tail: Tail) -> None:
        if not tail.watched and not tail.closed:
            tail.watched = True
            self._loop.add_reader(tail.fd, self._on_readable, tail)

    def _drain(self, tail: Tail) -> None:
        if tail.closed or tail.watched:
            return
        for _ in range(_DRAIN_READS):
            try:
                data = os.read(tail.fd, _READ_SIZE)
            except BlockingIOError:
                self._watch(tail)
                return
            except OSError:
                data = b""
            if not data:
                self._close(tail)
                return
            tail.feed(data)
        self._watch(tail)  # a descendant writes on as fast as we read: take turns

    def _on_readable(self, tail: Tail) -> None:
        try:
            data = os.read(tail.fd, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            tail.feed(data)
            return
        self._close(tail)
        self._on_closed()

    def _close(self, tail: Tail) -> None:
        if not tail.closed:
            if tail.watched:
                self._loop.remove_reader(tail.fd)
            tail.close()
