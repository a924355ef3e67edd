"""`punchclock jobs ...` and `punchclock runs ...`: the management API over HTTP.

Standard library only (urllib, client_http.py: the token goes to the API's origin only),
so registering the subcommands costs nothing. The URL and
token come from --api-url/--api-token or PUNCHCLOCK_API_URL/PUNCHCLOCK_API_TOKEN (for a
loopback URL without a token: the admin token file `punchclock api` generated). Output is a
readable table, or the API's JSON with --json. Exit status: 0 ok, 1 failed (not found,
conflict, auth, unreachable), 2 usage or invalid input (including the API's 400 and 422).
"""

from __future__ import annotations

import argparse
from typing import Any

from api import client_format as fmt
from api.client_channels import register_channel_commands
from api.client_common import DEFAULT_URL, _client, _json_arg, _leaf, _local_token, _out, _pages
from api.client_groups import register_group_commands
from api.client_http import EXIT_USAGE, ApiClient, ClientError
from api.client_jobs import job_body, job_flags
from supervisor.core.model import RunStatus

# Also here: DEFAULT_URL (`punchclock up` prints it) and the loopback token's reader.
__all__ = ["DEFAULT_URL", "_local_token", "register_client_commands"]
STATUSES = [s.value for s in RunStatus]


# ---------------------------------------------------------------- helpers


def _job_id(api: ApiClient, ref: str) -> int:
    """A job given by id or by name."""
    if ref.isdigit():
        return int(ref)
    cursor = None
    while True:
        page = api.call(
            "GET", "/v1/jobs", query=[("name_prefix", ref), ("limit", 500), ("cursor", cursor)]
        )
        for job in page["jobs"]:
            if job["name"] == ref:
                return int(job["id"])
        cursor = page["next_cursor"]
        if cursor is None:
            raise ClientError(f"no job named {ref!r}")


# ---------------------------------------------------------------- jobs


def jobs_list(args: argparse.Namespace) -> int:
    api = _client(args)
    paused = None if args.paused is None else str(args.paused).lower()
    query = [
        ("type", args.type),
        ("paused", paused),
        ("name_prefix", args.name_prefix),
        ("limit", args.limit),
        ("cursor", args.cursor),
    ]
    return _out(args, _pages(api, "/v1/jobs", "jobs", query, args.all), fmt.jobs_table)


def jobs_show(args: argparse.Namespace) -> int:
    api = _client(args)
    return _out(args, api.call("GET", f"/v1/jobs/{_job_id(api, args.job)}"), fmt.job_card)


def jobs_create(args: argparse.Namespace) -> int:
    data = _client(args).call("POST", "/v1/jobs", body=job_body(args))
    return _out(args, data, fmt.job_card)


def jobs_update(args: argparse.Namespace) -> int:
    api = _client(args)
    body = job_body(args)
    if not body:
        raise ClientError("nothing to change: give at least one field", EXIT_USAGE)
    data = api.call("PATCH", f"/v1/jobs/{_job_id(api, args.job)}", body=body)
    return _out(args, data, fmt.job_card)


def jobs_action(args: argparse.Namespace) -> int:
    api = _client(args)
    job_id = _job_id(api, args.job)
    if args.action == "delete":
        data = api.call("DELETE", f"/v1/jobs/{job_id}")
        return _out(args, data, fmt.deleted)
    body = {"reason": args.reason} if args.reason is not None else None
    data = api.call("POST", f"/v1/jobs/{job_id}/{args.action}", body=body)
    return _out(args, data, fmt.job_card)


def jobs_trigger(args: argparse.Namespace) -> int:
    api = _client(args)
    job_id = _job_id(api, args.job)
    body = None if args.payload is None else {"payload": _json_arg(args.payload, "--payload")}
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    data = api.call("POST", f"/v1/jobs/{job_id}/trigger", body=body, headers=headers)
    return _out(args, data, fmt.run_card)


def jobs_backfill(args: argparse.Namespace) -> int:
    api = _client(args)
    job_id = _job_id(api, args.job)
    body = {"from": args.from_, "to": args.to, "dry_run": args.dry_run}
    return _out(args, api.call("POST", f"/v1/jobs/{job_id}/backfill", body=body), _backfilled)


def _backfilled(d: dict[str, Any]) -> str:
    head = f"job {d['job_id']}, {d['from']} to {d['to']}: {d['instants']} instant(s),"
    if d["dry_run"]:
        return f"{head} {d['missing']} without a run (dry run: nothing created)"
    return f"{head} {d['missing']} without a run; created {d['created']} backfill run(s)"


# ---------------------------------------------------------------- runs


def _run_filters(args: argparse.Namespace) -> list[tuple[str, Any]]:
    query: list[tuple[str, Any]] = []
    if args.job is not None:
        query.append(("job_id" if args.job.isdigit() else "job_name", args.job))
    query += [("status", s) for s in args.status or []]
    for name in ("scheduled_after", "scheduled_before", "finished_after", "finished_before"):
        query.append((name, getattr(args, name)))
    return query


def runs_list(args: argparse.Namespace) -> int:
    query = [*_run_filters(args), ("limit", args.limit), ("cursor", args.cursor)]
    if args.upcoming:
        query.append(("upcoming", "true"))
    data = _pages(_client(args), "/v1/runs", "runs", query, args.all)
    return _out(args, data, fmt.runs_table)


def runs_show(args: argparse.Namespace) -> int:
    return _out(args, _client(args).call("GET", f"/v1/runs/{args.run}"), fmt.run_card)


def runs_requeue(args: argparse.Namespace) -> int:
    api = _client(args)
    if args.run is not None:
        data = api.call("POST", f"/v1/runs/{args.run}/requeue")
    elif args.bulk:
        data = api.call("POST", "/v1/runs/requeue", query=_run_filters(args))
    else:
        raise ClientError("give a run id, or --bulk to requeue every matching dead run", EXIT_USAGE)
    return _out(args, data, lambda d: f"requeued {d['requeued']} run(s)")


def runs_cancel(args: argparse.Namespace) -> int:
    return _out(args, _client(args).call("POST", f"/v1/runs/{args.run}/cancel"), fmt.run_card)


# ---------------------------------------------------------------- parser


def _run_filter_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", help="job id or name")
    p.add_argument("--status", action="append", choices=STATUSES, help="repeatable")
    for name in ("scheduled-after", "scheduled-before", "finished-after", "finished-before"):
        p.add_argument(f"--{name}", help="ISO-8601 instant with an offset")


def register_client_commands(sub: Any) -> None:
    jobs = sub.add_parser("jobs", help="manage jobs through the API")
    jsub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="SUBCOMMAND")
    p = _leaf(jsub, "list", "list jobs", jobs_list)
    p.add_argument("--type", help="only jobs of this handler type")
    p.add_argument(
        "--paused",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="only paused (--paused) or unpaused (--no-paused) jobs",
    )
    p.add_argument("--name-prefix", help="only jobs whose name starts with this")
    p.add_argument("--limit", type=int, help="page size, 1-500 (default 100)")
    p.add_argument("--cursor", help="next_cursor of a previous page")
    p.add_argument("--all", action="store_true", help="follow every page")
    p = _leaf(jsub, "show", "show a job and its next instants", jobs_show)
    p.add_argument("job", help="job id or name")
    job_flags(_leaf(jsub, "create", "create a job", jobs_create), create=True)
    p = _leaf(jsub, "update", "change a job's fields", jobs_update)
    p.add_argument("job", help="job id or name")
    job_flags(p, create=False)
    for action, text in (("pause", "pause"), ("resume", "resume"), ("delete", "delete")):
        p = _leaf(jsub, action, f"{text} a job", jobs_action)
        p.add_argument("job", help="job id or name")
        p.set_defaults(action=action, reason=None)
        if action == "pause":
            p.add_argument("--reason", help="why (shown and returned until resumed)")
    p = _leaf(jsub, "trigger", "run a job now", jobs_trigger)
    p.add_argument("job", help="job id or name")
    p.add_argument("--payload", help="JSON object replacing the job's payload for this run")
    p.add_argument("--idempotency-key", help="a retried trigger with this key is not repeated")
    p = _leaf(
        jsub, "backfill", "run the instants in [--from, --to) that have no run", jobs_backfill
    )
    p.add_argument("job", help="job id or name")
    p.add_argument("--from", dest="from_", required=True, help="ISO-8601 instant with an offset")
    p.add_argument("--to", required=True, help="ISO-8601 instant with an offset, by now")
    p.add_argument("--dry-run", action="store_true", help="only count the instants without a run")

    runs = sub.add_parser("runs", help="inspect, requeue and cancel runs through the API")
    rsub = runs.add_subparsers(dest="runs_command", required=True, metavar="SUBCOMMAND")
    p = _leaf(rsub, "list", "list runs due by now, newest first (or --upcoming)", runs_list)
    _run_filter_flags(p)
    p.add_argument(
        "--upcoming", action="store_true", help="the plan ahead: runs after now, soonest first"
    )
    p.add_argument("--limit", type=int, help="page size, 1-500 (default 100)")
    p.add_argument("--cursor", help="next_cursor of a previous page")
    p.add_argument("--all", action="store_true", help="follow every page")
    p = _leaf(rsub, "show", "show a run with all its attempts", runs_show)
    p.add_argument("run", type=int, help="run id")
    p = _leaf(rsub, "requeue", "requeue a dead or failed run (or --bulk)", runs_requeue)
    p.add_argument("run", type=int, nargs="?", help="run id")
    p.add_argument("--bulk", action="store_true", help="every dead run matching the filters")
    _run_filter_flags(p)
    p = _leaf(rsub, "cancel", "cancel a scheduled or running run", runs_cancel)
    p.add_argument("run", type=int, help="run id")
    register_channel_commands(sub)
    register_group_commands(sub)
