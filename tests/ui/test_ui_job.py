"""A job's page without a browser: the timeline (one mark per run of the last 7 days and
per planned instant of the next 24 h, coloured by outcome, the skip reason on hover), the
durations chart, and its runs in keyset pages."""

from __future__ import annotations

import re

from supervisor.core.store import Store

from .. import factory
from .conftest import Ui
from .test_ui_jobs import make


async def test_timeline_marks_every_run_and_planned_instant(ui_reader: Ui, store: Store) -> None:
    job_id = await make(store, "hourly", cron="0 * * * *")  # plans the next hours as rows
    ok = await factory.insert_runs(store, job_id, 3, start_s=3600)
    dead = await factory.insert_runs(store, job_id, 1, status="dead", start_s=7200)
    skipped = await factory.insert_runs(store, job_id, 1, status="skipped", start_s=9000)
    await factory.set_run(store, skipped[0], skip_reason="overlap")
    old = await factory.insert_runs(store, job_id, 1, start_s=8 * 86400)  # before the window
    status, html = await ui_reader.get(f"/ui/jobs/{job_id}")
    assert status == 200
    svg = html[html.index('<svg class="chart timeline"') :]
    svg = svg[: svg.index("</svg>")]
    assert svg.count('class="m m-succeeded"') == 3
    assert svg.count('class="m m-dead"') == 1
    assert re.search(r"run #\d+ · skipped: overlap</title>", svg)
    planned = svg.count('class="m m-scheduled"') + svg.count('class="m m-planned"')
    assert 23 <= planned <= 25  # an hourly job: one mark an hour ahead
    assert f'href="/ui/runs/{ok[0]}"' in svg and f'href="/ui/runs/{dead[0]}"' in svg
    assert f"run #{old[0]} " not in svg
    chart = html[html.index('id="durations"') :]
    chart = chart[: chart.index("</svg>")]
    assert chart.count("<rect") == 5 and "succeeded in 2 s" in chart  # ended runs, not skipped
    assert chart.count("dead in 2 s</title>") == 1  # (and in its link's aria-label)


async def test_runs_in_keyset_pages(ui_admin: Ui, store: Store) -> None:
    job_id = await make(store, "busy", cron="0 0 1 1 *")
    other = await make(store, "other")
    ids = await factory.insert_runs(store, job_id, 30)
    await factory.insert_runs(store, other, 5)
    status, html = await ui_admin.get(f"/ui/jobs/{job_id}")
    listed = [int(i) for i in re.findall(r'<td class="num"><a href="/ui/runs/(\d+)">', html)]
    assert listed == ids[:25]  # newest first
    more = re.search(r'href="(/ui/jobs/\d+\?cursor=[^"#]+)#runs" rel="next"', html)
    assert more is not None
    status, html = await ui_admin.get(more.group(1))
    listed = [int(i) for i in re.findall(r'<td class="num"><a href="/ui/runs/(\d+)">', html)]
    assert listed == ids[25:] and 'rel="next"' not in html and "« Newest" in html
    status, html = await ui_admin.get(f"/ui/jobs/{other}?cursor={more.group(1).split('=')[1]}")
    assert status == 422 and "cursor" in html  # a cursor belongs to its job
