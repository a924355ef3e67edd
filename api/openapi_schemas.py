"""OpenAPI 3.1 component schemas: the shapes of api/views.py and supervisor/core/jobspec.py fields.

Builders (obj, null, ref) keep the document short; api/openapi.py uses them for the paths.
"""

from __future__ import annotations

from typing import Any

from api.params import MAX_TEXT, MAX_ZONE
from supervisor.core.events import SUBSCRIBABLE
from supervisor.core.exitpolicy import NAMED
from supervisor.core.limits import MAX_CONCURRENT
from supervisor.core.model import (
    MAX_ID,
    NAME_PATTERN,
    TYPE_PATTERN,
    Catchup,
    Outcome,
    Overlap,
    RunStatus,
    Trigger,
)

J = dict[str, Any]
# A free-text query parameter: the server refuses a longer one (422), so a client keeps URLs
# far below the server's request-line limit (api/app.py MAX_REQUEST_LINE).
TEXT: J = {"type": "string", "maxLength": MAX_TEXT}
ZONE: J = {"type": "string", "maxLength": MAX_ZONE}
NAME = f"^{NAME_PATTERN}$"
TYPE = f"^{TYPE_PATTERN}$"


def ref(name: str) -> J:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(props: J, required: list[str] | None = None, extra: bool = False) -> J:
    schema: J = {"type": "object", "properties": props, "additionalProperties": extra}
    schema["required"] = list(props) if required is None else required
    return schema


def null(schema: J) -> J:
    """The same schema, or null."""
    out = dict(schema)
    out["type"] = [schema["type"], "null"]
    return out


STR: J = {"type": "string"}
INT: J = {"type": "integer"}
NUM: J = {"type": "number"}
BOOL: J = {"type": "boolean"}
TIME: J = {"type": "string", "format": "date-time"}
PAYLOAD: J = {"type": "object", "description": "any JSON object"}
# Payloads may hold secrets: a read token gets null and payload_withheld true (api/permissions.py).
SHOWN_PAYLOAD: J = null({**PAYLOAD, "description": "any JSON object; null when withheld"})
WITHHELD: J = {
    "type": "boolean",
    "description": "true: the payload is withheld from this token's role (read) and is null",
}
ID: J = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
EVENT: J = {"type": "string", "enum": SUBSCRIBABLE}
EVENTS: J = {"type": "array", "items": EVENT, "uniqueItems": True}


def enum(values: Any) -> J:
    return {"type": "string", "enum": [v.value for v in values]}


RETRY = obj(
    {
        "base_seconds": {"type": "number", "minimum": 0, "maximum": 86400},
        "cap_seconds": {"type": "number", "minimum": 0, "maximum": 604800},
    },
    required=[],
)
EXIT_STATUS: J = {"type": "integer", "minimum": 0, "maximum": 255}
ENDING: J = {"oneOf": [EXIT_STATUS, {"type": "string", "enum": list(NAMED)}]}
ENDINGS: J = {"type": "array", "items": ENDING, "uniqueItems": True}
# The exit-code policy (handlers/README.md): in requests and in the job view alike.
GROUP_NAME: J = {"type": "string", "pattern": TYPE}
JOB_LIMIT_FIELDS: J = {
    "concurrency_group": null(
        {**GROUP_NAME, "description": "the concurrency group it joins (it must exist, else 422)"}
    ),
    "max_concurrent": null(
        {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_CONCURRENT,
            "description": "at most this many of its runs at once on all hosts (above 1 needs"
            " overlap allow); null: no limit of its own",
        }
    ),
}
POLICY_FIELDS: J = {
    "success_exit_codes": {
        "type": "array",
        "items": EXIT_STATUS,
        "minItems": 1,
        "description": "exit statuses that count as success (default [0])",
    },
    "dead_on": {
        **ENDINGS,
        "description": "endings that make the run dead at once (default [65]): exit statuses,"
        " signal, timeout, oom_killed",
    },
    "retry_on": null(
        {
            **ENDINGS,
            "description": "the only endings retried; null (default): every failure not in dead_on",
        }
    ),
}
# Notification rules of a job (DESIGN.md, Notifications): in requests and in the job view.
STREAK_FIELDS: J = {
    "pause_after_failures": null(
        {
            "type": "integer",
            "minimum": 1,
            "maximum": 1000,
            "description": "pause the job after this many consecutive runs ended dead by the"
            " handler's own doing (exit status, signal, timeout; not a lost lease, a shutdown"
            " or a cancel), raising job_auto_paused; resume starts the count again."
            " null (default): never",
        }
    ),
    "job_failing_after": {
        "type": "integer",
        "minimum": 1,
        "maximum": 1000,
        "description": "job_failing once this many consecutive runs ended dead (default 1)",
    },
    "expect_success_within_seconds": null(
        {
            "type": "number",
            "minimum": 1,
            "maximum": 31622400,
            "description": "job_silent (a dead-man's switch) once the job has had no success"
            " for this long, counted from its latest success or its last change or resume,"
            " on the database clock; sent once until the next success. null (default): never",
        }
    ),
    "late_after_seconds": null(
        {
            "type": "number",
            "minimum": 1,
            "maximum": 604800,
            "description": "run_late once a due run waited this long (null, default: the"
            " deployment's ready_max_lag)",
        }
    ),
}
JOB_FIELDS: J = {
    "name": {"type": "string", "pattern": NAME},
    "type": {"type": "string", "pattern": TYPE, "description": "a handler type name"},
    "payload": PAYLOAD,
    "cron": null(
        {
            "type": "string",
            "description": "5 fields, or 6 with seconds first; null only together with run_at",
        }
    ),
    "timezone": {"type": "string", "description": "IANA zone of the cron expression"},
    "run_at": null(
        {
            **TIME,
            "description": "a one-off instant (with an offset, 0001-01-02 to 9999-12-30 UTC);"
            " null only together with cron",
        }
    ),
    "max_attempts": {"type": "integer", "minimum": 1, "maximum": 100},
    "timeout_seconds": null(
        {
            "type": "number",
            "minimum": 1,
            "maximum": 604800,
            "description": "null: none of the job's own (the handler's, else 1 hour)",
        }
    ),
    "retry": RETRY,
    "catchup": enum(Catchup),
    "catchup_window_seconds": {"type": "number", "minimum": 0, "maximum": 2592000},
    "overlap": enum(Overlap),
    "paused": BOOL,
    **POLICY_FIELDS,
    **JOB_LIMIT_FIELDS,
    **STREAK_FIELDS,
    "ping_url": null(
        {
            "type": "string",
            "format": "uri",
            "maxLength": 2000,
            "description": "outbound pings (healthchecks.io, Cronitor): GET {ping_url}/start when"
            " a run starts, {ping_url} on success, {ping_url}/fail when it ends dead; http or"
            " https without a query, its host in notify_allowed_hosts when that is set;"
            " write-only (the view shows ping_destination)",
        }
    ),
    "notify": {
        "type": "array",
        "maxItems": 20,
        "description": "channels told about this job's events (each must exist, else 422);"
        " PATCH replaces the whole list",
        "items": obj(
            {"channel": {"type": "string", "pattern": NAME}, "events": {**EVENTS, "minItems": 1}}
        ),
    },
}
INSTANT = obj({"utc": TIME, "local": TIME})
JOB = obj(
    {
        "id": ID,
        "name": STR,
        "type": STR,
        "payload": SHOWN_PAYLOAD,
        "payload_withheld": WITHHELD,
        "cron": null(STR),
        "run_at": null(TIME),
        "timezone": STR,
        "max_attempts": INT,
        "timeout_seconds": null(NUM),
        "retry": obj({"base_seconds": NUM, "cap_seconds": NUM}),
        "catchup": enum(Catchup),
        "catchup_window_seconds": NUM,
        "overlap": enum(Overlap),
        "paused": BOOL,
        "pause_reason": null({**STR, "description": "why it was paused; cleared on resume"}),
        **POLICY_FIELDS,
        **JOB_LIMIT_FIELDS,
        **STREAK_FIELDS,
        "ping_destination": null(
            {**STR, "description": "scheme, host and port of the job's ping_url (write-only)"}
        ),
        "created_at": TIME,
        "updated_at": TIME,
    }
)
JOB_DETAIL = {
    "allOf": [
        {**JOB, "additionalProperties": True},
        {
            "type": "object",
            "required": ["next", "warnings", "notify"],
            "properties": {
                "next": {
                    "type": "array",
                    "items": ref("Instant"),
                    "description": "the next 5 instants of the schedule",
                },
                "warnings": {"type": "array", "items": STR},
                "notify": JOB_FIELDS["notify"],
            },
        },
    ]
}
RUN_PROPS: J = {
    "id": ID,
    "job_id": ID,
    "job_name": STR,
    "scheduled_at": TIME,
    "scheduled_at_local": null(STR),
    "status": enum(RunStatus),
    "trigger": enum(Trigger),
    "attempts": INT,
    "max_attempts": INT,
    "run_after": TIME,
    "worker_id": null(STR),
    "lease_expires_at": null(TIME),
    "started_at": null(TIME),
    "finished_at": null(TIME),
    "duration_seconds": null(NUM),
    "error": null(STR),
    "skip_reason": null(STR),
    "idempotency_key": null(STR),
    "created_at": TIME,
}
ATTEMPT = obj(
    {
        "attempt": INT,
        "worker_id": STR,
        "started_at": TIME,
        "finished_at": null(TIME),
        "duration_seconds": null(NUM),
        "outcome": enum(Outcome),
        "exit_code": null(INT),
        "signal": null(INT),
        "error": null(STR),
        "stdout_tail": null(STR),
        "stderr_tail": null(STR),
        "stdout_replaced": {
            "type": "boolean",
            "description": "stdout_tail had invalid UTF-8 or NUL bytes, shown as U+FFFD",
        },
        "stderr_replaced": {"type": "boolean", "description": "the same for stderr_tail"},
        "cpu_seconds": null(NUM),
        "peak_rss_bytes": null(INT),
    }
)
RUN_DETAIL = obj(
    {
        **RUN_PROPS,
        "waiting_for": null(
            {**STR, "description": "the concurrency limit a due, waiting run waits for"}
        ),
        "payload": null(
            {**PAYLOAD, "description": "this run's payload override (null: none, or withheld)"}
        ),
        "payload_withheld": WITHHELD,
        "history": {"type": "array", "items": ref("Attempt")},
    }
)
WORKER = obj(
    {
        "id": STR,
        "host": STR,
        "pid": INT,
        "types": {"type": "array", "items": STR},
        "concurrency": INT,
        "running": INT,
        "version": STR,
        "lease_ttl_seconds": NUM,
        "started_at": TIME,
        "last_heartbeat_at": TIME,
        "stopped_at": null(TIME),
        "live": BOOL,
    }
)
PROBLEM = obj(
    {
        "type": STR,
        "title": STR,
        "status": INT,
        "detail": STR,
        "errors": {
            "type": "array",
            "items": obj({"field": STR, "message": STR}),
        },
    },
    required=["type", "title", "status", "detail"],
)
BACKFILL = obj(
    {
        "job_id": ID,
        "from": TIME,
        "to": TIME,
        "dry_run": BOOL,
        "instants": {**INT, "description": "the schedule's instants in [from, to)"},
        "missing": {**INT, "description": "of those, the ones with no run before this request"},
        "created": {**INT, "description": "runs created (0 on a dry run)"},
        "run_ids": {"type": "array", "items": ID},
    }
)
SCHEMAS: J = {
    "Problem": PROBLEM,
    "JobCreate": obj(JOB_FIELDS, required=["name", "type"]),
    "JobPatch": {
        **obj(
            {
                **JOB_FIELDS,
                "pause_reason": null(
                    {
                        **STR,
                        "maxLength": 500,
                        "description": "why it is paused: only on a job that is or becomes"
                        " paused; resuming clears it",
                    }
                ),
            },
            required=[],
        ),
        "description": "Only the fields given change. null means no value, so it is accepted"
        " only where a job can have none: timeout_seconds, and cron or run_at while giving the"
        " other (which switches the schedule), and pause_reason; any other null is a 422"
        " naming the field.",
    },
    "Job": JOB,
    "JobDetail": JOB_DETAIL,
    "Instant": INSTANT,
    "Run": obj(RUN_PROPS),
    "RunDetail": RUN_DETAIL,
    "Attempt": ATTEMPT,
    "Worker": WORKER,
    "Backfill": BACKFILL,
}
