"""The one permission table: (method, route) -> the least role allowed, for the API (enforced
by auth.auth_middleware), /metrics and the dashboard (ui/guard.py), and the one payload
policy. Roles are ordered read < operator < admin. A route missing here is refused (default
deny); tests/unit/test_permissions.py checks that every route of the app is listed.

operator runs the fleet (trigger, pause, resume, cancel, requeue, backfill) but does not
choose what runs on it: creating, editing or deleting jobs, channels and groups is admin's.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from supervisor.core.config import Config
from supervisor.core.tokenspec import ADMIN, OPERATOR, READ, ROLES, legacy_name, parse_tokens

PUBLIC: Final = "public"  # no token needed
UNROUTED: Final = "unrouted"  # no route matched: the router answers 404 or 405

_JOB = "/v1/jobs/{id}"
_RUN = "/v1/runs/{id}"
_CHANNEL = "/v1/channels/{id}"
_GROUP = "/v1/concurrency-groups/{name}"
_UI_JOB = "/ui/jobs/{id}"
_UI_RUN = "/ui/runs/{id}"

TABLE: Final[dict[tuple[str, str], str]] = {
    # API: reads
    ("GET", "/v1/jobs"): READ,
    ("GET", _JOB): READ,
    ("GET", "/v1/schedule/preview"): READ,
    ("GET", "/v1/runs"): READ,
    ("GET", _RUN): READ,
    ("GET", "/v1/workers"): READ,
    ("GET", "/v1/channels"): READ,
    ("GET", _CHANNEL): READ,
    ("GET", "/v1/deliveries"): READ,
    ("GET", "/v1/concurrency-groups"): READ,
    ("GET", _GROUP): READ,
    ("GET", "/metrics"): READ,
    # API: running the fleet
    ("POST", _JOB + "/pause"): OPERATOR,
    ("POST", _JOB + "/resume"): OPERATOR,
    ("POST", _JOB + "/trigger"): OPERATOR,
    ("POST", _JOB + "/backfill"): OPERATOR,
    ("POST", _RUN + "/requeue"): OPERATOR,
    ("POST", "/v1/runs/requeue"): OPERATOR,
    ("POST", _RUN + "/cancel"): OPERATOR,
    # API: what runs, and where notifications go
    ("POST", "/v1/jobs"): ADMIN,
    ("PATCH", _JOB): ADMIN,
    ("DELETE", _JOB): ADMIN,
    ("POST", "/v1/channels"): ADMIN,
    ("PATCH", _CHANNEL): ADMIN,
    ("DELETE", _CHANNEL): ADMIN,
    # A test message is a request to a URL of the channel's choosing: channel management.
    ("POST", _CHANNEL + "/test"): ADMIN,
    ("POST", "/v1/concurrency-groups"): ADMIN,
    ("PATCH", _GROUP): ADMIN,
    ("DELETE", _GROUP): ADMIN,
    # Open: the schema, load balancers' and systemd's checks
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    # Dashboard (a page needs a session; guard.py sends a visitor to the login page)
    ("GET", "/ui/static"): PUBLIC,
    ("GET", "/ui/login"): PUBLIC,
    ("POST", "/ui/login"): PUBLIC,
    ("POST", "/ui/logout"): PUBLIC,
    ("GET", "/ui/"): READ,
    ("GET", "/ui/jobs"): READ,
    ("GET", _UI_JOB): READ,
    ("GET", "/ui/jobs/preview"): READ,
    ("GET", _UI_JOB + "/{action}"): READ,  # the pause/trigger/delete pages show their form by role
    ("GET", "/ui/runs"): READ,
    ("GET", _UI_RUN): READ,
    ("GET", _UI_RUN + "/live"): READ,
    ("GET", "/ui/workers"): READ,
    ("GET", "/ui/deliveries"): READ,
    ("GET", "/ui/runs/requeue"): READ,  # the count; the POST moves them
    ("GET", _UI_JOB + "/backfill"): READ,  # the dry run; the POST backfills
    ("POST", "/ui/runs/requeue"): OPERATOR,
    ("GET", _UI_JOB + "/payload"): OPERATOR,  # can_see_payloads: never a read session
    ("GET", _UI_RUN + "/payload"): OPERATOR,
    ("POST", _UI_JOB + "/backfill"): OPERATOR,
    ("POST", _UI_JOB + "/pause"): OPERATOR,
    ("POST", _UI_JOB + "/resume"): OPERATOR,
    ("POST", _UI_JOB + "/trigger"): OPERATOR,
    ("POST", _UI_RUN + "/cancel"): OPERATOR,
    ("POST", _UI_RUN + "/requeue"): OPERATOR,
    ("GET", "/ui/jobs/new"): ADMIN,
    ("GET", _UI_JOB + "/edit"): ADMIN,
    ("POST", "/ui/jobs/new"): ADMIN,
    ("POST", _UI_JOB + "/edit"): ADMIN,
    ("POST", _UI_JOB + "/delete"): ADMIN,
}


def rank(role: str | None) -> int:
    """read 0, operator 1, admin 2; anything else (no session) -1."""
    return ROLES.index(role) if role in ROLES else -1


def allows(role: str | None, least: str) -> bool:
    return least == PUBLIC or rank(role) >= rank(least)


def can(role: str | None, method: str, route: str) -> bool:
    """May `role` use this route? For templates: a control shows only when it would work."""
    least = TABLE.get((method, route))
    return least is not None and allows(role, least)


def least_role(request: web.Request) -> str | None:
    """The least role the request's route needs: a role, PUBLIC, UNROUTED, or None when the
    route is not in the table (refuse it). HEAD is GET's."""
    route = request.match_info.route
    resource = route.resource
    if request.match_info.http_exception is not None or resource is None:
        return UNROUTED
    method = "GET" if request.method == "HEAD" else request.method
    return TABLE.get((method, resource.canonical))


def route_of(request: web.Request) -> str:
    """The matched route's pattern (`/v1/jobs/{id}`), else the path."""
    resource = request.match_info.route.resource
    return request.path if resource is None else resource.canonical


def can_see_payloads(role: str | None) -> bool:
    """The payload policy, for the API and the dashboard alike: payloads may hold secrets
    (passwords, keys), so a read token or read session gets null and `payload_withheld`.
    Operator and admin see them (an operator triggers runs with payloads of its own)."""
    return rank(role) >= rank(OPERATOR)


def refusal(role: str | None, name: str | None, least: str, what: str) -> str:
    """The 403 detail: what was asked, the roles that may, and the caller's (the CLI prints
    it as is)."""
    roles = " or ".join(ROLES[rank(least) :])
    who = f"the token {name!r} has the {role} role" if name else f"the caller has the {role} role"
    return f"{what} needs the {roles} role; {who}"


def config_warnings(cfg: Config) -> list[str]:
    """`punchclock check` warnings about tokens and sessions (none is an error)."""
    out = []
    specs = parse_tokens(cfg.api_tokens)  # valid: load() checked them
    legacy = [s.name for s in specs if s.name == legacy_name(s.role, s.secret)]
    if legacy:
        out.append(
            f"api_tokens: {', '.join(legacy)} have no name of their own (ROLE:TOKEN); write "
            "them as ROLE:NAME:TOKEN so logs and dashboard sessions say who acted"
        )
    if specs and all(s.role == ADMIN for s in specs):
        out.append(
            "api_tokens: every token is admin; give those who only run jobs an operator token "
            "and dashboards or monitoring a read token (read tokens never see payloads)"
        )
    if not cfg.session_secret:
        out.append(
            "session_secret: unset, so each API process signs dashboard sessions with a random "
            "key: sessions end when it restarts and other API processes refuse them"
        )
    return out
