"""JobSpec validation (each error names its field; the schedule comes back parsed) and
Job.from_row (a row always loads, even one whose zone this host lacks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from api import views
from supervisor.core.domain import Job, JobSpec, UnloadableSchedule
from supervisor.core.errors import InvalidSpec, InvalidSpecs
from supervisor.core.jobspec import validate_job
from supervisor.core.model import Catchup, Overlap
from supervisor.core.planning import PlanLimits, plan_job
from supervisor.core.schedule import CronSchedule, OneOffSchedule

BASE = {"name": "nightly", "type": "echo", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def _fields(body: Any, base: JobSpec | None = None) -> list[str]:
    with pytest.raises(InvalidSpecs) as caught:
        validate_job(body, base)
    return [e.field for e in caught.value.errors]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": ".hidden"}, "name"),
        ({"type": "a/b"}, "type"),
        ({"payload": []}, "payload"),
        ({"payload": {"x": "\x00"}}, "payload"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1.5}, "max_attempts"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"retry": {"base_seconds": -1}}, "retry.base_seconds"),
        ({"retry": {"base_seconds": 10, "cap_seconds": 5}}, "retry.cap_seconds"),
        ({"retry": {"jitter": 1}}, "retry.jitter"),
        ({"catchup": "some"}, "catchup"),
        ({"catchup_window_seconds": -1}, "catchup_window_seconds"),
        ({"overlap": "queue"}, "overlap"),
        ({"paused": "yes"}, "paused"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({"timezone": 5}, "timezone"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": 5}, "cron"),
        ({"cron": None, "run_at": "tomorrow"}, "run_at"),
        ({"cron": None, "run_at": "2026-01-01T00:00:00"}, "run_at"),
        ({"cron": None, "run_at": "9999-12-31T00:00:00Z"}, "run_at"),
        ({"run_at": "2026-01-01T00:00:00Z"}, "cron"),  # both
        ({"cron": None}, "cron"),
        ({"colour": "red"}, "colour"),
        ({"paused": None}, "paused"),
        ({"pause_after_failures": 0}, "pause_after_failures"),
        ({"pause_after_failures": True}, "pause_after_failures"),
        ({"job_failing_after": 1001}, "job_failing_after"),
        ({"expect_success_within_seconds": 0}, "expect_success_within_seconds"),
        ({"late_after_seconds": "60"}, "late_after_seconds"),
    ],
)
def test_each_invalid_field_is_named(change: dict[str, Any], field: str) -> None:
    assert _fields({**BASE, **change}) == [field]


def test_every_invalid_field_at_once() -> None:
    body = {**BASE, "name": "", "max_attempts": 0, "cron": "nope"}
    assert _fields(body) == ["name", "max_attempts", "cron"]
    assert _fields({}) == ["name", "type", "cron"]
    assert _fields([]) == ["body"]


def test_an_empty_key_is_named_visibly() -> None:
    # The API fuzzer's find: a body key "" made a 422 whose error named no field.
    assert _fields({**BASE, "": 1}) == ['""']


def test_a_valid_body_is_a_spec_with_its_schedule_parsed() -> None:
    spec = validate_job(
        {**BASE, "cron": " 30 2 * * * ", "catchup": "all", "overlap": "skip", "retry": {}}
    )
    assert isinstance(spec.schedule, CronSchedule)
    assert spec.schedule.zone == ZoneInfo("Europe/Berlin")
    assert (spec.cron, spec.run_at, spec.timezone) == ("30 2 * * *", None, "Europe/Berlin")
    assert (spec.catchup, spec.overlap) == (Catchup.ALL, Overlap.SKIP)
    assert (spec.max_attempts, spec.retry_base_seconds, spec.payload) == (3, 10.0, {})
    once = validate_job({"name": "o", "type": "t", "run_at": "2030-01-02T03:04:05.678+01:00"})
    assert once.schedule == OneOffSchedule(datetime(2030, 1, 2, 2, 4, 5, tzinfo=UTC))
    assert (once.cron, once.run_at, once.timezone) == (None, once.schedule.at, "UTC")


def test_a_patch_keeps_the_parsed_schedule_unless_it_changes_it() -> None:
    base = validate_job(BASE)
    same = validate_job({"payload": {"x": 1}, "max_attempts": 7}, base)
    assert same.schedule is base.schedule and same.max_attempts == 7
    moved = validate_job({"timezone": "Asia/Tokyo"}, base)
    assert (moved.cron, moved.timezone) == ("30 2 * * *", "Asia/Tokyo")
    one_off = validate_job({"cron": None, "run_at": "2030-01-01T00:00:00Z"}, base)
    assert (one_off.cron, one_off.timezone) == (None, "Europe/Berlin")
    assert _fields({"cron": None}, base) == ["cron"]
    assert _fields({"name": None, "max_attempts": 0}, base) == ["name", "max_attempts"]


def _row(**kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": 7,
        "name": "j",
        "type": "echo",
        "payload": {},
        "cron": "0 * * * *",
        "run_at": None,
        "timezone": "UTC",
        "max_attempts": 3,
        "timeout_seconds": None,
        "retry_base_seconds": 10.0,
        "retry_cap_seconds": 3600.0,
        "catchup": "latest",
        "catchup_window_seconds": 3600.0,
        "overlap": "wait",
        "paused": False,
        "success_exit_codes": [0, 3],
        "dead_on": ["65", "timeout"],
        "retry_on": None,
        "pause_after_failures": 5,
        "job_failing_after": 2,
        "expect_success_within_seconds": 7200.0,
        "late_after_seconds": None,
        "ping_url": None,
        "planned_until": None,
        "plan_after": NOW,
        "created_at": NOW - timedelta(hours=1),
        "updated_at": NOW,
    }
    row.update(kw)
    return row


def test_from_row_types_every_field() -> None:
    job = Job.from_row(_row(timezone="Europe/Berlin"))
    assert job.id == 7 and job.spec.overlap is Overlap.WAIT and job.spec.catchup is Catchup.LATEST
    assert job.spec.exit_policy.success_exit_codes == (0, 3)
    assert job.spec.exit_policy.view()["dead_on"] == [65, "timeout"]
    assert (job.spec.pause_after_failures, job.spec.job_failing_after) == (5, 2)
    assert (job.spec.expect_success_within_seconds, job.spec.late_after_seconds) == (7200, None)
    assert isinstance(job.spec.schedule, CronSchedule)
    assert job.spec.schedule_columns == ("0 * * * *", None, "Europe/Berlin")
    assert len(plan_job(job, NOW, PlanLimits()).times) == 25  # 11:00 .. 12:00 + 24 h


def test_a_row_whose_zone_this_host_lacks_still_loads_and_fails_when_planned() -> None:
    job = Job.from_row(_row(timezone="Mars/Olympus_Mons"))
    sched = job.spec.schedule
    assert isinstance(sched, UnloadableSchedule)
    assert sched.error.field == "timezone" and "Mars/Olympus_Mons" in sched.error.message
    assert job.spec.schedule_columns == ("0 * * * *", None, "Mars/Olympus_Mons")
    with pytest.raises(InvalidSpec, match="Mars/Olympus_Mons"):
        plan_job(job, NOW, PlanLimits())
    # The API still shows it, with no next instants, and a PATCH names the field.
    shown = views.job_detail(job, NOW, [], payloads=True)
    assert (shown["timezone"], shown["cron"], shown["next"]) == (
        "Mars/Olympus_Mons",
        "0 * * * *",
        [],
    )
    assert _fields({"payload": {"x": 1}}, job.spec) == ["timezone"]
    assert validate_job({"timezone": "UTC"}, job.spec).timezone == "UTC"


def test_a_one_off_whose_zone_this_host_lacks_still_plans() -> None:
    at = NOW + timedelta(minutes=5)
    job = Job.from_row(_row(cron=None, run_at=at, timezone="Mars/Olympus_Mons"))
    assert isinstance(job.spec.schedule, UnloadableSchedule) and job.spec.run_at == at
    plan = plan_job(job, NOW, PlanLimits())
    assert plan.times == [at] and plan.missed == 0
