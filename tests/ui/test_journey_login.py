"""Journey in a real Chromium against a real `punchclock api` process: a wrong token is
refused on the page, the right one opens the dashboard; no console errors (the CSP would
report any inline script or style)."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Page, expect

from ..api_support import ADMIN, TOKENS, api_process
from .journeys import Watched


async def test_login_with_wrong_then_right_token(tab: Page, dsn: str, tmp_path: Path) -> None:
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await tab.goto(f"{url}/ui/?since=1h")
        await expect(tab).to_have_url(f"{url}/ui/login?next=%2Fui%2F%3Fsince%3D1h")
        w.expected.add(401)
        await tab.get_by_label("API token").fill("wrong-token-0123456789")
        await tab.get_by_role("button", name="Log in").click()
        await expect(tab.get_by_role("alert")).to_have_text("That token is not valid.")
        await w.shot("login-refused")
        await tab.get_by_label("API token").fill(ADMIN)
        await tab.get_by_role("button", name="Log in").click()
        await expect(tab).to_have_url(f"{url}/ui/?since=1h")  # where it was going
        await expect(tab.get_by_role("heading", name="Overview")).to_be_visible()
        await expect(tab.get_by_role("navigation", name="main")).to_be_visible()
        await w.shot("overview")
        await tab.get_by_role("button", name="Log out").click()
        await expect(tab.get_by_role("heading", name="Log in")).to_be_visible()
        w.no_errors()
