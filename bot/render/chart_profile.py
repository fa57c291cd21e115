"""A PNG of request bucket shares over time (1200x600 px): stacked areas of S, M, L and XL per
time slice (stacked bars per block of arrivals when the log has no times), with the L+XL
share as a line.

matplotlib is imported only when a chart is drawn (the Agg canvas, no pyplot, no display).
Fonts and the Chinese fallback are chart_memory's (without a CJK font the chart is labelled in
English rather than with empty boxes); the legend sits beside the axes, the title is fitted to
the width and the time ticks thinned (`bot.render.chart_layout`).
"""

from __future__ import annotations

import io
from datetime import UTC
from typing import Any

from bot.render.chart_layout import fit_axis_label, fit_title, outside_legend, renderer, thin_date_ticks
from bot.render.chart_memory import _drawable, _rc, chart_lang
from bot.render.i18n import Catalog
from runbooks.model.lengths import BUCKETS
from runbooks.profile.detail import ProfileDetail

WIDTH_PX, HEIGHT_PX, DPI = 1200, 600, 100
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: S green, M blue, L orange, XL red: short to long, calm to alarming
COLORS = {"S": "#59a14f", "M": "#4e79a7", "L": "#f28e2b", "XL": "#e15759"}


class ChartUnavailable(Exception):
    """matplotlib is not installed (pip install 'gpumem[charts]')."""


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise ChartUnavailable(str(e)) from e
    return matplotlib


def render_profile_chart(detail: ProfileDetail, source: str, total: int, lang: str = "en") -> bytes:
    """The chart as PNG bytes. Raises ChartUnavailable without matplotlib, ValueError without slices."""
    if not detail.slices:
        raise ValueError("no slices to draw")
    matplotlib = _matplotlib()

    lang = chart_lang(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = _figure(detail, source, total, lang)
        out = io.BytesIO()
        fig.savefig(out, format="png", dpi=DPI, metadata={"Software": None})
    return out.getvalue()


def profile_figure(detail: ProfileDetail, source: str, total: int, lang: str = "en") -> Any:
    """The chart's drawn Figure (what `render_profile_chart` saves), for looking at its layout."""
    matplotlib = _matplotlib()

    lang = chart_lang(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = _figure(detail, source, total, lang)
        fig.canvas.draw()
    return fig


def _figure(detail: ProfileDetail, source: str, total: int, lang: str) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure


    cat = Catalog.load(lang)
    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    _draw(fig, ax, detail, cat)
    heading = ax.set_title(_drawable(cat.t("profile_cli.chart.title", source=source, total=total), lang),
                           fontsize=14, loc="left")
    r = renderer(fig)  # one layout pass for both fits
    fit_axis_label(fig, ax, "y", r=r)
    fit_title(fig, heading, within=ax, r=r)
    return fig


def _draw(fig: Any, ax: Any, detail: ProfileDetail, cat: Catalog) -> None:

    slices = [s for s in detail.slices if s.total]
    shares = {b: [100.0 * s.share(b) for s in slices] for b in BUCKETS}
    long_share = [shares["L"][i] + shares["XL"][i] for i in range(len(slices))]
    labels = [cat.t(f"profile_cli.chart.bucket_{b}") for b in BUCKETS]
    colors = [COLORS[b] for b in BUCKETS]
    if detail.by_time:
        xs = [s.start + (s.end - s.start) / 2 for s in slices]  # type: ignore[operator]
        ax.stackplot(xs, *[shares[b] for b in BUCKETS], labels=labels, colors=colors, alpha=0.85)
        ax.plot(xs, long_share, color="black", linewidth=1.6, linestyle="--", label=cat.t("profile_cli.chart.long_line"))
        ax.set_xlabel(cat.t("profile_cli.chart.x_time"))
        thin_date_ticks(ax, 9, tz=UTC)
    else:
        xs = [(s.first_request or 0) + ((s.last_request or 0) - (s.first_request or 0)) / 2 for s in slices]
        width = max(1.0, min((s.last_request or 0) - (s.first_request or 0) for s in slices) * 0.9)
        bottom = [0.0] * len(slices)
        for b, label, color in zip(BUCKETS, labels, colors, strict=True):
            ax.bar(xs, shares[b], width=width, bottom=bottom, label=label, color=color, alpha=0.85)
            bottom = [x + y for x, y in zip(bottom, shares[b], strict=True)]
        ax.plot(xs, long_share, color="black", linewidth=1.6, linestyle="--", marker=".",
                label=cat.t("profile_cli.chart.long_line"))
        ax.set_xlabel(cat.t("profile_cli.chart.x_arrival"))
    ax.set_ylim(0, 100)
    ax.set_ylabel(cat.t("profile_cli.chart.y_share"))
    ax.grid(axis="y", alpha=0.3)
    # beside the axes, never over the areas
    outside_legend(fig, ax.get_legend_handles_labels()[0], "right upper", fontsize=11)


def write_profile_chart(path: str, detail: ProfileDetail, source: str, total: int, lang: str = "en") -> int:
    """Write the chart to `path`; returns its size in bytes."""
    data = render_profile_chart(detail, source, total, lang)
    with open(path, "wb") as fh:
        fh.write(data)
    return len(data)
