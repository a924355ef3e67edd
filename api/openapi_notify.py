"""The OpenAPI part of notifications: /v1/channels and /v1/deliveries, the channel and
delivery schemas (api/routes_channels.py's views), a job's `notify` field, and the event a
webhook receives (punchclock format). openapi.py merges them into the document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from api.openapi_schemas import BOOL, EVENTS, ID, INT, NAME, NUM, STR, TEXT, TIME, J, null, obj, ref
from supervisor.core.events import FORMATS, Event

CHANNEL_FIELDS: J = {
    "name": {"type": "string", "pattern": NAME},
    "url": {
        "type": "string",
        "pattern": "^https?://",
        "maxLength": 2000,
        "description": "http or https; its host must be in notify_allowed_hosts when that is set",
    },
    "format": {"type": "string", "enum": list(FORMATS), "default": "punchclock"},
    "secret": null(
        {
            "type": "string",
            "pattern": "^whsec_",
            "writeOnly": True,
            "description": "whsec_ + base64 of 24-64 bytes; signs every request (Standard"
            " Webhooks); required for the punchclock format; never returned",
        }
    ),
    "headers": {
        "type": "object",
        "additionalProperties": STR,
        "maxProperties": 20,
        "writeOnly": True,
        "description": "extra request headers (values never returned)",
    },
    "all_jobs": {**EVENTS, "description": "events of every job sent to this channel"},
    "include_payload": {
        **BOOL,
        "default": False,
        "description": "events of a run carry its payload (`data.payload`: the run's own, else"
        " its job's, as when the delivery is sent); off by default: payloads may hold secrets",
    },
}
CHANNEL = obj(
    {
        "id": ID,
        "name": STR,
        "destination": {"type": "string", "description": "scheme, host and port of the URL"},
        "format": {"type": "string", "enum": list(FORMATS)},
        "secret_set": BOOL,
        "header_names": {"type": "array", "items": STR},
        "all_jobs": EVENTS,
        "include_payload": BOOL,
        "created_at": TIME,
        "updated_at": TIME,
        "disabled_at": {
            **null(TIME),
            "description": "when a receiver answered 410 Gone: nothing is sent until an admin "
            "updates the channel (any PATCH enables it)",
        },
        "disabled_reason": null(STR),
    }
)
DELIVERY = obj(
    {
        "id": ID,
        "webhook_id": {"type": "string", "description": "the webhook-id header, on every retry"},
        "channel_id": ID,
        "channel_name": STR,
        "event": {"type": "string", "enum": [e.value for e in Event]},
        "job_id": null(INT),
        "run_id": null(INT),
        "status": {"type": "string", "enum": ["pending", "delivered", "failed"]},
        "attempts": INT,
        "next_attempt_at": null(TIME),
        "last_status_code": null(INT),
        "last_error": null(STR),
        "created_at": TIME,
        "finished_at": null(TIME),
        "history": {
            "type": "array",
            "items": obj(
                {
                    "attempt": INT,
                    "worker_id": STR,
                    "started_at": TIME,
                    "duration_seconds": NUM,
                    "status_code": null(INT),
                    "error": null(STR),
                }
            ),
        },
    }
)
WEBHOOK_EVENT = {
    **obj(
        {
            "id": STR,
            "type": {"type": "string", "enum": [e.value for e in Event]},
            "timestamp": TIME,
            "data": {"type": "object"},
        }
    ),
    "description": "The body POSTed to a punchclock-format channel, signed with the headers"
    " webhook-id (= id), webhook-timestamp and webhook-signature (README, Notifications).",
}
SCHEMAS: J = {
    "Channel": CHANNEL,
    "ChannelCreate": obj(CHANNEL_FIELDS, required=["name", "url"]),
    "ChannelPatch": obj(CHANNEL_FIELDS, required=[]),
    "Delivery": DELIVERY,
    "WebhookEvent": WEBHOOK_EVENT,
}


def paths(responses: Callable[..., J], param: Callable[..., J], body: Callable[..., J]) -> J:
    path_id = param("id", "path", ID, "the channel id", required=True)
    ok = ("the channel", ref("Channel"))
    limit = param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 500}, "page size")
    cursor = param("cursor", "query", TEXT, "next_cursor of the previous page (same filters)")
    many: dict[str, Any] = {"style": "form", "explode": True}
    return {
        "/v1/channels": {
            "post": {
                "operationId": "createChannel",
                "summary": "Create a webhook channel (admin)",
                "requestBody": body(ref("ChannelCreate")),
                "responses": responses({201: ok}, 400, 409, 413),
            },
            "get": {
                "operationId": "listChannels",
                "responses": responses(
                    {
                        200: (
                            "channels",
                            obj({"channels": {"type": "array", "items": ref("Channel")}}),
                        )
                    }
                ),
            },
        },
        "/v1/channels/{id}": {
            "parameters": [path_id],
            "get": {"operationId": "getChannel", "responses": responses({200: ok}, 404)},
            "patch": {
                "operationId": "updateChannel",
                "summary": "Change any fields (secret: null removes it, slack format only)",
                "requestBody": body(ref("ChannelPatch")),
                "responses": responses({200: ok}, 400, 404, 409, 413),
            },
            "delete": {
                "operationId": "deleteChannel",
                "summary": "Delete; jobs' subscriptions to it and its deliveries go too",
                "responses": responses(
                    {200: ("deleted", obj({"id": ID, "deleted": BOOL, "unsubscribed_jobs": INT}))},
                    404,
                ),
            },
        },
        "/v1/channels/{id}/test": {
            "parameters": [path_id],
            "post": {
                "operationId": "testChannel",
                "summary": "Queue a test event for this channel",
                "responses": responses(
                    {202: ("queued", obj({"delivery_id": ID, "event": STR}))}, 404
                ),
            },
        },
        "/v1/deliveries": {
            "get": {
                "operationId": "listDeliveries",
                "summary": "Deliveries of events, newest first; keyset-paginated",
                "parameters": [
                    param("channel_id", "query", ID, "deliveries to this channel"),
                    param(
                        "status",
                        "query",
                        {"type": "array", "items": DELIVERY["properties"]["status"]},
                        "any of these statuses (repeatable)",
                        **many,
                    ),
                    param(
                        "event",
                        "query",
                        {"type": "array", "items": DELIVERY["properties"]["event"]},
                        "any of these events (repeatable)",
                        **many,
                    ),
                    param("job_id", "query", ID, "deliveries of this job's events"),
                    limit,
                    cursor,
                ],
                "responses": responses(
                    {
                        200: (
                            "a page of deliveries",
                            obj(
                                {
                                    "deliveries": {"type": "array", "items": ref("Delivery")},
                                    "next_cursor": null(STR),
                                }
                            ),
                        )
                    }
                ),
            }
        },
    }
