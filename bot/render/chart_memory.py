"""A PNG of GPU memory over time, with restarts marked, sized to read on a phone (1000x500 px).

One solid line per device (GiB), the card's size as a dashed line labelled with its GiB, the
runbook's "memory above 90% must be explained" line dotted, restarts as grey vertical lines and
OOMKilled restarts as red ones; the legend below the axes, the title fitted to the width
(`bot.render.chart_layout`). matplotlib is imported only when a chart is drawn (Agg, no display).
Chinese needs a CJK font (Debian: fonts-wqy-microhei or fonts-noto-cjk); without one the
chart falls back to English rather than drawing empty boxes.

>>> from runbooks.model.evidence import MemoryHistory
>>> render_memory_chart(MemoryHistory("prometheus"), "llm/vllm", "en")[:8]
b'\\x89PNG\\r\\n\\x1a\\n'
"""

from __future__ import annotations

import contextlib
import io
from datetime import UTC
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.render.chart_layout import fit_axis_label, fit_title, outside_legend, renderer, thin_date_ticks
from bot.render.i18n import Catalog
from runbooks.catalogs.thresholds import GPU_MEM_PINNED_RATIO
from runbooks.model.units import GIB

if TYPE_CHECKING:
    from runbooks.model.evidence import MemoryHistory, MemorySeries

WIDTH_PX, HEIGHT_PX, DPI = 1000, 500, 100
#: devices drawn at most; the rest are counted in the legend
MAX_DEVICES = 8
#: CJK font families, best first (Debian packages: fonts-noto-cjk, fonts-wqy-microhei, fonts-wqy-zenhei)
CJK_FAMILIES = ("Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei",
                "Source Han Sans SC", "Droid Sans Fallback", "SimHei", "Microsoft YaHei", "PingFang SC")
_CJK_FILE_HINTS = ("wqy-microhei", "wqy-zenhei", "notosanscjk", "sourcehansans", "droidsansfallback")
_COLORS = ("#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f")


@cache
def cjk_font() -> str | None:
    """The first installed CJK font family, or None."""
    from matplotlib import font_manager

    manager = font_manager.fontManager
    found = _first_cjk({f.name for f in manager.ttflist})
    if found is None:
        # matplotlib caches its font list: a font installed after that cache was built is
        # only found by looking at the files
        for path in font_manager.findSystemFonts():
            if any(hint in Path(path).name.lower() for hint in _CJK_FILE_HINTS):
                with contextlib.suppress(Exception):
                    manager.addfont(path)
        found = _first_cjk({f.name for f in manager.ttflist})
    return found


def _first_cjk(installed: set[str]) -> str | None:
    return next((name for name in CJK_FAMILIES if name in installed), None)


def chart_lang(lang: str) -> str:
    """The language the chart can really be drawn in: "zh" needs a CJK font."""
    return "zh" if lang == "zh" and cjk_font() is not None else "en"


def render_memory_chart(history: MemoryHistory, title: str, lang: str) -> bytes:
    """The chart as PNG bytes, WIDTH_PX x HEIGHT_PX; the same input gives the same bytes."""
    import matplotlib

    lang = chart_lang(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = _figure(history, title, lang)
        buf = io.BytesIO()
        # no "Software" chunk: the bytes must not change with the matplotlib version or run
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def memory_figure(history: MemoryHistory, title: str, lang: str) -> Any:
    """The chart's drawn Figure (what `render_memory_chart` saves), for looking at its layout."""
    import matplotlib

    lang = chart_lang(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = _figure(history, title, lang)
        fig.canvas.draw()
    return fig


def _figure(history: MemoryHistory, title: str, lang: str) -> Any:
    # the Agg canvas directly, not pyplot: no global figure state, no display, thread-safe enough
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure


    cat = Catalog.load(lang)
    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    heading = ax.set_title(_drawable(title, lang), fontsize=18, loc="left")
    drawn = _draw(fig, ax, history, cat)
    if not drawn:
        ax.text(0.5, 0.5, cat.t("chart_memory.no_data"), ha="center", va="center", fontsize=16,
                transform=ax.transAxes, color="#555555")
        ax.set_xticks([])
        ax.set_yticks([])
    r = renderer(fig)  # one layout pass for both fits
    if drawn:
        fit_axis_label(fig, ax, "y", r=r)
    fit_title(fig, heading, r=r)
    return fig


def _rc(lang: str) -> dict[str, Any]:
    rc: dict[str, Any] = {"font.size": 13, "axes.titlesize": 18, "axes.labelsize": 14,
                          "xtick.labelsize": 12, "ytick.labelsize": 12, "legend.fontsize": 11,
                          "svg.hashsalt": "gpumem", "path.simplify": True}
    font = cjk_font()
    if font is not None:
        # a fallback list: the first font that has a glyph draws it, so a Chinese pod name
        # or title shows in an English chart too
        rc["font.family"] = [font, "DejaVu Sans"] if lang == "zh" else ["DejaVu Sans", font]
        rc["axes.unicode_minus"] = False  # CJK fonts often lack the minus sign glyph
    return rc


def _drawable(text: str, lang: str) -> str:
    # without a CJK font, CJK characters would draw as boxes: leave them out
    if cjk_font() is not None:
        return text
    return "".join(ch for ch in text if ord(ch) < 0x2E80).strip() or "GPU memory"


def _draw(fig: Any, ax: Any, history: MemoryHistory, cat: Catalog) -> bool:
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory


    series = [s for s in history.series if s.points]
    if not series:
        return False
    # the fullest devices first: when there are too many, the ones that matter are drawn
    series.sort(key=lambda s: (-max(p.used_bytes for p in s.points), s.label))
    shown, hidden = series[:MAX_DEVICES], len(series) - MAX_DEVICES
    totals = {s.label: _total_gib(s) for s in shown}
    colors = {s.label: _COLORS[i % len(_COLORS)] for i, s in enumerate(shown)}
    handles: list[Any] = []
    for s in shown:
        times = [p.at for p in s.points]
        (line,) = ax.plot(times, [p.used_bytes / GIB for p in s.points], color=colors[s.label], linewidth=2.2,
                          label=s.label)
        handles.append(line)
    # one line per card size, labelled with its GiB: grey when several devices share it, else
    # the device's colour
    by_total: dict[float, list[str]] = {}
    for label, total in totals.items():
        if total is not None:
            by_total.setdefault(round(total, 1), []).append(label)
    at_right = blended_transform_factory(ax.transAxes, ax.transData)
    for total, labels in sorted(by_total.items()):
        color = colors[labels[0]] if len(labels) == 1 else "#333333"
        ax.axhline(total, color=color, linestyle="--", linewidth=1.6, zorder=3, gid=f"card:{total:.1f}")
        # in the right margin at the line's height: never over a device's line
        ax.text(1.006, total, cat.t("chart_memory.card", gib=f"{total:.1f}"), transform=at_right, ha="left",
                va="center", fontsize=11, color=color, clip_on=False, gid=f"card-label:{total:.1f}")
        ax.axhline(total * GPU_MEM_PINNED_RATIO, color=color, linestyle=":", linewidth=1.8, zorder=3)
    if any(t is not None for t in totals.values()):
        handles.append(Line2D([], [], color="#333333", linestyle="--", linewidth=1.6, label=cat.t("chart_memory.total")))
        handles.append(Line2D([], [], color="#333333", linestyle=":", linewidth=1.6,
                              label=cat.t("chart_memory.threshold", pct=round(GPU_MEM_PINNED_RATIO * 100))))
    oom = set(history.oom_killed_at)
    for at in sorted(set(history.restarts_at)):
        ax.axvline(at, color="#d62728" if at in oom else "#888888", linewidth=2.0,
                   linestyle="-" if at in oom else "--")
    if oom:
        handles.append(Line2D([], [], color="#d62728", linewidth=2.0, label=cat.t("chart_memory.oom_killed")))
    if set(history.restarts_at) - oom:
        handles.append(Line2D([], [], color="#888888", linewidth=2.0, linestyle="--", label=cat.t("chart_memory.restart")))
    if hidden > 0:
        handles.append(Line2D([], [], linestyle="none", label=cat.t("chart_memory.more_devices", count=hidden)))
    top = max([max(p.used_bytes for p in s.points) / GIB for s in shown] + [t for t in totals.values() if t])
    ax.set_ylim(0, top * 1.08)
    start = history.start or min(p.at for s in shown for p in s.points)
    end = history.end or max(p.at for s in shown for p in s.points)
    if end > start:
        ax.set_xlim(start, end)
    thin_date_ticks(ax, 7, tz=UTC)
    ax.set_ylabel(cat.t("chart_memory.y_axis"))
    ax.set_xlabel(cat.t("chart_memory.x_axis"))
    ax.grid(True, alpha=0.3)
    # below the axes: never over a line
    outside_legend(fig, handles, "lower center", ncol=min(4, len(handles)))
    return True


def _total_gib(s: MemorySeries) -> float | None:
    totals = [p.total_bytes for p in s.points if p.total_bytes]
    return max(totals) / GIB if totals else None
