"""The deliveries page: notification deliveries newest first (what was sent, what is still
retried, what failed), filtered by status and channel, keyset-paged by id. Read-only; the
channels themselves are managed through the API and the CLI. No secret is ever shown, and
only an admin session sees a delivery's status code and error text; others see a coarse
outcome (egress.coarse_error), as on /v1/deliveries."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from api.ui.common import is_admin, render, store
from api.ui.guard import PREFIX
from supervisor.core.channels import notifications
from supervisor.core.egress import coarse_error
from supervisor.core.errors import InvalidSpec
from supervisor.core.model import MAX_ID, NAME

routes = web.RouteTableDef()
PAGE = 50
STATUSES = ("pending", "delivered", "failed")


def _filters(request: web.Request) -> tuple[list[str], str | None, int]:
    """(statuses, channel name, before id) from the query; a bad value names its field."""
    q = request.query
    statuses = q.getall("status", [])
    for s in statuses:
        if s not in STATUSES:
            raise InvalidSpec("status", f"must be one of {', '.join(STATUSES)}")
    channel = q.get("channel") or None
    if channel is not None and not NAME.fullmatch(channel):
        raise InvalidSpec("channel", "must be a channel name")
    before = q.get("before", "")
    if before and (not before.isdigit() or not 0 < int(before) <= MAX_ID):
        raise InvalidSpec("before", "must be a delivery id")
    return statuses, channel, int(before) if before else MAX_ID


@routes.get("/deliveries")
async def deliveries(request: web.Request) -> web.StreamResponse:
    statuses, channel, before = _filters(request)
    n = notifications(store(request))
    names = {c.spec.name: c.id for c in await n.list_channels()}
    rows: list[Any] = []
    if channel is None or channel in names:
        rows = await n.list_deliveries(
            before, names.get(channel or ""), statuses or None, None, None, PAGE + 1
        )
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    if not is_admin(request):  # operator and read: no status code, no error text
        rows = [
            {
                **r,
                "last_status": None,
                "last_error": coarse_error(r["last_status"], r["last_error"]),
            }
            for r in rows
        ]
    base = [("status", s) for s in statuses] + ([("channel", channel)] if channel else [])
    next_url = None
    if more:
        next_url = f"{PREFIX}deliveries?{urlencode([*base, ('before', rows[-1]['id'])])}"
    context = {
        "deliveries": rows,
        "channels": sorted(names),
        "statuses": STATUSES,
        "chosen": set(statuses),
        "channel": channel,
        "next_url": next_url,
        "first_url": f"{PREFIX}deliveries?{urlencode(base)}" if before != MAX_ID else None,
        "now": await store(request).now(),
    }
    return render(request, "deliveries.html", context)
