"""systemd's notify protocol (READY=1, RELOADING=1, WATCHDOG=1, STATUS=..., STOPPING=1) without
libsystemd.

A no-op when NOTIFY_SOCKET is unset, so the same code runs under systemd and anywhere else.
"""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):  # abstract namespace socket
            address = "\0" + address[1:]
        self.address = address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        mine = not pid or pid == str(os.getpid())
        self.watchdog_interval = int(usec) / 2e6 if usec.isdigit() and mine else None
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def send(self, *lines: str) -> bool:
        if not self.address:
            return False
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        try:
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def reloading(self) -> bool:
        """A reload (SIGHUP) begins; ready() ends it. systemd wants the monotonic clock with
        it (sd_notify(3)), to tell this reload from an earlier one."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}", "STATUS=reloading")

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={status}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1", "STATUS=draining")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
