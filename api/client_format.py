"""Plain-text rendering of API answers for `punchclock jobs|runs` on a terminal: payloads as
JSON, durations with a unit, statuses in colour (client_colour: on a terminal only)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

from api.client_colour import paint

# A cell's colour, from its column and text (None: none).
Colours = Callable[[int, str], str | None]
STATUS_COLOURS = {"succeeded": "green", "running": "cyan", "failed": "yellow", "dead": "red",
                  "cancelled": "dim", "skipped": "dim", "pending": "yellow",
                  "delivered": "green"}  # fmt: skip
SKIP_REASONS = {
    "missed": "missed: not run within its catch-up window",
    "overlap": "overlap: the job's previous run was still running",
}


def table(headers: list[str], rows: list[list[Any]], colours: Colours | None = None) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(row: list[str], colour: Colours) -> str:
        # Padded after painting: a colour's marks take no room on the terminal.
        parts = [
            (paint(c, name) if c and (name := colour(i, c)) else c) + " " * (w - len(c))
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    lines = [line(headers, lambda i, c: "bold")]
    lines += [line(r, colours or (lambda i, c: None)) for r in cells]
    return "\n".join(lines)


def status_in(column: int) -> Colours:
    """Colours the status words in `column`."""
    return lambda i, text: STATUS_COLOURS.get(text) if i == column else None


def _cell(value: Any, width: int = 60) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def duration(seconds: float | None) -> str | None:
    """1.23 s, 340 ms, 2 min 5 s, 1 h 30 min."""
    if seconds is None:
        return None
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def payload(data: dict[str, Any]) -> str:
    if data.get("payload_withheld"):
        return "(withheld: a read token sees no payloads; an operator token does)"
    return json.dumps(data.get("payload"), ensure_ascii=False, indent=None)


def skip_reason(reason: str | None) -> str | None:
    return None if reason is None else SKIP_REASONS.get(reason, reason)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _time(value: str | None) -> str | None:
    return None if value is None else value.replace("T", " ")


def _more(page: dict[str, Any]) -> str:
    return f"\nmore: --cursor {page['next_cursor']}" if page.get("next_cursor") else ""


def _schedule(job: dict[str, Any]) -> str:
    return f"cron {job['cron']}" if job.get("cron") else f"once at {_time(job.get('run_at'))}"


def jobs_table(page: dict[str, Any]) -> str:
    rows = [
        [j["id"], j["name"], j["type"], _schedule(j), j["timezone"], "yes" if j["paused"] else ""]
        for j in page["jobs"]
    ]
    if not rows:
        return "no jobs"
    return table(["ID", "NAME", "TYPE", "SCHEDULE", "ZONE", "PAUSED"], rows) + _more(page)


def job_card(job: dict[str, Any]) -> str:
    retry = job["retry"]
    lines = [
        f"job {job['id']}  {job['name']}",
        f"  type          {job['type']}",
        f"  schedule      {_schedule(job)} ({job['timezone']})",
        f"  paused        {_paused(job)}",
        f"  attempts      {job['max_attempts']}, retry {duration(retry['base_seconds'])}"
        f" up to {duration(retry['cap_seconds'])}",
        f"  timeout       {duration(job['timeout_seconds']) or 'none'}",
        f"  catch-up      {job['catchup']} within {duration(job['catchup_window_seconds'])}",
        f"  overlap       {job['overlap']}",
        f"  concurrency   {_limits(job)}",
        f"  payload       {_cell(payload(job), 200)}",
    ]
    if job.get("next"):
        lines.append(
            "  next runs     "
            + "\n                ".join(f"{_time(i['utc'])}  ({i['local']})" for i in job["next"])
        )
    lines += [f"  {paint('warning', 'yellow')}       {w}" for w in job.get("warnings", [])]
    return "\n".join(lines)


def _limits(job: dict[str, Any]) -> str:
    parts = []
    if job.get("max_concurrent") is not None:
        parts.append(f"at most {job['max_concurrent']} at once")
    if job.get("concurrency_group"):
        parts.append(f"in group {job['concurrency_group']}")
    return ", ".join(parts) or "no limit"


def _paused(job: dict[str, Any]) -> str:
    if not job["paused"]:
        return "no"
    yes = paint("yes", "yellow")
    return f"{yes}: {job['pause_reason']}" if job.get("pause_reason") else yes


def deleted(data: dict[str, Any]) -> str:
    return f"deleted job {data['id']}; cancelled {data['cancelled_runs']} unstarted run(s)"


def runs_table(page: dict[str, Any]) -> str:
    rows = [
        [
            r["id"],
            r["job_name"],
            _time(r["scheduled_at"]),
            r["status"],
            f"{r['attempts']}/{r['max_attempts']}",
            duration(r["duration_seconds"]),
            r["worker_id"],
            r["error"] or skip_reason(r.get("skip_reason")),
        ]
        for r in page["runs"]
    ]
    if not rows:
        return "no runs"
    headers = ["ID", "JOB", "SCHEDULED (UTC)", "STATUS", "TRIES", "DURATION", "WORKER", "DETAIL"]
    return table(headers, rows, status_in(3)) + _more(page)


def run_card(data: dict[str, Any]) -> str:
    run = data.get("run", data)
    lines = [
        f"run {run['id']}  job {run['job_name']} ({run['job_id']})  "
        + paint(run["status"], STATUS_COLOURS.get(run["status"], "")),
        f"  scheduled     {_time(run['scheduled_at'])}  ({run['scheduled_at_local']})",
        f"  trigger       {run['trigger']}",
        f"  attempts      {run['attempts']} of {run['max_attempts']}",
        f"  started       {_cell(_time(run['started_at']))}",
        f"  finished      {_cell(_time(run['finished_at']))}",
        f"  duration      {_cell(duration(run['duration_seconds']))}",
    ]
    if run.get("skip_reason"):
        lines.append(f"  skipped       {skip_reason(run['skip_reason'])}")
    if "payload" in run and (run["payload"] or run.get("payload_withheld")):
        lines.append(f"  payload       {_cell(payload(run), 200)}")
    if run.get("error"):
        lines.append(f"  {paint('error', 'red')}         {run['error']}")
    history = run.get("history") or []
    if history:
        lines.append("")
        rows = [
            [
                a["attempt"],
                a["worker_id"],
                _time(a["started_at"]),
                duration(a["duration_seconds"]),
                a["outcome"],
                a["exit_code"] if a["signal"] is None else _signal_name(a["signal"]),
                a["error"],
            ]
            for a in history
        ]
        head = ["#", "WORKER", "STARTED", "DURATION", "OUTCOME", "EXIT", "ERROR"]
        outcomes = {"running": "cyan", "succeeded": "green", "failed": "red", "timed_out": "red",
                    "oom_killed": "red", "lease_lost": "yellow"}  # fmt: skip
        lines.append(table(head, rows, lambda i, c: outcomes.get(c) if i == 4 else None))
        last = history[-1]
        for stream in ("stdout", "stderr"):
            if text := last.get(f"{stream}_tail"):
                note = ", bytes not UTF-8 shown as \ufffd" if last.get(f"{stream}_replaced") else ""
                lines += ["", f"{stream} tail (attempt {last['attempt']}{note}):", text]
    return "\n".join(lines)
