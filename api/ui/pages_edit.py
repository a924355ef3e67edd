"""New and edit job: one form for every field the API accepts, validated by the API's own
jobspec (errors shown next to their fields), and the schedule preview fragment that htmx
fetches as the user types (without JavaScript, "Preview only" POSTs the form, which comes
back unsaved with the preview).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode
from zoneinfo import available_timezones

from aiohttp import web

from api import views
from api.instants import parse_iso
from api.ui import forms, preview
from api.ui.common import UI_CONFIG, UI_LIMITS, job_of, render, store
from api.ui.guard import PREFIX, redirect
from supervisor.core import jobfields, jobs, schedule
from supervisor.core.channels import notifications
from supervisor.core.domain import Job, JobSpec
from supervisor.core.egress import destinations
from supervisor.core.errors import Conflict, InvalidSpec
from supervisor.core.events import destination
from supervisor.core.jobfields import FIELD, FIELDS, JobField, typed_items
from supervisor.core.model import NAME_RULE, Catchup, Overlap

routes = web.RouteTableDef()
PREVIEW = 10
MAX_WORKERS = 1000  # read for the type suggestions
# The form's inputs are jobfields.FIELDS, named as their `name`; how each is read and shown
# follows its kind. Numbers: input -> (body path, integer); empty, when editing, is none
# for the nullable ones. Lists are typed as comma-separated items (numbers become numbers),
# empty meaning the field's `blank`.
NUMBERS = {f.name: (f.path, f.integer) for f in FIELDS if f.kind in jobfields.NUMBERS}
NULL_WHEN_EMPTY = tuple(name for name in NUMBERS if FIELD[name].nullable)
LISTS = {f.name: f.blank for f in FIELDS if f.kind in jobfields.LISTS}  # (jobfields.typed_items)
TEXT = tuple(f.name for f in FIELDS if f.name not in NUMBERS and f.kind != jobfields.BOOLEAN)
KEYS = {f.name: f.key for f in FIELDS}  # an input's field as errors name it: retry.cap_seconds
ZONES = sorted(available_timezones())


def _values(spec: JobSpec | None, notify: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """The form's fields as text: a job's (with its notify list), or the API's defaults."""
    s = spec or JobSpec(name="", type="", schedule=schedule.parse_cron("0 * * * *"))
    shown = [f for f in FIELDS if f.viewed and not f.write_only]
    return {
        **{f.name: _text(f, views.field_value(s, f)) for f in shown},
        "run_at": s.run_at.isoformat() if s.run_at else "",
        "payload": json.dumps(s.payload, indent=2, sort_keys=True) if s.payload else "",
        "notify": json.dumps(notify, indent=2) if notify else "",
        "ping_url": "",  # write-only: the form shows where it points, never the URL
        "ping_destination": "" if s.ping_url is None else destination(s.ping_url),
        "kind": "cron" if s.cron is not None or spec is None else "once",
        "paused": "on" if s.paused else "",
    }


def _text(f: JobField, value: Any) -> str:
    """A field's value (as the API's view shows it) as the form's input holds it."""
    if value is None:
        return ""
    if f.kind in jobfields.NUMBERS:
        return f"{value:g}"
    if f.kind in jobfields.LISTS:
        return ", ".join(str(v) for v in value)
    return str(value)


def _body(form: Any, editing: bool) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """(the API body, errors the form alone can tell, the text typed)."""
    typed = {k: str(form.get(k, "")).strip() for k in (*TEXT, *NUMBERS, "kind", "paused")}
    errors: dict[str, str] = {}
    body: dict[str, Any] = {"name": typed["name"], "type": typed["type"]}
    body["timezone"] = typed["timezone"] or "UTC"
    if typed["kind"] == "once":
        body["run_at"] = _run_at(typed["run_at"], body["timezone"], errors)
        if not typed["run_at"]:
            errors["run_at"] = "is required for a one-off job"
        if editing:
            body["cron"] = None
    else:
        body["cron"] = typed["cron"]
        if editing:
            body["run_at"] = None
    if typed["payload"]:
        try:
            body["payload"] = json.loads(typed["payload"])
        except ValueError as exc:
            errors["payload"] = f"is not valid JSON: {exc}"
    elif editing:
        body["payload"] = {}
    for name, (path, integer) in NUMBERS.items():
        text = typed[name]
        if not text:
            if name in NULL_WHEN_EMPTY and editing:
                body[name] = None
            continue
        try:
            value: float = int(text) if integer else float(text)
        except ValueError:
            errors[name] = "must be a whole number" if integer else "must be a number"
            continue
        target = body.setdefault(path[0], {}) if len(path) == 2 else body
        target[path[-1]] = value
    body["catchup"], body["overlap"] = typed["catchup"], typed["overlap"]
    body["paused"] = bool(typed["paused"])
    for name in LISTS:
        body[name] = typed_items(FIELD[name], typed[name])
    body["concurrency_group"] = typed["concurrency_group"] or None
    if typed["ping_url"]:  # editing, empty: the stored URL stays (it is never shown)
        body["ping_url"] = typed["ping_url"]
    if form.get("ping_url_clear"):
        body["ping_url"] = None
    if typed["notify"]:
        try:
            body["notify"] = json.loads(typed["notify"])
        except ValueError as exc:
            errors["notify"] = f"is not valid JSON: {exc}"
    else:
        body["notify"] = []
    return body, errors, typed


def _run_at(text: str, zone: str, errors: dict[str, str]) -> Any:
    """An ISO instant; without an offset, read in the job's zone (as the form says)."""
    if not text:
        return None
    try:
        at = parse_iso(text)
    except ValueError:
        return text  # the API names the problem
    if at.tzinfo is None:
        try:
            at = at.replace(tzinfo=schedule.load_zone(zone))
        except InvalidSpec:
            return text
    return at.isoformat()


def _field(name: str) -> str:
    """An API error's field as the form's input name (retry.base_seconds: retry_base_seconds;
    dead_on[1] and notify.0.channel: the list's field)."""
    if name.startswith("retry."):
        return name.replace(".", "_")
    return name.split("[", 1)[0].split(".", 1)[0]


async def _form(
    request: web.Request,
    job: Job | None,
    values: dict[str, str],
    errors: dict[str, str],
    status: int = 200,
) -> web.Response:
    instants, problem = await _preview(request, values)
    context = {
        "job": job,
        "v": values,
        "errors": errors,
        "zones": ZONES,
        "types": await _offered_types(request),
        "name_rule": NAME_RULE,
        "keys": KEYS,
        "catchups": [c.value for c in Catchup],
        "overlaps": [o.value for o in Overlap],
        "instants": instants,
        "preview_error": problem,
        "utc_only": preview.utc_only(values.get("timezone", "")),
        "action": f"{PREFIX}jobs/{job.id}/edit" if job else f"{PREFIX}jobs/new",
    }
    return render(request, "job_form.html", context, status)


async def _offered_types(request: web.Request) -> list[str]:
    """The handler types live workers offer: the type field's suggestions."""
    found = await store(request).list_workers(0.0, MAX_WORKERS)
    return sorted({t for w in found if w.live for t in w.types})


async def _preview(
    request: web.Request, v: Mapping[str, str]
) -> tuple[list[preview.Instant], str | None]:
    """The schedule the form describes: a one-off's instant, or the cron's next ones."""
    zone, cron = v.get("timezone", "").strip(), v.get("cron", "").strip()
    try:
        if v.get("kind") == "once":
            return preview.once(v.get("run_at", ""), zone, await store(request).now()), None
        if not cron:
            return [], None
        return preview.preview(cron, zone, await store(request).now(), PREVIEW), None
    except InvalidSpec as exc:
        return [], str(exc)


@routes.get("/jobs/new")
async def new_form(request: web.Request) -> web.StreamResponse:
    return await _form(request, None, _values(None), {})


@routes.get(r"/jobs/{id:[0-9]{1,18}}/edit")
async def edit_form(request: web.Request) -> web.StreamResponse:
    job = await job_of(request)
    notify = [r.view() for r in await notifications(store(request)).job_notify(job.id)]
    return await _form(request, job, _values(job.spec, notify), {})


@routes.get("/jobs/preview")
async def preview_fragment(request: web.Request) -> web.StreamResponse:
    """The preview of ?kind=&cron=&run_at=&timezone= (a fragment for htmx, else a page)."""
    v = {k: request.query.get(k, "") for k in ("kind", "cron", "run_at", "timezone")}
    if len(v["cron"]) > 200 or len(v["timezone"]) > 100 or len(v["run_at"]) > 100:
        raise InvalidSpec("cron", "is too long")
    instants, problem = await _preview(request, v)
    context = {
        "instants": instants,
        "preview_error": problem,
        "utc_only": preview.utc_only(v["timezone"]),
        "v": {**v, "timezone": v["timezone"] or "UTC"},
    }
    page = "job_preview.html" if request.headers.get("HX-Request") else "job_preview_page.html"
    return render(request, page, context)


@routes.post("/jobs/new")
@forms.tolerant  # a payload over api_max_body: the form again, its other fields kept
async def create(request: web.Request) -> web.StreamResponse:
    return await _save(request, None)


@routes.post(r"/jobs/{id:[0-9]{1,18}}/edit")
@forms.tolerant
async def update(request: web.Request) -> web.StreamResponse:
    return await _save(request, await job_of(request))


async def _save(request: web.Request, job: Job | None) -> web.StreamResponse:
    form = await request.post()
    body, errors, typed = _body(form, job is not None)
    values = {**typed, "kind": typed["kind"] or "cron"}
    ping = job.spec.ping_url if job else None
    values["ping_destination"] = "" if ping is None else destination(ping)  # never from the form
    too_big = {
        k: forms.too_large(n, request.client_max_size) for k, n in forms.dropped(request).items()
    }
    if form.get("preview"):  # "Preview only" (the no-JS preview): the form again, unsaved
        return await _form(request, job, values, too_big, 413 if too_big else 200)
    if too_big:  # never saved without a field it was sent
        return await _form(request, job, values, too_big, 413)
    limits = request.app[UI_LIMITS]
    hosts = destinations(request.app[UI_CONFIG])
    if not errors:
        try:
            if job is None:
                spec = jobs.validate_job(body, allowed_hosts=hosts)
                saved = await jobs.create_job(store(request), spec, limits)
            else:
                saved = await jobs.update_job(store(request), job.id, body, limits, hosts)
        except jobs.InvalidSpecs as exc:
            errors = {_field(e.field): e.message for e in exc.errors}
        except Conflict as exc:
            errors = {"name": str(exc).removeprefix("name: ")}
        else:
            done = {"done": "created" if job is None else "saved", "job": saved.spec.name}
            moved = job is None or job.spec.run_at != saved.spec.run_at
            if moved and jobs.past_run_at(saved.spec, await store(request).now()):
                done["warn"] = "run_at"  # the jobs list says what happens to its run
            return redirect(f"{PREFIX}jobs?{urlencode(done)}")
    return await _form(request, job, values, errors, 422)
