"""What `punchclock schedule preview` and `punchclock handlers list` print: the offline
commands' text (the API's commands have api/client_format.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from api.client_colour import paint

if TYPE_CHECKING:
    from supervisor.registry import Handler, Registry


def preview_lines(instants: list[Any], as_json: bool) -> str:
    """The dashboard's preview (api/ui/preview.Instant): UTC, local time and, where a DST
    rule applies, what it does. JSON: {"utc", "local"}, plus "rule" and "note" if marked."""
    if as_json:
        items = [
            {"utc": i.utc, "local": i.local, **({"rule": i.rule, "note": i.note} if i.rule else {})}
            for i in instants
        ]
        return json.dumps(items, indent=2)
    lines = []
    for i in instants:
        mark = f"  {paint(i.rule, 'yellow')}: {i.note}" if i.rule else ""
        lines.append(f"{i.utc:<22}  {i.local:<25}{mark}".rstrip())
    return "\n".join(lines)


def handlers_json(reg: Registry, isolation: str) -> str:
    handlers = [
        {"type": h.type, "argv": list(h.argv), "source": h.source, **_in_force(h)}
        for h in reg.handlers.values()
    ]
    rejected = [r.__dict__ for r in reg.rejected]
    return json.dumps(
        {"isolation": isolation, "handlers": handlers, "rejected": rejected}, indent=2
    )


def handlers_text(reg: Registry, isolation: str) -> str:
    lines = []
    for h in reg.handlers.values():
        lines.append(f"{paint('ok', 'green')}        {h.type:<24} {' '.join(h.argv)}")
        settings = {k: v for k, v in _in_force(h).items() if v not in (None, [], {})}
        if settings:
            lines.append(f"          {'':<24} {_settings_text(settings)}")
    for r in reg.rejected:
        lines.append(f"{paint('rejected', 'red')}  {r.type:<24} {r.source}: {r.reason}")
    if not reg.handlers and not reg.rejected:
        lines.append("no handlers (pass --handlers PATH)")
    lines.append(f"isolation {isolation}")
    return "\n".join(lines)


def _in_force(h: Handler) -> dict[str, Any]:
    """A handler's settings as they apply; environment variables by name only (secrets)."""
    from supervisor.proc.isolation import UNLIMITED

    ident = h.identity
    return {
        "timeout_seconds": h.timeout_seconds,
        "user": None if ident is None else f"{ident.user} (uid {ident.uid})",
        "group": None if ident is None else f"{ident.group} (gid {ident.gid})",
        "supplementary_groups": None if ident is None else list(ident.groups),
        "cwd": h.cwd,
        "umask": None if h.umask is None else f"{h.umask:04o}",
        "limits": {k: "unlimited" if v == UNLIMITED else v for k, v in h.limits},
        "concurrency": h.concurrency,
        "cgroup": h.cgroup,
        "cgroup_limits": {k: v for k, v in h.cgroup_limits.items().items() if v is not None},
        "env": sorted(h.env),
        "pass_env": list(h.pass_env),
        "env_files": list(h.env_files),
    }


def _settings_text(settings: dict[str, Any]) -> str:
    parts = []
    for key, value in settings.items():
        if isinstance(value, dict):
            parts += [f"{k}={v}" for k, v in value.items()]
        elif isinstance(value, list):
            parts.append(f"{key}={','.join(map(str, value))}")
        else:
            parts.append(f"{key}={value}")
    return "  ".join(parts)
