"""The handover's chart: KV cache usage of each watched service over the shift.

One line per service (`bot.service.handover.ShiftSeries`: the most used engine of its pods at
each step), the GpumemKVCacheHigh line marked, the services closest to it first in the legend.
At most MAX_LINES services are drawn; the handover's state section lists them all.

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
from datetime import datetime
from typing import Any

from bot.render.i18n import Catalog
from bot.render.triage_charts import _DRAW
from runbooks.catalogs.thresholds import KV_USAGE_HIGH_RATIO

# _DRAW: one lock for every chart this process draws (matplotlib's rc settings are global)

#: services drawn at most (a chart of more lines is unreadable)
MAX_LINES = 12
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


def _draw(lines: list[Any], since: datetime, until: datetime, lang: str) -> bytes:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import DateFormatter
    from matplotlib.figure import Figure

    from bot.render.chart_memory import _drawable, _rc, chart_lang

    lang = chart_lang(lang)
    cat = Catalog.load(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = Figure(figsize=(11, 5.2), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        for s in lines:
            ax.plot([t for t, _ in s.points], [v * 100 for _, v in s.points], linewidth=1.8,
                    label=_drawable(s.target, lang))
        pct = round(KV_USAGE_HIGH_RATIO * 100)
        ax.axhline(pct, color=_LINE_COLOR, linestyle="--", linewidth=1.6, label=cat.t("slack.chart.shift_line", pct=pct))
        ax.set_ylim(0, 105)
        ax.set_xlim(since, until)
        ax.xaxis.set_major_formatter(DateFormatter("%H:%M"))
        ax.set_ylabel(cat.t("slack.chart.shift_axis"))
        title = cat.t("slack.chart.shift_title", since=since.strftime("%m-%d %H:%M"), until=until.strftime("%m-%d %H:%M"))
        ax.set_title(_drawable(title, lang), loc="left", fontsize=14)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9)
        fig.subplots_adjust(left=0.07, right=0.72, top=0.9, bottom=0.1)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()
