"""Helpers for the API tests: an in-process app on a real PostgreSQL and a
`punchclock api` subprocess whose listening URL is read from its start-up log line."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from api.app import create_app
from supervisor.core.config import Config
from supervisor.core.store import Store

ADMIN = "admin-token-0123456789abcdef"
READER = "read-token-0123456789abcdef"
TOKENS = (f"admin:{ADMIN}", f"read:{READER}")


def config(**kw: Any) -> Config:
    return replace(Config(), **kw)


@asynccontextmanager
async def api_client(store: Store, **cfg: Any) -> AsyncIterator[TestClient[Any, Any]]:
    """The API in-process. Without `api_tokens` it is configured with TOKENS and every
    request carries the admin token (there is no tokenless API); with them, none does."""
    headers = {}
    if "api_tokens" not in cfg:
        cfg["api_tokens"] = TOKENS
        headers["Authorization"] = f"Bearer {ADMIN}"
    app = create_app(config(**cfg), store)
    async with TestClient(TestServer(app, host="127.0.0.1"), headers=headers) as client:
        yield client


@contextmanager
def api_process(dsn: str, *args: str, env: dict[str, str] | None = None) -> Iterator[ApiProcess]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "api", "--database-url", dsn, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    handle = ApiProcess(proc)
    try:
        yield handle
    finally:
        handle.stop()


class ApiProcess:
    """A running `punchclock api`; a thread collects its stderr (JSON log lines)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for_line(
        self, match: Callable[[dict[str, Any]], bool], timeout: float = 30.0
    ) -> dict[str, Any]:
        """Wait for a JSON log line that matches; fail at the deadline or if the log ends."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                raise AssertionError(f"no matching log line; got: {self.lines}")
            self.lines.append(line)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if match(event):
                return dict(event)

    def url(self) -> str:
        event = self.wait_for_line(lambda e: e.get("event") == "api_listening")
        return str(event["urls"][0])

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout)
        self._reader.join(timeout)
        while not self._queue.empty():
            line = self._queue.get()
            if line is not None:
                self.lines.append(line)
        return code


def run_schemathesis(
    dsn: str, tmp_path: Path, seconds: float, args: list[str], env: dict[str, str] | None = None
) -> None:
    """Run schemathesis's `st run` against a live API process for `seconds` (its own CLI, as
    an operator would); fail on any failed check, and if the API process died meanwhile."""
    st = Path(sys.executable).with_name("st")
    # Its ignored_auth check sends wrong tokens by design: no throttling (429) for it.
    unthrottled = {"PUNCHCLOCK_API_AUTH_THROTTLE": "0"}
    with api_process(
        dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0], env=unthrottled
    ) as proc:
        url = proc.url()
        result = subprocess.run(
            [
                *(str(st), "--no-color", "run", f"{url}/openapi.json"),
                *("--header", f"Authorization: Bearer {ADMIN}"),
                *("--max-time", str(seconds), "--request-timeout", "10", *args),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=False,
            env={**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
            | (env or {}),
        )
        assert proc.proc.poll() is None, "the API process survived the run"
    assert result.returncode == 0, _st_failures(result.stdout) + result.stderr[-2000:]
    assert "passed" in result.stdout


def http(
    url: str, method: str = "GET", token: str | None = None, body: Any = None
) -> tuple[int, str, bytes]:
    """One request to a live API process over urllib: (status, content type, body). An
    error status is returned like any other, not raised."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get_content_type(), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get_content_type(), exc.read()


def _st_failures(out: str) -> str:
    """st's FAILURES section (each failed check and its curl line) first, lines cut to 300
    characters: CI shows only the start of a long message, and a generated value can be
    kilobytes."""
    start = out.find(" FAILURES ")
    end = min((i for i in (out.find(" WARNINGS ", start), out.find(" SUMMARY ", start)) if i > 0),
              default=len(out))  # fmt: skip
    section = out[start:end] if start >= 0 else ""
    lines = [line if len(line) <= 300 else line[:300] + "…" for line in section.splitlines()]
    return "\n".join(lines)[:6000] + "\n…\n" + out[-2000:]
