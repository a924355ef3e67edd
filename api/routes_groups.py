"""/v1/concurrency-groups: named limits that jobs join (at most max_running of their runs
running at once across all hosts). Create, list, show, change the limit (applies to the
next claim), delete (only when no job is in it). Writes need the admin role (auth.py)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api.params import no_query, read_json
from api.state import config, store
from supervisor.core import groups
from supervisor.core.errors import NotFound
from supervisor.core.groups import Group
from supervisor.core.model import TYPE, utc_iso

routes = web.RouteTableDef()
GROUPS = "/v1/concurrency-groups"
GROUP = GROUPS + "/{name}"


def group_view(g: Group) -> dict[str, Any]:
    return {
        "name": g.name,
        "max_running": g.max_running,
        "running": g.running,
        "created_at": utc_iso(g.created_at),
        "updated_at": utc_iso(g.updated_at),
    }


def _name(request: web.Request) -> str:
    name = request.match_info["name"]
    if not TYPE.fullmatch(name):  # not a group's name: there is no such group
        raise NotFound(f"concurrency group {name[:100]!r} not found")
    return name


@routes.post(GROUPS)
async def create_group(request: web.Request) -> web.Response:
    no_query(request)
    body = await read_json(request, config(request).api_max_body, required=True)
    g = await groups.create_group(store(request), body)
    return web.json_response(group_view(g), status=201, headers={"Location": f"{GROUPS}/{g.name}"})


@routes.get(GROUPS)
async def list_groups(request: web.Request) -> web.Response:
    no_query(request)
    found = await groups.groups(store(request)).list_groups()
    return web.json_response({"groups": [group_view(g) for g in found]})


@routes.get(GROUP)
async def get_group(request: web.Request) -> web.Response:
    no_query(request)
    return web.json_response(group_view(await groups.get_group(store(request), _name(request))))


@routes.patch(GROUP)
async def update_group(request: web.Request) -> web.Response:
    no_query(request)
    name = _name(request)
    body = await read_json(request, config(request).api_max_body, required=True)
    return web.json_response(group_view(await groups.update_group(store(request), name, body)))


@routes.delete(GROUP)
async def delete_group(request: web.Request) -> web.Response:
    no_query(request)
    name = _name(request)
    await groups.delete_group(store(request), name)
    return web.json_response({"name": name, "deleted": True})
