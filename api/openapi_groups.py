"""The OpenAPI part of concurrency groups: /v1/concurrency-groups and the group schema
(api/routes_groups.py's view); a job's fields are in openapi_schemas.py. openapi.py merges
them into the document."""

from __future__ import annotations

from collections.abc import Callable

from api.openapi_schemas import GROUP_NAME, INT, TIME, J, obj, ref
from supervisor.core.limits import MAX_RUNNING

MAX_RUNNING_FIELD: J = {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_RUNNING,
    "description": "at most this many runs of the group's jobs run at once, on all hosts",
}
GROUP = obj(
    {
        "name": GROUP_NAME,
        "max_running": MAX_RUNNING_FIELD,
        "running": {**INT, "description": "its runs running now"},
        "created_at": TIME,
        "updated_at": TIME,
    }
)
SCHEMAS: J = {
    "ConcurrencyGroup": GROUP,
    "ConcurrencyGroupCreate": obj({"name": GROUP_NAME, "max_running": MAX_RUNNING_FIELD}),
    "ConcurrencyGroupPatch": obj({"max_running": MAX_RUNNING_FIELD}),
}


def paths(responses: Callable[..., J], param: Callable[..., J], body: Callable[..., J]) -> J:
    name = param("name", "path", GROUP_NAME, "the group's name", required=True)
    ok = ("the group", ref("ConcurrencyGroup"))
    return {
        "/v1/concurrency-groups": {
            "post": {
                "operationId": "createConcurrencyGroup",
                "summary": "Create a concurrency group (admin)",
                "requestBody": body(ref("ConcurrencyGroupCreate")),
                "responses": responses({201: ok}, 400, 409, 413),
            },
            "get": {
                "operationId": "listConcurrencyGroups",
                "responses": responses(
                    {
                        200: (
                            "groups",
                            obj({"groups": {"type": "array", "items": ref("ConcurrencyGroup")}}),
                        )
                    }
                ),
            },
        },
        "/v1/concurrency-groups/{name}": {
            "parameters": [name],
            "get": {"operationId": "getConcurrencyGroup", "responses": responses({200: ok}, 404)},
            "patch": {
                "operationId": "updateConcurrencyGroup",
                "summary": "Change the limit; the next claim applies it (running runs finish)",
                "requestBody": body(ref("ConcurrencyGroupPatch")),
                "responses": responses({200: ok}, 400, 404, 413),
            },
            "delete": {
                "operationId": "deleteConcurrencyGroup",
                "summary": "Delete a group no job is in (409 otherwise)",
                "responses": responses(
                    {200: ("deleted", obj({"name": GROUP_NAME, "deleted": {"type": "boolean"}}))},
                    404,
                    409,
                ),
            },
        },
    }
