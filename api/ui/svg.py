"""Charts as inline SVG, computed and drawn here: no chart library, no script. A Chart is
stacked bars over fixed time buckets (succeeded below failed, or a start lateness p50 below
its p99), written out by Chart.svg; the timeline and durations are drawn by templates."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

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
    top: str  # the value at the top of the y axis, as text
    labels: list[tuple[float, str]]  # x, text under the axis
    low: str = "bar-ok"  # the classes of the lower and the upper part of each bar
    high: str = "bar-bad"
    width: int = WIDTH
    height: int = HEIGHT
    left: int = PAD_LEFT
    base: int = HEIGHT - PAD_BOTTOM

    @property
    def total(self) -> int:
        return len(self.bars)

    def svg(self, label: str) -> Markup:
        """The chart as an <svg> element; every text escaped. Written here rather than by a
        template: a week of hourly bars is 168 of them, and Jinja's per-attribute escaping
        made that a third of the overview's time."""
        w, h, left, base = self.width, self.height, self.left, self.base
        out = [
            f'<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-label="{escape(label)}">'
            f'<line class="axis" x1="{left}" y1="{base}" x2="{w}" y2="{base}"/>'
            f'<text class="tick" x="{left - 6}" y="12" text-anchor="end">{escape(self.top)}</text>'
            f'<text class="tick" x="{left - 6}" y="{base}" text-anchor="end">0</text>'
        ]
        for b in self.bars:
            out.append(
                f"<g><title>{escape(b.title)}</title>"
                f'<rect class="{self.low}" x="{b.x}" y="{b.ok_y}" width="{b.width}" '
                f'height="{b.ok_h}"/>'
                f'<rect class="{self.high}" x="{b.x}" y="{b.bad_y}" width="{b.width}" '
                f'height="{b.bad_h}"/></g>'
            )
        for x, text in self.labels:
            out.append(f'<text class="tick" x="{x}" y="{h - 4}">{escape(text)}</text>')
        out.append("</svg>")
        return Markup("".join(out))


def _nice(value: int) -> int:
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000):
        if value <= step:
            return step
    return (value // 10000 + 1) * 10000


def _starts(now: datetime, bucket: timedelta, buckets: int) -> list[datetime]:
    """The starts of `buckets` buckets, ending with the one holding `now` (epoch-aligned,
    as ui.sql's date_bin)."""
    step = bucket.total_seconds()
    last = datetime.fromtimestamp(now.timestamp() // step * step, tz=now.tzinfo)
    return [last - bucket * (buckets - 1 - i) for i in range(buckets)]


def _stacked(
    starts: list[datetime],
    low: list[float],
    high: list[float],
    top: float,
    titles: list[str],
    label_every: int,
    label_format: str,
) -> tuple[list[Bar], list[tuple[float, str]]]:
    """Bars of low + high (both >= 0) on a y axis from 0 to top, one slot per start."""
    plot_w, plot_h = WIDTH - PAD_LEFT, HEIGHT - PAD_BOTTOM - 6
    slot = plot_w / len(starts)
    base = HEIGHT - PAD_BOTTOM
    bars, labels = [], []
    for i, (start, lo, hi, title) in enumerate(zip(starts, low, high, titles, strict=True)):
        x = PAD_LEFT + i * slot + slot * 0.12
        lh, hh = plot_h * lo / top, plot_h * hi / top
        bars.append(
            Bar(
                round(x, 1),
                round(slot * 0.76, 1),
                round(base - lh, 1),
                round(lh, 1),
                round(base - lh - hh, 1),
                round(hh, 1),
                title,
            )
        )
        if i % label_every == 0:
            labels.append((round(x, 1), start.strftime(label_format)))
    return bars, labels


def outcome_chart(
    counts: dict[tuple[datetime, RunStatus], int],
    now: datetime,
    bucket: timedelta,
    buckets: int,
    label_every: int,
    label_format: str,
) -> Chart:
    """`buckets` bars of `bucket` each, ending with the one holding `now`: succeeded under
    failed or dead, from counts per (bucket start, status)."""
    starts = _starts(now, bucket, buckets)
    ok = [counts.get((s, RunStatus.SUCCEEDED), 0) for s in starts]
    bad = [sum(counts.get((s, st), 0) for st in FAILED) for s in starts]
    top = _nice(max([o + b for o, b in zip(ok, bad, strict=True)] + [1]))
    titles = [
        f"{utc(s)}: {o} succeeded, {b} failed" for s, o, b in zip(starts, ok, bad, strict=True)
    ]
    bars, labels = _stacked(
        starts,
        [float(o) for o in ok],
        [float(b) for b in bad],
        top,
        titles,
        label_every,
        label_format,
    )
    return Chart(bars, str(top), labels)


def lateness_chart(
    late: dict[datetime, tuple[float | None, float | None, int]],
    now: datetime,
    buckets: int,
    label_every: int,
    label_format: str,
) -> Chart:
    """Hourly bars of start lateness, p50 under p99, from (p50, p99, runs measured) per hour
    start; an hour without figures has no bar."""
    starts = _starts(now, timedelta(hours=1), buckets)
    p50 = [max(late.get(s, (None, None, 0))[0] or 0.0, 0.0) for s in starts]
    p99 = [max(late.get(s, (None, None, 0))[1] or 0.0, 0.0) for s in starts]
    top = _nice_seconds(max([*p99, 0.001]))
    titles = []
    for s in starts:
        a, b, n = late.get(s, (None, None, 0))
        titles.append(
            f"{utc(s)}: p50 {seconds(a)}, p99 {seconds(b)} over {n} runs"
            if n
            else f"{utc(s)}: no runs started"
        )
    high = [max(b - a, 0.0) for a, b in zip(p50, p99, strict=True)]
    bars, labels = _stacked(starts, p50, high, top, titles, label_every, label_format)
    return Chart(bars, seconds(top), labels, low="bar-p50", high="bar-p99")


def _nice_seconds(value: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten (seconds) at or above value."""
    scale = 0.001
    while True:
        for m in (1, 2, 5):
            if value <= m * scale:
                return m * scale
        scale *= 10


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
