"""Plain-text rendering of API answers for `punchclock jobs|runs` on a terminal."""

from __future__ import annotations

from typing import Any


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _cell(value: Any, width: int = 60) -> str:
    text = "-" if value is None else str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


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
        f"  attempts      {job['max_attempts']}, retry {retry['base_seconds']:g}s"
        f" up to {retry['cap_seconds']:g}s",
        f"  timeout       {_cell(job['timeout_seconds'])}",
        f"  catch-up      {job['catchup']} within {job['catchup_window_seconds']:g}s",
        f"  overlap       {job['overlap']}",
        f"  concurrency   {_limits(job)}",
        f"  payload       {_cell(job['payload'], 200)}",
    ]
    if job.get("next"):
        lines.append(
            "  next runs     "
            + "\n                ".join(f"{_time(i['utc'])}  ({i['local']})" for i in job["next"])
        )
    lines += [f"  warning       {w}" for w in job.get("warnings", [])]
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
    return f"yes: {job['pause_reason']}" if job.get("pause_reason") else "yes"


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
            None if r["duration_seconds"] is None else f"{r['duration_seconds']:.3f}s",
            r["worker_id"],
            r["error"],
        ]
        for r in page["runs"]
    ]
    if not rows:
        return "no runs"
    headers = ["ID", "JOB", "SCHEDULED (UTC)", "STATUS", "TRIES", "DURATION", "WORKER", "ERROR"]
    return table(headers, rows) + _more(page)


def run_card(data: dict[str, Any]) -> str:
    run = data.get("run", data)
    lines = [
        f"run {run['id']}  job {run['job_name']} ({run['job_id']})  {run['status']}",
        f"  scheduled     {_time(run['scheduled_at'])}  ({run['scheduled_at_local']})",
        f"  trigger       {run['trigger']}",
        f"  attempts      {run['attempts']} of {run['max_attempts']}",
        f"  started       {_cell(_time(run['started_at']))}",
        f"  finished      {_cell(_time(run['finished_at']))}",
        f"  duration      {_cell(run['duration_seconds'])}",
    ]
    if run.get("error"):
        lines.append(f"  error         {run['error']}")
    history = run.get("history") or []
    if history:
        lines.append("")
        rows = [
            [
                a["attempt"],
                a["worker_id"],
                _time(a["started_at"]),
                a["duration_seconds"],
                a["outcome"],
                a["exit_code"] if a["signal"] is None else f"signal {a['signal']}",
                a["error"],
            ]
            for a in history
        ]
        lines.append(table(["#", "WORKER", "STARTED", "SECONDS", "OUTCOME", "EXIT", "ERROR"], rows))
        last = history[-1]
        for stream in ("stdout", "stderr"):
            if text := last.get(f"{stream}_tail"):
                note = ", bytes not UTF-8 shown as \ufffd" if last.get(f"{stream}_replaced") else ""
                lines += ["", f"{stream} tail (attempt {last['attempt']}{note}):", text]
    return "\n".join(lines)
