"""The permission table covers every route the API process serves (its router, the
dashboard's and the health routes), names no route that does not exist, and orders roles."""

from __future__ import annotations

from aiohttp import web

from api.app import create_app
from api.observe import observability_routes
from api.permissions import PUBLIC, TABLE, allows, can_see_payloads, config_warnings
from supervisor.core.config import Config
from supervisor.core.metrics import Metrics
from supervisor.core.store import Store

TOKENS = ("admin:root:admin-token-0123456789abcdef",)


def served_routes() -> set[tuple[str, str]]:
    """(method, pattern) of every route of the app `punchclock api` serves (HEAD is GET's)."""
    health = observability_routes(None, 60.0, Metrics("api"), TOKENS)  # type: ignore[arg-type]
    app = create_app(Config(api_tokens=TOKENS), Store(None), extra_routes=health)  # type: ignore[arg-type]
    found: set[tuple[str, str]] = set()
    routers = [app.router]
    for resource in app.router.resources():
        sub = getattr(resource, "_app", None)
        if isinstance(sub, web.Application):
            routers.append(sub.router)
    for router in routers:
        for route in router.routes():
            if route.resource is None or getattr(route.resource, "_app", None) is not None:
                continue
            if route.method != "HEAD":
                found.add((route.method, route.resource.canonical))
    return found


def test_every_route_is_in_the_table_and_nothing_else() -> None:
    served = served_routes()
    assert ("POST", "/ui/jobs/{id}/trigger") in served and ("GET", "/metrics") in served
    assert sorted(served - set(TABLE)) == []  # add each new route to api/permissions.py
    assert sorted(set(TABLE) - served) == []  # a stale entry


def test_roles_are_ordered_and_payloads_follow_operator() -> None:
    assert allows("admin", "operator") and allows("operator", "operator")
    assert not allows("read", "operator") and not allows("operator", "admin")
    assert not allows(None, "read") and allows(None, PUBLIC)
    assert [can_see_payloads(r) for r in ("read", "operator", "admin", None)] == [
        False,
        True,
        True,
        False,
    ]
    # operator runs the fleet but never chooses what runs on it.
    for (method, route), least in TABLE.items():
        edits = method in ("PATCH", "DELETE") or route in ("/v1/jobs", "/ui/jobs/new")
        if edits and method != "GET":
            assert least == "admin", (method, route)


def test_config_warnings_about_tokens_and_sessions() -> None:
    legacy = "admin:admin-token-0123456789abcdef"
    warned = config_warnings(Config(api_tokens=(legacy,)))
    assert any("have no name of their own" in w for w in warned)
    assert any("every token is admin" in w for w in warned)
    assert any("session_secret: unset" in w for w in warned)
    named = ("admin:root:admin-token-0123456789abcdef", "read:grafana:read-token-0123456789ab")
    assert config_warnings(Config(api_tokens=named, session_secret="k" * 32)) == []
