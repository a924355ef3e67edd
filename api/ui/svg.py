"""Charts as inline SVG, computed here and drawn by templates/chart.html: no chart library,
no script. A chart is stacked bars (succeeded below, failed above) over fixed time buckets."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from api.ui.fmt import utc
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
