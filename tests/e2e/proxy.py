"""A TCP proxy in front of PostgreSQL that a test can cut off, to make the database
unreachable for one supervisor without touching the server everyone shares.

`cut()` models a network partition: bytes stop flowing both ways on every connection,
and new connections are accepted but never answered (a client's connect hangs exactly
as it would against an unreachable host; nothing is refused, which would be a kinder,
faster failure). `restore()` ends the partition the way long ones usually end: every
connection that lived through it is reset, and new connections work again.

It runs its own event loop in a thread, so it keeps working whatever the test does.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine
from typing import Any


class CuttableProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> int:
        self._thread.start()
        self._call(self._start())
        return self.port

    def cut(self) -> None:
        self._call(self._set_cut(True))

    def restore(self) -> None:
        self._call(self._set_cut(False))

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(5)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_cut(self, cut: bool) -> None:
        if self._cut and not cut:
            self._reset_all()
        self._cut = cut

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()  # every pipe sees its end and returns
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2)
        for task in list(self._tasks):
            task.cancel()

    def _reset_all(self) -> None:
        for writer in list(self._writers):
            sock = writer.get_extra_info("socket")
            if sock is not None:  # RST rather than FIN: the peer learns at once
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            while self._cut:  # accepted, never answered, until the partition ends
                if writer.transport.is_closing():
                    return
                await asyncio.sleep(0.01)
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            self._writers.add(up_writer)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            # Ends the connection's task quietly: asyncio logs a callback error when a
            # start_server handler task ends cancelled.
            pass
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                while self._cut:  # hold the bytes: nothing crosses a partition
                    if writer.transport.is_closing():
                        return
                    await asyncio.sleep(0.01)
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.transport.abort()
