"""The deliveries page without a browser: newest first, status and channel filters, keyset
pages, a bad filter named, and never a channel's secret or URL path."""

from __future__ import annotations

import re

from supervisor.core import channels
from supervisor.core.events import ChannelSpec
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, READER
from ..notify_support import SECRET
from .conftest import Ui


def ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<td class="num mono">(\d+)</td>', html)]


async def _channel(store: Store, name: str) -> int:
    url = f"https://hooks.example.com/services/{name}-PATHSECRET"
    return (await channels.create_channel(store, ChannelSpec(name, url, secret=SECRET))).id


async def test_deliveries_newest_first_filtered_and_paged(ui_reader: Ui, store: Store) -> None:
    ops, pager = await _channel(store, "ops"), await _channel(store, "pager")
    sent = [await channels.test_channel(store, ops) for _ in range(60)]
    failed = await channels.test_channel(store, pager)
    await factory.sql(  # one delivery failed for good (the row's state is the point)
        store,
        "UPDATE outbox SET status = 'failed', attempts = 9, last_status = 500,"
        " last_error = 'HTTP 500', finished_at = now() WHERE id = $1",
        failed,
    )
    status, html = await ui_reader.get("/ui/deliveries")
    assert status == 200
    assert ids(html) == [failed, *sent[::-1]][:50]
    assert "PATHSECRET" not in html and SECRET not in html and SECRET[6:] not in html
    found = re.search(r'<a href="([^"]+)" rel="next">', html)
    assert found is not None
    _, older = await ui_reader.get(found.group(1).replace("&amp;", "&"))
    assert ids(older) == sent[::-1][49:]
    _, html = await ui_reader.get("/ui/deliveries?status=failed")
    # A read session sees the status class only (issue 62: no port scanner); admin below.
    assert ids(html) == [failed] and "HTTP 5xx" in html and "HTTP 500" not in html
    _, html = await ui_reader.get("/ui/deliveries?channel=ops&status=pending")
    assert ids(html)[:3] == sent[::-1][:3] and failed not in ids(html)
    _, html = await ui_reader.get("/ui/deliveries?channel=nosuch")
    assert ids(html) == [] and "No delivery matches" in html
    status, html = await ui_reader.get("/ui/deliveries?status=lost")
    assert status == 422 and "status" in html


async def test_only_an_admin_session_sees_status_codes_and_error_text(
    ui_anon: Ui, store: Store
) -> None:
    """The exact error of a failed delivery (a connection error naming an inner address and
    port) is an admin's; a read session sees "connection error" and no status code."""
    ops = await _channel(store, "ops")
    scanned = await channels.test_channel(store, ops)
    probe = await channels.test_channel(store, ops)
    await factory.sql(
        store,
        "UPDATE outbox SET status = 'failed', attempts = 1, finished_at = now(), last_error ="
        " 'ClientConnectorError: Cannot connect to host 10.0.0.7:5432' WHERE id = $1",
        scanned,
    )
    await factory.sql(
        store,
        "UPDATE outbox SET status = 'failed', attempts = 1, finished_at = now(),"
        " last_status = 401, last_error = 'HTTP 401' WHERE id = $1",
        probe,
    )
    await ui_anon.login(READER)
    _, html = await ui_anon.get("/ui/deliveries?status=failed")
    assert "10.0.0.7" not in html and "5432" not in html and "401" not in html
    assert "connection error" in html and "HTTP 4xx" in html
    await ui_anon.login(ADMIN)
    _, html = await ui_anon.get("/ui/deliveries?status=failed")
    assert "Cannot connect to host 10.0.0.7:5432" in html and "HTTP 401" in html


async def test_deliveries_need_a_session(ui_anon: Ui) -> None:
    status, _ = await ui_anon.get("/ui/deliveries")
    assert status in (302, 303, 401)
