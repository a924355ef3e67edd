"""/v1/channels and /v1/deliveries: notification channels (create, list, show, update,
delete, send a test event) and the deliveries of events, newest first. Writes need the
admin role (auth.py); a channel's secret and header values are write-only: no view has them.
Only admin sees a delivery's exact status codes, errors and timings; other roles get a coarse
outcome (egress.coarse_error), so deliveries cannot serve as a port scanner.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api import cursor
from api.auth import ADMIN, ROLE_KEY
from api.params import Query, no_query, path_id, read_json
from api.state import config, store
from supervisor.core import channels
from supervisor.core.channels import Channel
from supervisor.core.egress import coarse_error, destinations
from supervisor.core.errors import NotFound
from supervisor.core.events import Event, validate_channel
from supervisor.core.model import MAX_ID, utc_iso

routes = web.RouteTableDef()
CHANNEL = "/v1/channels/{id:[0-9]+}"
MAX_PAGE = 500
DELIVERY_STATUSES = ["pending", "delivered", "failed"]


def channel_view(c: Channel) -> dict[str, Any]:
    s = c.spec
    return {
        "id": c.id,
        "name": s.name,
        "destination": c.destination,
        "format": s.format,
        "secret_set": s.secret is not None,
        "header_names": sorted(s.headers or {}),
        "all_jobs": list(s.all_jobs),
        "include_payload": s.include_payload,
        "created_at": utc_iso(c.created_at),
        "updated_at": utc_iso(c.updated_at),
        "disabled_at": utc_iso(c.disabled_at) if c.disabled_at else None,
        "disabled_reason": c.disabled_reason,
    }


def _iso(value: Any) -> str | None:
    return None if value is None else utc_iso(value)


def _second(value: Any) -> Any:
    return None if value is None else value.replace(microsecond=0)


def delivery_view(row: Any, attempts: list[Any], details: bool = True) -> dict[str, Any]:
    """`details` (admin): exact status codes, error text and timings; otherwise a coarse
    outcome per attempt, no status code, durations and times to the second."""
    if details:
        code, error, fin = row["last_status"], row["last_error"], row["finished_at"]
    else:
        code, error = None, coarse_error(row["last_status"], row["last_error"])
        fin = _second(row["finished_at"])
    return {
        "id": row["id"],
        "webhook_id": f"msg_{row['id']}",
        "channel_id": row["channel_id"],
        "channel_name": row["channel_name"],
        "event": row["event"],
        "job_id": row["job_id"],
        "run_id": row["run_id"],
        "status": row["status"],
        "attempts": row["attempts"],
        "next_attempt_at": _iso(row["next_attempt_at"]) if row["status"] == "pending" else None,
        "last_status_code": code,
        "last_error": error,
        "created_at": _iso(row["created_at"]),
        "finished_at": _iso(fin),
        "history": [
            {
                "attempt": a["attempt"],
                "worker_id": a["worker_id"],
                "started_at": _iso(a["started_at"] if details else _second(a["started_at"])),
                "duration_seconds": (
                    a["duration_seconds"] if details else float(round(a["duration_seconds"]))
                ),
                "status_code": a["status_code"] if details else None,
                "error": a["error"] if details else coarse_error(a["status_code"], a["error"]),
            }
            for a in attempts
        ],
    }


def _allowed(request: web.Request) -> tuple[str, ...]:
    return destinations(config(request))


async def _channel(request: web.Request) -> Channel:
    channel_id = path_id(request, "channel")
    found = await channels.notifications(store(request)).get_channel(channel_id)
    if found is None:
        raise NotFound(f"channel {channel_id} not found")
    return found


@routes.post("/v1/channels")
async def create_channel(request: web.Request) -> web.Response:
    no_query(request)
    body = await read_json(request, config(request).api_max_body, required=True)
    created = await channels.create_channel(
        store(request), validate_channel(body, _allowed(request))
    )
    headers = {"Location": f"/v1/channels/{created.id}"}
    return web.json_response(channel_view(created), status=201, headers=headers)


@routes.get("/v1/channels")
async def list_channels(request: web.Request) -> web.Response:
    no_query(request)
    found = await channels.notifications(store(request)).list_channels()
    return web.json_response({"channels": [channel_view(c) for c in found]})


@routes.get(CHANNEL)
async def get_channel(request: web.Request) -> web.Response:
    no_query(request)
    return web.json_response(channel_view(await _channel(request)))


@routes.patch(CHANNEL)
async def update_channel(request: web.Request) -> web.Response:
    no_query(request)
    channel_id = path_id(request, "channel")
    body = await read_json(request, config(request).api_max_body, required=True)
    updated = await channels.update_channel(store(request), channel_id, body, _allowed(request))
    return web.json_response(channel_view(updated))


@routes.delete(CHANNEL)
async def delete_channel(request: web.Request) -> web.Response:
    no_query(request)
    channel_id = path_id(request, "channel")
    jobs = await channels.delete_channel(store(request), channel_id)
    return web.json_response({"id": channel_id, "deleted": True, "unsubscribed_jobs": jobs})


@routes.post(CHANNEL + "/test")
async def test_channel(request: web.Request) -> web.Response:
    no_query(request)
    channel_id = path_id(request, "channel")
    delivery = await channels.test_channel(store(request), channel_id)
    return web.json_response(
        {"delivery_id": delivery, "event": str(Event.TEST)},
        status=202,
        headers={"Location": f"/v1/deliveries?channel_id={channel_id}"},
    )


@routes.get("/v1/deliveries")
async def list_deliveries(request: web.Request) -> web.Response:
    q = Query(request, {"channel_id", "status", "event", "job_id", "limit", "cursor"})
    channel_id = q.integer("channel_id", 1, MAX_ID)
    statuses = q.choices("status", DELIVERY_STATUSES)
    events = q.choices("event", [e.value for e in Event])
    job_id = q.integer("job_id", 1, MAX_ID)
    limit = q.integer("limit", 1, MAX_PAGE, 100)
    token = q.text("cursor")
    q.done()
    assert limit is not None
    filters = {"channel": channel_id, "status": statuses, "event": events, "job": job_id}
    fhash = cursor.filters_hash("deliveries", filters)
    before = cursor.parse_id_key(cursor.decode(token, fhash)) if token else MAX_ID
    n = channels.notifications(store(request))
    rows = await n.list_deliveries(
        before, channel_id, list(statuses) or None, list(events) or None, job_id, limit + 1
    )
    more = len(rows) > limit
    rows = rows[:limit]
    details = request.get(ROLE_KEY) == ADMIN  # operator and read: coarse outcomes only
    by_id: dict[int, list[Any]] = {}
    for a in await n.list_delivery_attempts([r["id"] for r in rows]):
        by_id.setdefault(a["outbox_id"], []).append(a)
    return web.json_response(
        {
            "deliveries": [delivery_view(r, by_id.get(r["id"], []), details) for r in rows],
            "next_cursor": cursor.encode([rows[-1]["id"]], fhash) if more else None,
        }
    )
