"""OpenAPI 3.1 component schemas: the shapes of api/views.py, and a job's fields as
supervisor/core/jobfields.py declares them (field_schema).

Builders (obj, null, ref) keep the document short; api/openapi.py uses them for the paths.
"""

from __future__ import annotations

from typing import Any

from api.params import MAX_TEXT, MAX_ZONE
from supervisor.core import jobfields
from supervisor.core.events import SUBSCRIBABLE
from supervisor.core.exitpolicy import NAMED
from supervisor.core.jobfields import JobField
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


EXIT_STATUS: J = {"type": "integer", "minimum": 0, "maximum": 255}
ENDING: J = {"oneOf": [EXIT_STATUS, {"type": "string", "enum": list(NAMED)}]}
ENDINGS: J = {"type": "array", "items": ENDING, "uniqueItems": True}
GROUP_NAME: J = {"type": "string", "pattern": TYPE}
NOTIFY_RULE = obj(
    {"channel": {"type": "string", "pattern": NAME}, "events": {**EVENTS, "minItems": 1}}
)
# A job field's schema by its kind (jobfields.py); its declaration adds bounds and help.
KINDS: dict[str, J] = {
    jobfields.STRING: STR,
    jobfields.INSTANT: TIME,
    jobfields.INTEGER: INT,
    jobfields.NUMBER: NUM,
    jobfields.BOOLEAN: BOOL,
    jobfields.CHOICE: STR,
    jobfields.OBJECT: {"type": "object"},
    jobfields.CODES: {"type": "array", "items": EXIT_STATUS},
    jobfields.ENDINGS: ENDINGS,
    jobfields.RULES: {"type": "array", "items": NOTIFY_RULE},
}
LIST_KINDS = (*jobfields.LISTS, jobfields.RULES)


def field_schema(f: JobField) -> J:
    """A job field in a request, as jobfields.py declares it."""
    schema: J = dict(KINDS[f.kind])
    if f.pattern:
        schema["pattern"] = f"^{f.pattern}$"
    if f.choices:
        schema["enum"] = list(f.choices)
    if f.uri:
        schema["format"] = "uri"
    words = {"minimum": f.least, "maximum": f.most}  # a number's bounds
    if f.kind in LIST_KINDS:
        words = {"minItems": f.least, "maxItems": f.most}
    elif f.kind not in jobfields.NUMBERS:
        words = {"maxLength": f.most}
    schema.update({k: v for k, v in words.items() if v is not None})
    schema["description"] = f.help
    return null(schema) if f.nullable else schema


FIELD_SCHEMAS: J = {f.name: field_schema(f) for f in jobfields.FIELDS}


def _body() -> J:
    """The fields of a job's request body: retry's two hold an object of their own."""
    props: J = {}
    for f in jobfields.FIELDS:
        if len(f.path) == 1:
            props[f.name] = FIELD_SCHEMAS[f.name]
        else:
            inner = props.setdefault(f.path[0], obj({}, required=[]))
            inner["properties"][f.path[1]] = FIELD_SCHEMAS[f.name]
    return props


JOB_FIELDS = _body()
# What the job view shows of a field as a request gives it (the others: their bare types).
SHOWN_AS_GIVEN = ("success_exit_codes", "dead_on", "retry_on", "concurrency_group",
                  "max_concurrent", "pause_after_failures", "job_failing_after",
                  "expect_success_within_seconds", "late_after_seconds")  # fmt: skip
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
        **{name: FIELD_SCHEMAS[name] for name in SHOWN_AS_GIVEN},
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
        f" only where a job can have none ({', '.join(sorted(jobfields.NULLABLE_KEYS))}; cron"
        " or run_at only while giving the other, which switches the schedule) and for"
        " pause_reason; any other null is a 422 naming the field.",
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
