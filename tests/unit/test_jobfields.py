"""A job's fields are declared once (supervisor/core/jobfields.py) and every declared field
reaches validation, the OpenAPI schema, the job view, the dashboard's form and the CLI's
flags: a field cannot be half-added."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from multidict import MultiDict

from api import views
from api.client_jobs import job_body
from api.openapi import document
from api.ui import pages_edit
from supervisor.cli import build_parser
from supervisor.core import jobfields, jobspec
from supervisor.core.domain import Job, JobSpec
from supervisor.core.errors import InvalidSpecs
from supervisor.core.jobfields import FIELDS, JobField
from supervisor.core.jobspec import validate_job

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BASE = {"name": "nightly", "type": "echo", "cron": "30 2 * * *", "overlap": "allow"}
FORM = Path(pages_edit.__file__).parent / "templates" / "job_form.html"
IDS = [f.name for f in FIELDS]
# A valid value of each kind as the form and the CLI take it: text.
TYPED = {
    jobfields.STRING: "x",
    jobfields.INSTANT: "2030-01-01T00:00:00Z",
    jobfields.INTEGER: "5",
    jobfields.NUMBER: "5",
    jobfields.BOOLEAN: "on",
    jobfields.OBJECT: '{"a": 1}',
    jobfields.CODES: "0, 3",
    jobfields.ENDINGS: "65, timeout",
    jobfields.RULES: "[]",
}


def _nested(f: JobField, value: Any) -> dict[str, Any]:
    return {f.path[0]: value} if len(f.path) == 1 else {f.path[0]: {f.path[1]: value}}


def _at(body: dict[str, Any], f: JobField) -> Any:
    for key in f.path:
        body = body[key]
    return body


def _view(spec: JobSpec) -> dict[str, Any]:
    return views.job(Job(1, spec, None, NOW, NOW, NOW), payloads=True)


def _refused(body: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(InvalidSpecs) as caught:
        validate_job(body)
    return [(e.field, e.message) for e in caught.value.errors]


def test_the_declaration_is_the_validations_list_of_fields() -> None:
    assert {f.path[0] for f in FIELDS} == jobspec.FIELDS
    assert {f.path[0] for f in FIELDS if f.nullable} == jobspec.NULLABLE
    assert len(set(IDS)) == len(IDS) and len({f.flag for f in FIELDS}) == len(FIELDS)


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_validation_knows_each_field(f: JobField) -> None:
    """A value of no field's kind is refused naming the field (not as an unknown one)."""
    base = {k: v for k, v in BASE.items() if f.name != "run_at" or k != "cron"}
    errors = _refused({**base, **_nested(f, [[]])})
    named = [
        m for field, m in errors if field == f.key or field.startswith((f"{f.key}[", f"{f.key}."))
    ]
    assert named and "unknown field" not in named, errors


NUMBERS = [f for f in FIELDS if f.kind in jobfields.NUMBERS]


@pytest.mark.parametrize("f", NUMBERS, ids=[f.name for f in NUMBERS])
def test_validation_keeps_the_declared_bounds(f: JobField) -> None:
    assert f.least is not None and f.most is not None

    def body(value: Any) -> dict[str, Any]:
        given = _nested(f, value)
        if f.name == "retry_base_seconds":  # the cap must be at least the base
            given["retry"]["cap_seconds"] = jobfields.WEEK
        return {**BASE, **given}

    assert _at(_view(validate_job(body(f.most))), f) == f.most
    for wrong in (f.least - 1, f.most + 1):
        errors = _refused(body(wrong))
        assert [field for field, _ in errors] == [f.key], errors
        assert f"between {jobfields.bounds(f).replace('-', ' and ')}" in errors[0][1]
    if f.nullable:
        assert _at(_view(validate_job(body(None))), f) is None


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_openapi_schema_has_each_field_as_declared(f: JobField) -> None:
    schemas = document()["components"]["schemas"]
    for name in ("JobCreate", "JobPatch"):
        props = schemas[name]["properties"]
        schema = props[f.path[0]] if len(f.path) == 1 else props[f.path[0]]["properties"][f.path[1]]
        assert schema["description"] == f.help
        assert ("null" in schema["type"]) == f.nullable
        if f.kind in jobfields.NUMBERS:
            assert (schema["minimum"], schema["maximum"]) == (f.least, f.most)
        if f.choices:
            assert schema["enum"] == list(f.choices)
    required = schemas["JobCreate"]["required"]
    assert (f.name in required) == f.required


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_job_view_shows_each_field(f: JobField) -> None:
    spec = validate_job(BASE)
    shown = _view(spec)
    if not f.viewed:  # notify: the detail's, from the notify rules
        assert f.name not in shown
    elif f.write_only:  # shown as where it points, never itself
        assert f.name not in shown and views.SHOWN_AS[f.name] in shown
    else:
        assert _at(shown, f) == views.field_value(spec, f)


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_form_has_each_field_and_sends_it(f: JobField) -> None:
    assert f'name="{f.name}"' in FORM.read_text(), f"job_form.html has no input {f.name}"
    assert f.name in pages_edit._values(None)
    text = f.choices[0] if f.choices else TYPED[f.kind]
    kind = "once" if f.kind == jobfields.INSTANT else "cron"
    body, errors, _ = pages_edit._body(MultiDict({f.name: text, "kind": kind}), editing=False)
    assert not errors and _at(body, f) not in (None, ""), body


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
@pytest.mark.parametrize("command", [["create"], ["update", "nightly"]])
def test_the_cli_has_a_flag_for_each_field(f: JobField, command: list[str]) -> None:
    parser = build_parser()
    value = [] if f.kind == jobfields.BOOLEAN else [f.choices[0] if f.choices else TYPED[f.kind]]
    args = parser.parse_args(["jobs", *command, f.flag, *value])
    assert _at(job_body(args), f) not in (None, ""), f.flag
