"""The handover's chart: KV cache usage of each watched service over the shift.

One line per service (`bot.service.handover.ShiftSeries`: the most used engine of its pods at
each step), the GpumemKVCacheHigh line marked, the services closest to it first in the legend
(beside the axes, long names wrapped; the axis label and title fitted: `bot.render.chart_layout`).
At most MAX_LINES services are drawn; the handover's state section lists them all.
matplotlib (~450 ms to import, -X importtime) is imported only when a chart is drawn.

>>> from datetime import UTC, datetime, timedelta
>>> from bot.service.handover import ShiftSeries
>>> t0 = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
>>> calm = ShiftSeries("llm/a", tuple((t0 + timedelta(minutes=m), 0.3) for m in range(3)))
>>> hot = ShiftSeries("llm/b", ((t0, 0.5), (t0 + timedelta(minutes=1), 0.97)))
>>> [s.target for s in drawn(calm, hot)]
['llm/b', 'llm/a']
>>> shift_chart([calm, hot], t0, t0 + timedelta(hours=1), "en")[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
>>> shift_chart([ShiftSeries("llm/c", ())], t0, t0 + timedelta(hours=1)) is None
True
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from bot.render.chart_layout import (
    fit_axis_label,
    fit_title,
    outside_legend,
    renderer,
    thin_date_ticks,
    wrap_label,
)
from bot.render.chart_memory import _drawable, _rc, chart_lang
from bot.render.i18n import Catalog
from bot.render.triage_charts import _DRAW
from runbooks.catalogs.thresholds import KV_USAGE_HIGH_RATIO

# _DRAW: one lock for every chart this process draws (matplotlib's rc settings are global)

#: services drawn at most (a chart of more lines is unreadable)
MAX_LINES = 12
#: a legend entry's line length, in characters (CJK count two)
LEGEND_CHARS = 30
_LINE_COLOR = "#e15759"


def drawn(*series: Any) -> list[Any]:
    """The series that get a line, the highest peak first, at most MAX_LINES."""
    have = [s for s in series if s.points]
    return sorted(have, key=lambda s: (-max(v for _, v in s.points), s.target))[:MAX_LINES]


def shift_chart(series: Sequence[Any], since: datetime, until: datetime, lang: str = "en") -> bytes | None:
    """PNG bytes of the shift chart; None when no service has a point."""
    lines = drawn(*series)
    if not lines:
        return None
    with _DRAW:
        return _draw(lines, since, until, lang)


def shift_figure(series: Sequence[Any], since: datetime, until: datetime, lang: str = "en") -> Any:
    """The chart's drawn Figure (what `shift_chart` saves), for looking at its layout; None when
    no service has a point."""
    import matplotlib


    lines = drawn(*series)
    if not lines:
        return None
    lang = chart_lang(lang)
    with _DRAW, matplotlib.rc_context(_rc(lang)):
        fig = _figure(lines, since, until, lang)
        fig.canvas.draw()
    return fig


def _draw(lines: list[Any], since: datetime, until: datetime, lang: str) -> bytes:
    import matplotlib


    lang = chart_lang(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = _figure(lines, since, until, lang)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _figure(lines: list[Any], since: datetime, until: datetime, lang: str) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure


    cat = Catalog.load(lang)
    fig = Figure(figsize=(11, 5.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for s in lines:
        ax.plot([t for t, _ in s.points], [v * 100 for _, v in s.points], linewidth=1.8,
                label=wrap_label(_drawable(s.target, lang), LEGEND_CHARS))
    pct = round(KV_USAGE_HIGH_RATIO * 100)
    ax.axhline(pct, color=_LINE_COLOR, linestyle="--", linewidth=1.6,
               label=wrap_label(cat.t("slack.chart.shift_line", pct=pct), LEGEND_CHARS))
    ax.set_ylim(0, 105)
    ax.set_xlim(since, until)
    thin_date_ticks(ax, 9, tz=UTC)
    ax.set_ylabel(cat.t("slack.chart.shift_axis"))
    title = cat.t("slack.chart.shift_title", since=since.strftime("%m-%d %H:%M"), until=until.strftime("%m-%d %H:%M"))
    heading = ax.set_title(_drawable(title, lang), loc="left", fontsize=14)
    ax.grid(alpha=0.3)
    # beside the axes, never over a service's line; long names on two lines
    outside_legend(fig, ax.get_legend_handles_labels()[0], "right upper", fontsize=10)
    r = renderer(fig)  # one layout pass for both fits
    fit_axis_label(fig, ax, "y", min_size=11, r=r)
    fit_title(fig, heading, within=ax, r=r)
    return fig
