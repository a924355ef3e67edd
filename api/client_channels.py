"""`punchclock channels ...` and `punchclock deliveries`: notification channels and their
deliveries through the API, in the style of client.py (helpers: client_common.py). The secret
is read from --secret-file or PUNCHCLOCK_CHANNEL_SECRET, never from a flag on the command
line (it would show in `ps` and the shell's history)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from api.client_common import _client, _json_arg, _leaf, _out
from api.client_format import _more, table
from api.client_http import EXIT_USAGE, ApiClient, ClientError

EVENTS = ["run_failed", "run_dead", "run_missed", "run_overlap_skipped", "job_failing",
          "job_recovered", "job_auto_paused", "job_silent", "worker_lost"]  # fmt: skip


def _channel_id(api: ApiClient, ref: str) -> int:
    if ref.isdigit():
        return int(ref)
    for c in api.call("GET", "/v1/channels")["channels"]:
        if c["name"] == ref:
            return int(c["id"])
    raise ClientError(f"no channel named {ref!r}")


def _body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for key in ("name", "url", "format"):
        if getattr(args, key, None) is not None:
            body[key] = getattr(args, key)
    if args.include_payload is not None:
        body["include_payload"] = args.include_payload
    if args.all_jobs is not None:
        body["all_jobs"] = [e for e in args.all_jobs.split(",") if e]
    if args.headers is not None:
        body["headers"] = _json_arg(args.headers, "--headers")
    if args.secret_file is not None:
        try:
            body["secret"] = Path(args.secret_file).read_text().strip()
        except OSError as exc:
            raise ClientError(f"--secret-file: {exc.strerror}", EXIT_USAGE) from None
    elif os.environ.get("PUNCHCLOCK_CHANNEL_SECRET"):
        body["secret"] = os.environ["PUNCHCLOCK_CHANNEL_SECRET"]
    return body


def channels_table(data: dict[str, Any]) -> str:
    rows = [[c["id"], c["name"], c["format"], c["destination"], "yes" if c["secret_set"] else "no",
             ",".join(c["all_jobs"]) or None] for c in data["channels"]]  # fmt: skip
    return table(["ID", "NAME", "FORMAT", "DESTINATION", "SIGNED", "ALL JOBS"], rows)


def deliveries_table(page: dict[str, Any]) -> str:
    keys = ("id", "channel_name", "event", "job_id", "run_id", "status", "attempts",
            "last_status_code", "last_error")  # fmt: skip
    rows = [[d[k] for k in keys] for d in page["deliveries"]]
    head = ["ID", "CHANNEL", "EVENT", "JOB", "RUN", "STATUS", "TRIES", "CODE", "ERROR"]
    return table(head, rows) + _more(page)


def channels_list(args: argparse.Namespace) -> int:
    return _out(args, _client(args).call("GET", "/v1/channels"), channels_table)


def channels_show(args: argparse.Namespace) -> int:
    api = _client(args)
    data = api.call("GET", f"/v1/channels/{_channel_id(api, args.channel)}")
    return _out(args, data, lambda c: channels_table({"channels": [c]}))


def channels_create(args: argparse.Namespace) -> int:
    data = _client(args).call("POST", "/v1/channels", body=_body(args))
    return _out(args, data, lambda c: channels_table({"channels": [c]}))


def channels_update(args: argparse.Namespace) -> int:
    api = _client(args)
    path = f"/v1/channels/{_channel_id(api, args.channel)}"
    data = api.call("PATCH", path, body=_body(args))
    return _out(args, data, lambda c: channels_table({"channels": [c]}))


def channels_delete(args: argparse.Namespace) -> int:
    api = _client(args)
    data = api.call("DELETE", f"/v1/channels/{_channel_id(api, args.channel)}")
    return _out(args, data, lambda d: f"deleted channel {d['id']} ({d['unsubscribed_jobs']} jobs)")


def channels_test(args: argparse.Namespace) -> int:
    api = _client(args)
    data = api.call("POST", f"/v1/channels/{_channel_id(api, args.channel)}/test")
    return _out(args, data, lambda d: f"queued test delivery {d['delivery_id']}")


def deliveries_list(args: argparse.Namespace) -> int:
    api = _client(args)
    channel = None if args.channel is None else _channel_id(api, args.channel)
    query = [("channel_id", channel), ("job_id", args.job_id), ("limit", args.limit),
             ("cursor", args.cursor)] + [("status", s) for s in args.status or []]  # fmt: skip
    return _out(args, api.call("GET", "/v1/deliveries", query=query), deliveries_table)


def _flags(p: argparse.ArgumentParser, *, create: bool) -> None:
    p.add_argument("--name", required=create, help="unique name (letters, digits, -_.:)")
    p.add_argument("--url", required=create, help="http or https URL to POST to")
    p.add_argument(
        "--format", choices=["punchclock", "slack"], help="the body sent (default punchclock)"
    )
    p.add_argument(
        "--secret-file", help="file holding the whsec_ secret [PUNCHCLOCK_CHANNEL_SECRET]"
    )
    p.add_argument("--headers", help="JSON object of extra request headers")
    p.add_argument("--all-jobs", help=f"events of every job, comma-separated: {','.join(EVENTS)}")
    p.add_argument(
        "--include-payload",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send the run's payload in its events (default: never)",
    )


def register_channel_commands(sub: Any) -> None:
    channels = sub.add_parser("channels", help="manage notification channels through the API")
    csub = channels.add_subparsers(dest="channels_command", required=True, metavar="SUBCOMMAND")
    _leaf(csub, "list", "list channels", channels_list)
    _flags(_leaf(csub, "create", "create a webhook channel", channels_create), create=True)
    p = _leaf(csub, "update", "change a channel's fields", channels_update)
    p.add_argument("channel", help="channel id or name")
    _flags(p, create=False)
    for name, text, func in (("show", "show a channel", channels_show),
                             ("delete", "delete a channel", channels_delete),
                             ("test", "queue a test event", channels_test)):  # fmt: skip
        _leaf(csub, name, text, func).add_argument("channel", help="channel id or name")
    p = _leaf(sub, "deliveries", "list notification deliveries, newest first", deliveries_list)
    p.add_argument("--channel", help="channel id or name")
    p.add_argument("--job-id", type=int, help="only this job's deliveries")
    p.add_argument(
        "--status",
        action="append",
        choices=["pending", "delivered", "failed"],
        help="repeatable",
    )
    p.add_argument("--limit", type=int, help="page size, 1-500 (default 100)")
    p.add_argument("--cursor", help="next_cursor of a previous page")
