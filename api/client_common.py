"""What every `punchclock` API subcommand shares (client.py's jobs and runs,
client_channels.py, client_groups.py): the API client from the flags or the environment,
the flags every subcommand has, JSON arguments, pages, and output. A leaf: it imports no
other client module but the transport and the colours. Standard library only."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
from typing import Any

from api.client_colour import for_terminal, use_colour
from api.client_http import EXIT_OK, EXIT_USAGE, ApiClient, ClientError

DEFAULT_URL = "http://127.0.0.1:8080"


def _client(args: argparse.Namespace) -> ApiClient:
    url = args.api_url or os.environ.get("PUNCHCLOCK_API_URL") or DEFAULT_URL
    token = args.api_token or os.environ.get("PUNCHCLOCK_API_TOKEN") or _local_token(url)
    return ApiClient(url, token)


def _local_token(url: str) -> str | None:
    """The admin token `punchclock api`/`up` generated for this user, for a loopback URL only
    (never sent elsewhere); refused if the file is not this user's own 0600 file."""
    from supervisor.core.secretfile import InsecureFile, admin_token_file, read_secret

    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host != "localhost" and not host.startswith("127.") and host != "::1":
        return None
    try:
        return read_secret(admin_token_file()) or None
    except InsecureFile as exc:
        raise ClientError(f"not using the local admin token: {exc}") from None


def _json_arg(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ClientError(f"{flag}: not valid JSON: {exc}", EXIT_USAGE) from None


def _pages(api: ApiClient, path: str, key: str, query: list[tuple[str, Any]], every: bool) -> Any:
    page = api.call("GET", path, query=query)
    if not every:
        return page
    items = list(page[key])
    while page["next_cursor"]:
        page = api.call("GET", path, query=[*query, ("cursor", page["next_cursor"])])
        items.extend(page[key])
    return {key: items, "next_cursor": None}


def _out(args: argparse.Namespace, data: Any, render: Any) -> int:
    if args.json:
        print(json.dumps(data, indent=2))  # JSON escapes every control character itself
    else:  # handlers write output tails and errors: no escape reaches the terminal raw
        print(for_terminal(render(data), use_colour(sys.stdout)))
    return EXIT_OK


def _wrap(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = func(args)
            return code
        except ClientError as exc:
            print(f"punchclock: {exc}", file=sys.stderr)
            return exc.code

    return run


def _leaf(sub: Any, name: str, help: str, func: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help)
    p.add_argument("--api-url", help=f"API base URL [PUNCHCLOCK_API_URL, default {DEFAULT_URL}]")
    p.add_argument("--api-token", help="bearer token [PUNCHCLOCK_API_TOKEN]")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.set_defaults(func=_wrap(func))
    return p
