"""A PNG of request bucket shares over time (1200x600 px): stacked areas of S, M, L and XL per
time slice (stacked bars per block of arrivals when the log has no times), with the L+XL
share as a line.

matplotlib is imported only when a chart is drawn (Agg backend, no display). Chinese labels
need a CJK font (Debian: fonts-wqy-microhei or fonts-noto-cjk); without one the chart is
labelled in English rather than with empty boxes.
"""

from __future__ import annotations

import io
from functools import cache
from typing import Any

from bot.render.i18n import Catalog
from runbooks.model.evidence import BUCKETS
from runbooks.profile.detail import ProfileDetail

WIDTH_PX, HEIGHT_PX, DPI = 1200, 600, 100
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: S green, M blue, L orange, XL red: short to long, calm to alarming
COLORS = {"S": "#59a14f", "M": "#4e79a7", "L": "#f28e2b", "XL": "#e15759"}
_CJK_FAMILIES = ("Noto Sans CJK SC", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Source Han Sans SC",
                 "Droid Sans Fallback", "SimHei", "Microsoft YaHei", "PingFang SC")


class ChartUnavailable(Exception):
    """matplotlib is not installed (pip install 'gpumem[charts]')."""


@cache
def _cjk_font() -> str | None:
    from matplotlib import font_manager

    names = {f.name for f in font_manager.fontManager.ttflist}
    found = next((n for n in _CJK_FAMILIES if n in names), None)
    if found is None:
        for path in font_manager.findSystemFonts():
            low = path.lower()
            if "wqy" in low or "cjk" in low or "sourcehan" in low:
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue
        names = {f.name for f in font_manager.fontManager.ttflist}
        found = next((n for n in _CJK_FAMILIES if n in names), None)
    return found


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise ChartUnavailable(str(e)) from e
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def render_profile_chart(detail: ProfileDetail, source: str, total: int, lang: str = "en") -> bytes:
    """The chart as PNG bytes. Raises ChartUnavailable without matplotlib, ValueError without slices."""
    if not detail.slices:
        raise ValueError("no slices to draw")
    plt = _pyplot()
    font = _cjk_font() if lang == "zh" else None
    cat = Catalog.load(lang if lang != "zh" or font else "en")
    rc = {"font.family": [font, "DejaVu Sans"]} if font else {}
    with plt.rc_context(rc):
        fig, ax = plt.subplots(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
        try:
            _draw(ax, detail, cat)
            ax.set_title(cat.t("profile_cli.chart.title", source=source, total=total), fontsize=12, loc="left")
            fig.tight_layout()
            out = io.BytesIO()
            fig.savefig(out, format="png", dpi=DPI)
        finally:
            plt.close(fig)
    return out.getvalue()


def _draw(ax: Any, detail: ProfileDetail, cat: Catalog) -> None:
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
        ax.figure.autofmt_xdate()
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
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)


def write_profile_chart(path: str, detail: ProfileDetail, source: str, total: int, lang: str = "en") -> int:
    """Write the chart to `path`; returns its size in bytes."""
    data = render_profile_chart(detail, source, total, lang)
    with open(path, "wb") as fh:
        fh.write(data)
    return len(data)
