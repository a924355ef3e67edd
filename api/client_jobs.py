"""The flags of `punchclock jobs create` and `jobs update`, one per job field as
supervisor/core/jobfields.py declares it (its flag, kind, bounds and help), and the JSON
body they make. Standard library and jobfields.py only, as the rest of the CLI.

Each kind reads as the dashboard's form reads it: numbers as numbers, lists as
comma-separated items, the payload and notify as JSON; '' is none for a field that can have
none (and a list's blank: `--dead-on ''` is []), so `--timeout ''` clears a timeout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from api.client_common import _json_arg
from api.client_http import EXIT_USAGE, ClientError
from supervisor.core import jobfields
from supervisor.core.jobfields import FIELDS, JobField, bounds, typed_items

JSON_KINDS = (jobfields.OBJECT, jobfields.RULES)
NULL: Any = type("Null", (), {"__repr__": lambda self: "NULL"})()  # '' given: none


def job_flags(p: argparse.ArgumentParser, *, create: bool) -> None:
    p.add_argument("--file", help="a JSON job body to start from ('-': stdin)")
    for f in FIELDS:
        metavar = f.flag.removeprefix("--").replace("-", "_").upper()
        if f.kind == jobfields.BOOLEAN:
            if create:
                p.add_argument(
                    f.flag,
                    dest=f.name,
                    action="store_true",
                    default=None,
                    help=f"create it {f.name}: {f.help}",
                )
            else:
                p.add_argument(
                    f.flag,
                    dest=f.name,
                    action=argparse.BooleanOptionalAction,
                    default=None,
                    help=f"{f.flag} sets it, --no-{f.flag[2:]} clears it: {f.help}",
                )
        elif f.kind == jobfields.CHOICE:
            p.add_argument(f.flag, dest=f.name, choices=list(f.choices), help=f.help)
        else:
            p.add_argument(f.flag, dest=f.name, type=_reader(f), metavar=metavar, help=_help(f))


def _reader(f: JobField) -> Any:
    """How the flag's text becomes its value (argparse's `type`)."""
    if f.kind in jobfields.LISTS:
        return lambda text: _or_null(typed_items(f, text))
    parse: Any = {jobfields.INTEGER: int, jobfields.NUMBER: float}.get(f.kind, str)
    if not f.nullable:
        return parse

    def read(text: str) -> Any:
        return NULL if text == "" else parse(text)

    read.__name__ = parse.__name__  # argparse says "invalid int value"
    return read


def _or_null(value: Any) -> Any:
    return NULL if value is None else value


def _help(f: JobField) -> str:
    text = f.help
    if f.kind in jobfields.NUMBERS:
        text += f" [{bounds(f)}]"
    elif f.kind in jobfields.LISTS:
        text += f" (comma-separated; '': {json.dumps(f.blank)})"
    elif f.kind in JSON_KINDS:
        text += " (JSON)"
    if f.nullable and f.kind not in jobfields.LISTS:
        text += " ('': none)"
    return text


def job_body(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON body: --file's (if given), then each flag given over it."""
    body: dict[str, Any] = {}
    if args.file:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        body = _json_arg(text, "--file")
        if not isinstance(body, dict):
            raise ClientError("--file: must hold a JSON object", EXIT_USAGE)
    for f in FIELDS:
        value = getattr(args, f.name)
        if value is None:
            continue
        if value is NULL:
            value = None
        elif f.kind in JSON_KINDS:
            value = _json_arg(value, f.flag)
        if len(f.path) == 1:
            body[f.name] = value
        else:  # retry's: merged into --file's object
            inner = body.get(f.path[0])
            body[f.path[0]] = {**(inner if isinstance(inner, dict) else {}), f.path[1]: value}
    return body
