"""Charts as inline SVG, computed here and drawn by templates/chart.html: no chart library,
no script. A chart is stacked bars (succeeded below, failed above) over fixed time buckets."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from api.ui.fmt import seconds, utc
from supervisor.core.model import RunStatus

WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM = 720, 160, 34, 18
FAILED = (RunStatus.FAILED, RunStatus.DEAD)


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    ok_y: float
    ok_h: float
    bad_y: float
    bad_h: float
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    bars: list[Bar]
    top: int  # the value at the top of the y axis
    labels: list[tuple[float, str]]  # x, text under the axis
    width: int = WIDTH
    height: int = HEIGHT
    left: int = PAD_LEFT
    base: int = HEIGHT - PAD_BOTTOM

    @property
    def total(self) -> int:
        return len(self.bars)


def _nice(value: int) -> int:
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000):
        if value <= step:
            return step
    return (value // 10000 + 1) * 10000


def outcome_chart(
    counts: dict[tuple[datetime, RunStatus], int],
    now: datetime,
    bucket: timedelta,
    buckets: int,
    label_every: int,
    label_format: str,
) -> Chart:
    """`buckets` bars of `bucket` each, ending with the one holding `now` (aligned on the
    epoch, as ui_outcome_buckets is)."""
    step = bucket.total_seconds()
    last = datetime.fromtimestamp(now.timestamp() // step * step, tz=now.tzinfo)
    starts = [last - bucket * (buckets - 1 - i) for i in range(buckets)]
    ok = [counts.get((s, RunStatus.SUCCEEDED), 0) for s in starts]
    bad = [sum(counts.get((s, st), 0) for st in FAILED) for s in starts]
    top = _nice(max([o + b for o, b in zip(ok, bad, strict=True)] + [1]))
    plot_w, plot_h = WIDTH - PAD_LEFT, HEIGHT - PAD_BOTTOM - 6
    slot = plot_w / buckets
    base = HEIGHT - PAD_BOTTOM
    bars, labels = [], []
    for i, (start, o, b) in enumerate(zip(starts, ok, bad, strict=True)):
        x = PAD_LEFT + i * slot + slot * 0.12
        oh, bh = plot_h * o / top, plot_h * b / top
        title = f"{utc(start)}: {o} succeeded, {b} failed"
        bars.append(
            Bar(
                round(x, 1),
                round(slot * 0.76, 1),
                round(base - oh, 1),
                round(oh, 1),
                round(base - oh - bh, 1),
                round(bh, 1),
                title,
            )
        )
        if i % label_every == 0:
            labels.append((round(x, 1), start.strftime(label_format)))
    return Chart(bars, top, labels)


# ---------------------------------------------------------------- a job's timeline

TL_HEIGHT, TL_TOP, TL_MARK = 64, 8, 30


@dataclass(frozen=True, slots=True)
class Point:
    x: float
    cls: str  # a status (or "planned": an instant the planner has not written yet)
    title: str
    href: str | None


@dataclass(frozen=True, slots=True)
class Timeline:
    points: list[Point]
    now_x: float
    labels: list[tuple[float, str]]
    width: int = WIDTH
    height: int = TL_HEIGHT
    top: int = TL_TOP
    mark: int = TL_MARK


def timeline(
    marks: list[tuple[datetime, str, str, str | None]],
    start: datetime,
    end: datetime,
    now: datetime,
) -> Timeline:
    """One mark per (instant, class, title, link) between start and end; a tick a day."""
    span = (end - start).total_seconds()

    def x(t: datetime) -> float:
        return round(PAD_LEFT + (WIDTH - PAD_LEFT - 2) * (t - start).total_seconds() / span, 1)

    points = [Point(x(t), cls, title, href) for t, cls, title, href in marks]
    day = start.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    labels = []
    while day < end:
        labels.append((x(day), day.strftime("%a %d")))
        day += timedelta(days=1)
    return Timeline(points, x(now), labels)


@dataclass(frozen=True, slots=True)
class Column:
    x: float
    y: float
    width: float
    height: float
    cls: str
    title: str
    href: str


@dataclass(frozen=True, slots=True)
class Durations:
    columns: list[Column]
    top: str  # the longest duration, as text
    width: int = WIDTH
    height: int = 120
    left: int = PAD_LEFT
    base: int = 120 - 6


def durations(items: list[tuple[int, datetime, str, float]], href: str) -> Durations:
    """Columns of (run id, scheduled_at, status, seconds), oldest first, height by seconds."""
    longest = max([s for *_, s in items] + [0.001])
    slot = (WIDTH - PAD_LEFT) / max(len(items), 1)
    base, plot = 114, 100
    columns = []
    for i, (run_id, at, status, sec) in enumerate(items):
        h = max(plot * sec / longest, 1.0)
        title = f"run #{run_id} · {utc(at)} · {status} in {seconds(sec)}"
        columns.append(
            Column(
                round(PAD_LEFT + i * slot + slot * 0.15, 1),
                round(base - h, 1),
                round(max(slot * 0.7, 1), 1),
                round(h, 1),
                status,
                title,
                f"{href}{run_id}",
            )
        )
    return Durations(columns, seconds(longest))
