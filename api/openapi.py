"""The OpenAPI 3.1 document of the API, written as data, served at GET /openapi.json.

It mirrors api/views.py (responses, see openapi_schemas), supervisor/core/jobspec.py (job fields)
and the routes; the tests validate it, compare its paths with the router and run
schemathesis against the live app, so a drift shows up there.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api import openapi_groups, openapi_notify
from api.openapi_schemas import (
    BOOL,
    ID,
    INT,
    NAME,
    PAYLOAD,
    SCHEMAS,
    STR,
    TEXT,
    TIME,
    TYPE,
    ZONE,
    J,
    enum,
    null,
    obj,
    ref,
)
from api.permissions import TABLE
from supervisor import __version__
from supervisor.core.model import RunStatus

routes = web.RouteTableDef()

# ---------------------------------------------------------------- operations

ERRORS = {
    # Any request: the HTTP layer answers a request line or header over its limit (app.py
    # MAX_REQUEST_LINE; 8 KiB for a header) or broken HTTP with a plain-text 400.
    400: "malformed request: a body that is not JSON (a problem), or a request line or header"
    " over the server's limit (text/plain)",
    401: "no or unknown bearer token",
    403: "the token's role may not do this, or a cross-site request (Sec-Fetch-Site, Origin)",
    404: "not found",
    409: "conflicts with the current state",
    413: "the body exceeds the limit",
    415: "a body that is not Content-Type: application/json",
    421: "a Host header that is neither a loopback name, api_listen's host nor in "
    "api_allowed_hosts (DNS rebinding)",
    422: "an invalid field or query parameter (errors names each)",
    429: "too many failed tokens from this address (api_auth_throttle): Retry-After says when",
    503: "the database is unavailable",
}


def responses(ok: dict[int, tuple[str, J]], *errors: int, links: J | None = None) -> J:
    out: J = {
        str(code): {"description": text, "content": {"application/json": {"schema": schema}}}
        for code, (text, schema) in ok.items()
    }
    if links:
        for code in ok:
            out[str(code)]["links"] = links
    with_body = {415} if 413 in errors else set()  # operations that take a body
    for code in sorted({400, 401, 403, 421, 422, 429, 503, *errors, *with_body}):
        content: J = {"application/problem+json": {"schema": ref("Problem")}}
        if code == 400:
            content["text/plain"] = {"schema": STR}
        out[str(code)] = {"description": ERRORS[code], "content": content}
    return out


def param(name: str, where: str, schema: J, text: str, **kw: Any) -> J:
    return {"name": name, "in": where, "schema": schema, "description": text, **kw}


def page(item: str, key: str) -> J:
    return obj({key: {"type": "array", "items": ref(item)}, "next_cursor": null(STR)})


PATH_ID = param("id", "path", ID, "the id", required=True)
LIMIT = param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 500}, "page size")
CURSOR = param("cursor", "query", TEXT, "next_cursor of the previous page (same filters)")
UPCOMING = param(
    "upcoming",
    "query",
    {**BOOL, "default": False},
    "false: history, runs due by now, newest first; true: runs after now, soonest first",
)
RUN_FILTERS = [
    param("job_id", "query", ID, "runs of this job"),
    param("job_name", "query", {"type": "string", "pattern": NAME}, "runs of jobs so named"),
    param(
        "status",
        "query",
        {"type": "array", "items": enum(RunStatus)},
        "any of these statuses (repeatable)",
        style="form",
        explode=True,
    ),
    param("scheduled_after", "query", TIME, "scheduled at or after"),
    param("scheduled_before", "query", TIME, "scheduled before"),
    param("finished_after", "query", TIME, "finished at or after"),
    param("finished_before", "query", TIME, "finished before"),
]


def body(schema: J, required: bool = True) -> J:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


JOB_OK = ("the job, its next instants and warnings", ref("JobDetail"))


def _links(pointer: str, *operations: str) -> J:
    """OpenAPI links: where the id in a response can be used next (stateful testing)."""
    return {
        op[0].upper() + op[1:]: {
            "operationId": op,
            "parameters": {"id": f"$response.body#{pointer}"},
        }
        for op in operations
    }


JOB_LINKS = _links("/id", "getJob", "updateJob", "deleteJob", "pauseJob", "resumeJob", "triggerJob")
RUN_LINKS = _links("/id", "getRun", "cancelRun", "requeueRun")
RUN_OK = ("the run with its attempts", ref("RunDetail"))
PATHS: J = {
    "/v1/jobs": {
        "post": {
            "operationId": "createJob",
            "summary": "Create a job (exactly one of cron or run_at)",
            "requestBody": body(ref("JobCreate")),
            "responses": responses({201: JOB_OK}, 400, 409, 413, links=JOB_LINKS),
        },
        "get": {
            "operationId": "listJobs",
            "summary": "List jobs by id",
            "parameters": [
                param("type", "query", {"type": "string", "pattern": TYPE}, "handler type"),
                param("paused", "query", BOOL, "paused or not"),
                param("name_prefix", "query", {"type": "string", "pattern": NAME}, "name prefix"),
                LIMIT,
                CURSOR,
            ],
            "responses": responses({200: ("a page of jobs", page("Job", "jobs"))}),
        },
    },
    "/v1/jobs/{id}": {
        "parameters": [PATH_ID],
        "get": {"operationId": "getJob", "responses": responses({200: JOB_OK}, 404)},
        "patch": {
            "operationId": "updateJob",
            "summary": "Change any fields; a schedule change replans at once",
            "requestBody": body(ref("JobPatch")),
            "responses": responses({200: JOB_OK}, 400, 404, 409, 413),
        },
        "delete": {
            "operationId": "deleteJob",
            "summary": "Delete; unstarted runs are cancelled, history stays",
            "responses": responses(
                {
                    200: (
                        "deleted",
                        obj({"id": ID, "deleted": BOOL, "cancelled_runs": INT}),
                    )
                },
                404,
            ),
        },
    },
    "/v1/jobs/{id}/pause": {
        "parameters": [PATH_ID],
        "post": {
            "operationId": "pauseJob",
            "summary": "Pause, optionally saying why (shown and returned until resumed)",
            "requestBody": body(
                obj({"reason": null({**STR, "maxLength": 500})}, required=[]), required=False
            ),
            "responses": responses({200: JOB_OK}, 400, 404, 413),
        },
    },
    "/v1/jobs/{id}/resume": {
        "parameters": [PATH_ID],
        "post": {
            "operationId": "resumeJob",
            "summary": "Resume: plans at once, clears the reason, restarts the auto-pause count",
            "responses": responses({200: JOB_OK}, 404),
        },
    },
    "/v1/jobs/{id}/trigger": {
        "parameters": [PATH_ID],
        "post": {
            "operationId": "triggerJob",
            "summary": "Run now, optionally with a payload for this run only (a paused job"
            " runs this one run and stays paused)",
            "parameters": [
                param(
                    "Idempotency-Key",
                    "header",
                    {"type": "string", "pattern": "^[!-~]{1,255}$"},
                    "a retried request with the same key returns the same run",
                )
            ],
            "requestBody": body(obj({"payload": null(PAYLOAD)}, required=[]), required=False),
            "responses": responses(
                {201: ("the new run", ref("RunDetail")), 200: ("the key's run", ref("RunDetail"))},
                400,
                404,
                409,
                413,
                links=RUN_LINKS,
            ),
        },
    },
    "/v1/jobs/{id}/backfill": {
        "parameters": [PATH_ID],
        "post": {
            "operationId": "backfillJob",
            "summary": "Run the job's instants in [from, to) that have no run (trigger backfill)",
            "description": "At most 1000 instants in the window (422 naming `to` beyond), which"
            " must end by now. The runs are due at once; dry_run=true only counts them.",
            "requestBody": body(
                obj(
                    {"from": TIME, "to": TIME, "dry_run": {**BOOL, "default": False}},
                    required=["from", "to"],
                )
            ),
            "responses": responses(
                {
                    201: ("the runs created", ref("Backfill")),
                    200: ("dry run: what a backfill would create", ref("Backfill")),
                },
                400,
                404,
                413,
            ),
        },
    },
    "/v1/runs": {
        "get": {
            "operationId": "listRuns",
            "summary": "Run history, or with upcoming=true the plan ahead; keyset-paginated",
            "description": "By default runs due by now (scheduled_at <= the database's now()),"
            " newest first on (scheduled_at, id). upcoming=true lists runs scheduled after now,"
            " soonest first. The other filters narrow either list; a cursor belongs to the"
            " filters and the mode that issued it (422 otherwise).",
            "parameters": [*RUN_FILTERS, UPCOMING, LIMIT, CURSOR],
            "responses": responses({200: ("a page of runs", page("Run", "runs"))}),
        }
    },
    "/v1/runs/requeue": {
        "post": {
            "operationId": "requeueRuns",
            "summary": "Requeue every dead (or failed) run the filters match",
            "parameters": RUN_FILTERS,
            "responses": responses({200: ("how many moved", obj({"requeued": INT}))}),
        }
    },
    "/v1/runs/{id}": {
        "parameters": [PATH_ID],
        "get": {"operationId": "getRun", "responses": responses({200: RUN_OK}, 404)},
    },
    "/v1/runs/{id}/requeue": {
        "parameters": [PATH_ID],
        "post": {
            "operationId": "requeueRun",
            "summary": "A dead or failed run runs again now with a fresh attempt budget",
            "responses": responses(
                {200: ("requeued", obj({"requeued": INT, "run": ref("RunDetail")}))}, 404, 409
            ),
        },
    },
    "/v1/runs/{id}/cancel": {
        "parameters": [PATH_ID],
        "post": {
            "operationId": "cancelRun",
            "summary": "Cancel a waiting run, or revoke a running run's lease",
            "responses": responses({200: RUN_OK}, 404, 409),
        },
    },
    "/v1/workers": {
        "get": {
            "operationId": "listWorkers",
            "summary": "Live workers and those seen in the last 24 hours",
            "responses": responses(
                {200: ("workers", obj({"workers": {"type": "array", "items": ref("Worker")}}))}
            ),
        }
    },
    "/v1/schedule/preview": {
        "get": {
            "operationId": "previewSchedule",
            "parameters": [
                param("cron", "query", TEXT, "the cron expression", required=True),
                param("timezone", "query", ZONE, "IANA zone (default UTC)"),
                param(
                    "count", "query", {"type": "integer", "minimum": 1, "maximum": 100}, "how many"
                ),
                param("after", "query", TIME, "start after this instant (default now)"),
            ],
            "responses": responses(
                {
                    200: (
                        "the next instants",
                        obj(
                            {
                                "cron": STR,
                                "timezone": STR,
                                "instants": {"type": "array", "items": ref("Instant")},
                            }
                        ),
                    )
                }
            ),
        }
    },
}

PATHS.update(openapi_notify.paths(responses, param, body))
PATHS.update(openapi_groups.paths(responses, param, body))


METHODS = frozenset({"get", "post", "patch", "delete", "put"})


def _with_roles(paths: J) -> J:
    """Each operation with x-punchclock-role from the one permission table."""
    return {
        path: {
            key: {**op, "x-punchclock-role": TABLE[(key.upper(), path)]} if key in METHODS else op
            for key, op in item.items()
        }
        for path, item in paths.items()
    }


def document() -> J:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "punchclock management API",
            "version": __version__,
            "description": "Jobs, triggers, run history and dead runs. Errors are "
            "application/problem+json (RFC 9457). Every request needs a bearer token (without "
            "configured api_tokens, punchclock api generates an admin token into its state "
            "directory). Each operation's x-punchclock-role is the least "
            "token role it needs (read < operator < admin); read tokens get payloads withheld.",
        },
        "paths": _with_roles(PATHS),
        "components": {
            "schemas": {**SCHEMAS, **openapi_notify.SCHEMAS, **openapi_groups.SCHEMAS},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


@routes.get("/openapi.json")
async def openapi_json(request: web.Request) -> web.Response:
    return web.json_response(document())
