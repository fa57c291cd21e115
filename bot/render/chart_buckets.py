"""A PNG of request bucket shares (S, M, L, XL), for a profile without per-slice times.

When the profile has a shift (first vs last part of the window, or baseline vs now), the
L+XL share before and after is drawn beside the buckets: the classic "8% -> 37%" at a glance.
Fonts and the Chinese fallback are chart_memory's; the title is fitted to the width and the
parts' names wrapped under their bars (`bot.render.chart_layout`).
"""

from __future__ import annotations

import io
from typing import Any

from bot.render.chart_layout import fit_axis_label, fit_title, renderer, wrap_labels
from bot.render.chart_memory import _drawable, _rc, chart_lang
from bot.render.i18n import Catalog, shift_label
from runbooks.model.lengths import BUCKETS, RequestProfile

WIDTH_PX, HEIGHT_PX, DPI = 1000, 500, 100
COLORS = {"S": "#59a14f", "M": "#4e79a7", "L": "#f28e2b", "XL": "#e15759"}


def render_bucket_chart(profile: RequestProfile, title: str, lang: str) -> bytes:
    """PNG bytes: one bar per bucket (share of requests), plus the L+XL shift when known."""
    import matplotlib

    lang = chart_lang(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = _figure(profile, title, lang)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def bucket_figure(profile: RequestProfile, title: str, lang: str) -> Any:
    """The chart's drawn Figure (what `render_bucket_chart` saves), for looking at its layout."""
    import matplotlib

    lang = chart_lang(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = _figure(profile, title, lang)
        fig.canvas.draw()
    return fig


def _bars(ax: Any, labels: list[str], values: list[float], colors: list[str]) -> None:
    bars = ax.bar(range(len(labels)), values, color=colors)
    for bar, value in zip(bars, values, strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, value + 1, f"{value:.1f}%", ha="center", va="bottom", fontsize=13)
    # room above the tallest bar for its value
    ax.set_ylim(0, max(100.0, max(values) + 10))


def _figure(profile: RequestProfile, title: str, lang: str) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure


    cat = Catalog.load(lang)
    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    shift = profile.shift
    axes = fig.subplots(1, 2, width_ratios=[3, 2]) if shift else [fig.add_subplot(1, 1, 1)]
    heading = fig.suptitle(_drawable(cat.t("chart_buckets.title", target=title, total=profile.total), lang),
                           fontsize=17, x=0.01, ha="left")
    ax = axes[0]
    _bars(ax, list(BUCKETS), [profile.share(b) * 100 for b in BUCKETS], [COLORS[b] for b in BUCKETS])
    ax.set_xticks(range(len(BUCKETS)), labels=list(BUCKETS))
    ax.set_ylabel(cat.t("chart_buckets.share_axis"))
    if profile.estimated:
        ax.set_title(cat.t("profile.estimated"), fontsize=12, loc="left", color="#555555")
    if shift:
        sx = axes[1]
        labels = [str(shift_label(cat, shift.before_label)), str(shift_label(cat, shift.after_label))]
        _bars(sx, labels, [shift.long_share_before * 100, shift.long_share_after * 100],
              ["#bab0ac", "#e15759" if shift.delta > 0 else "#59a14f"])
        sx.set_title(cat.t("chart_buckets.long_share"), fontsize=14)
    r = renderer(fig)  # one layout pass for the three fits: none of them moves the axes' width
    if shift:
        # the two parts' names, each on as many lines as its bar's width needs
        wrap_labels(fig, sx, range(len(labels)), labels, r)
    fit_axis_label(fig, ax, "y", r=r)
    fit_title(fig, heading, min_size=12, r=r)
    return fig
