"""`punchclock groups ...`: concurrency groups through the API, in the style of client.py
(whose helpers it uses)."""

from __future__ import annotations

import argparse
from typing import Any

from api.client_common import _client, _leaf, _out
from api.client_format import table


def groups_table(data: dict[str, Any]) -> str:
    rows = [[g["name"], g["max_running"], g["running"]] for g in data["groups"]]
    return table(["NAME", "MAX RUNNING", "RUNNING"], rows)


def _one(g: dict[str, Any]) -> str:
    return groups_table({"groups": [g]})


def groups_list(args: argparse.Namespace) -> int:
    return _out(args, _client(args).call("GET", "/v1/concurrency-groups"), groups_table)


def groups_show(args: argparse.Namespace) -> int:
    return _out(args, _client(args).call("GET", f"/v1/concurrency-groups/{args.name}"), _one)


def groups_create(args: argparse.Namespace) -> int:
    body = {"name": args.name, "max_running": args.max_running}
    return _out(args, _client(args).call("POST", "/v1/concurrency-groups", body=body), _one)


def groups_update(args: argparse.Namespace) -> int:
    body = {"max_running": args.max_running}
    path = f"/v1/concurrency-groups/{args.name}"
    return _out(args, _client(args).call("PATCH", path, body=body), _one)


def groups_delete(args: argparse.Namespace) -> int:
    data = _client(args).call("DELETE", f"/v1/concurrency-groups/{args.name}")
    return _out(args, data, lambda d: f"deleted concurrency group {d['name']}")


def register_group_commands(sub: Any) -> None:
    groups = sub.add_parser("groups", help="manage concurrency groups through the API")
    gsub = groups.add_subparsers(dest="groups_command", required=True, metavar="SUBCOMMAND")
    _leaf(gsub, "list", "list concurrency groups and how many of their runs run", groups_list)
    for name, text, func in (("show", "show a group", groups_show),
                             ("delete", "delete a group no job is in", groups_delete)):  # fmt: skip
        _leaf(gsub, name, text, func).add_argument("name", help="the group's name")
    for name, text, func in (("create", "create a group", groups_create),
                             ("update", "change a group's limit", groups_update)):  # fmt: skip
        p = _leaf(gsub, name, text, func)
        p.add_argument("name", help="the group's name")
        p.add_argument("--max-running", type=int, required=True, help="1-10000")
