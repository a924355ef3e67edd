"""What the browser journeys share: a page that records console errors, and screenshots
written under the test's own tmp dir (artifacts, never committed)."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.async_api import ConsoleMessage, Page

_FAILED_LOAD = re.compile(r"Failed to load resource: the server responded with a status of (\d+)")


class Watched:
    """A Playwright page whose console errors and uncaught exceptions are collected."""

    def __init__(self, page: Page, shots: Path) -> None:
        self.page = page
        self.shots = shots
        self.errors: list[str] = []
        # Statuses a step expects (a refused login is a 401): Chromium logs those as
        # "Failed to load resource", which is then not an error of the page.
        self.expected: set[int] = set()
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.set_default_timeout(10_000)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        status = _FAILED_LOAD.match(message.text)
        if status is None or int(status.group(1)) not in self.expected:
            self.errors.append(message.text)

    async def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        await self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000, f"{name}: an empty screenshot"
        return path

    def no_errors(self) -> None:
        assert self.errors == [], f"console errors: {self.errors}"
