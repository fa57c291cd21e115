"""The fleet view's chart for Slack: memory headroom per service, with the alert lines marked.

One horizontal bar per service, in rank order (the closest to trouble on top): its headroom,
100% minus the memory it uses. For a service that runs an engine that is its KV cache now
(`kv_now`), with a tick at the hour's peak (`kv_max`); for a GPU pod that runs no engine, its
GPU memory (`gpu_used`: for vLLM, SGLang and TGI a full card says nothing, they claim it at
start-up). The alert lines are drawn where they sit in headroom: GpumemKVCacheHigh at
100% - 90% = 10%, GpumemGPUMemoryHigh at 100% - 95% = 5%; a bar at or under its own line is
red. Services with neither reading are left out (named in the footnote's count). The legend sits
below the axes, the names get the room they need, the title is fitted (`bot.render.chart_layout`).
matplotlib (~450 ms to import, -X importtime) is imported only when a chart is drawn.

>>> from runbooks.alerts.fleet import Service, rank
>>> rows = headroom_rows(rank([Service("llm", "a", ("vllm",), {"kv_now": 0.95, "kv_max": 0.97}),
...                            Service("ml", "b", (), {"gpu_used": 0.5})]))
>>> [(r.target, r.measure, r.headroom, r.peak_headroom, r.line, r.past) for r in rows]
[('llm/a', 'kv', 0.05, 0.03, 0.1, True), ('ml/b', 'gpu', 0.5, None, 0.05, False)]
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.render.chart_layout import fit_title, outside_legend
from bot.render.chart_memory import _drawable, _rc, chart_lang
from bot.render.i18n import Catalog
from bot.render.triage_charts import _DRAW
from runbooks.alerts.fleet import LINES, Ranked

# _DRAW: one lock for every chart this process draws (matplotlib's rc settings are global)

#: bars drawn at most (the rest are in `gpumem fleet`)
MAX_BARS = 25
_COLORS = {"ok": "#4e79a7", "past": "#e15759", "kv_line": "#f28e2b", "gpu_line": "#b07aa1", "peak": "#222222"}


@dataclass(frozen=True)
class Bar:
    target: str
    #: kv (the KV cache) or gpu (GPU memory of a pod that runs no engine)
    measure: str
    headroom: float
    #: KV headroom at the window's peak usage (None for GPU memory, or not read)
    peak_headroom: float | None
    #: the alert line, as headroom
    line: float

    @property
    def past(self) -> bool:
        """At or under its alert line (used at or above it)."""
        return self.headroom <= self.line + 1e-9


def headroom_rows(rows: Sequence[Ranked]) -> list[Bar]:
    """The bars for ranked rows, in their order; rows without a memory reading are left out."""
    out = []
    for row in rows:
        kv, peak, gpu = row.reading("kv_now"), row.reading("kv_max"), row.reading("gpu_used")
        if kv is not None:
            out.append(Bar(row.target, "kv", _room(kv.value), _room(peak.value) if peak is not None else None,
                           _room(LINES["kv_now"])))
        elif gpu is not None:
            out.append(Bar(row.target, "gpu", _room(gpu.value), None, _room(LINES["gpu_used"])))
    return out


def _room(used: float) -> float:
    return round(max(0.0, min(1.0, 1.0 - used)), 4)


def fleet_chart(rows: Sequence[Ranked], title: str, lang: str = "en") -> bytes | None:
    """PNG bytes of the headroom chart for the first MAX_BARS rows with a memory reading; None
    when none has one."""
    bars = headroom_rows(rows)[:MAX_BARS]
    if not bars:
        return None
    with _DRAW:
        return _draw(bars, title, lang)


def fleet_figure(rows: Sequence[Ranked], title: str, lang: str = "en") -> Any:
    """The chart's drawn Figure (what `fleet_chart` saves), for looking at its layout; None
    when no row has a memory reading."""
    import matplotlib


    bars = headroom_rows(rows)[:MAX_BARS]
    if not bars:
        return None
    lang = chart_lang(lang)
    with _DRAW, matplotlib.rc_context(_rc(lang)):
        fig = _figure(bars, title, lang)
        fig.canvas.draw()
    return fig


def _draw(bars: list[Bar], title: str, lang: str) -> bytes:
    import matplotlib


    lang = chart_lang(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = _figure(bars, title, lang)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _figure(bars: list[Bar], title: str, lang: str) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch


    cat = Catalog.load(lang)
    height = 2.7 + 0.42 * len(bars)  # inches: title 0.6, bars, axis and its label 0.8, legend 1.0
    fig = Figure(figsize=(11, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(bars)))[::-1]  # rank 1 on top
    ax.barh(ys, [b.headroom * 100 for b in bars], height=0.7,
            color=[_COLORS["past"] if b.past else _COLORS["ok"] for b in bars], zorder=2)
    for y, b in zip(ys, bars, strict=True):
        ax.text(b.headroom * 100 + 0.8, y, f"{b.headroom * 100:.0f}%", va="center", fontsize=10, zorder=4)
        if b.peak_headroom is not None:
            ax.plot([b.peak_headroom * 100] * 2, [y - 0.38, y + 0.38], color=_COLORS["peak"], linewidth=2.2,
                    zorder=3)
    kv_line, gpu_line = _room(LINES["kv_now"]) * 100, _room(LINES["gpu_used"]) * 100
    ax.axvline(kv_line, color=_COLORS["kv_line"], linestyle="--", linewidth=1.8, zorder=3)
    ax.axvline(gpu_line, color=_COLORS["gpu_line"], linestyle=":", linewidth=1.8, zorder=3)
    ax.set_yticks(ys)
    # constrained layout gives the names the room they need on the left
    ax.set_yticklabels([_drawable(b.target, lang) + (" (GPU)" if b.measure == "gpu" else "") for b in bars])
    ax.set_xlim(0, 108)  # room right of a full bar for its value
    ax.set_xticks(range(0, 101, 20))
    ax.set_xlabel(cat.t("slack.chart.fleet_axis"))
    heading = ax.set_title(_drawable(title, lang), loc="left", fontsize=15)
    ax.grid(axis="x", alpha=0.3, zorder=0)
    handles = [
        Patch(color=_COLORS["ok"], label=cat.t("slack.chart.fleet_bar")),
        Patch(color=_COLORS["past"], label=cat.t("slack.chart.fleet_past")),
        Line2D([], [], color=_COLORS["peak"], linewidth=2.2, label=cat.t("slack.chart.fleet_peak")),
        Line2D([], [], color=_COLORS["kv_line"], linestyle="--",
               label=cat.t("slack.chart.fleet_kv_line", pct=round(LINES["kv_now"] * 100))),
        Line2D([], [], color=_COLORS["gpu_line"], linestyle=":",
               label=cat.t("slack.chart.fleet_gpu_line", pct=round(LINES["gpu_used"] * 100))),
    ]
    # below the axes, never over a bar
    outside_legend(fig, handles, "lower center", ncol=2, fontsize=10)
    fit_title(fig, heading)
    return fig
