"""A PNG of request bucket shares (S, M, L, XL), for a profile without per-slice times.

When the profile has a shift (first vs last part of the window, or baseline vs now), the
L+XL share before and after is drawn beside the buckets: the classic "8% -> 37%" at a glance.
Fonts and the Chinese fallback are chart_memory's.
"""

from __future__ import annotations

import io

from bot.render.chart_memory import _rc, chart_lang
from bot.render.i18n import Catalog
from bot.render.wording import shift_label
from runbooks.model.evidence import BUCKETS, RequestProfile

WIDTH_PX, HEIGHT_PX, DPI = 1000, 500, 100
COLORS = {"S": "#59a14f", "M": "#4e79a7", "L": "#f28e2b", "XL": "#e15759"}


def render_bucket_chart(profile: RequestProfile, title: str, lang: str) -> bytes:
    """PNG bytes: one bar per bucket (share of requests), plus the L+XL shift when known."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lang = chart_lang(lang)
    cat = Catalog.load(lang)
    with matplotlib.rc_context(_rc(lang)):
        fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
        FigureCanvasAgg(fig)
        shift = profile.shift
        axes = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]}) if shift else [fig.add_subplot(1, 1, 1)]
        fig.subplots_adjust(left=0.08, right=0.98, top=0.86, bottom=0.12, wspace=0.3)
        fig.suptitle(cat.t("chart_buckets.title", target=title, total=profile.total), fontsize=17, x=0.08,
                     ha="left")
        ax = axes[0]
        shares = [profile.share(b) * 100 for b in BUCKETS]
        bars = ax.bar(BUCKETS, shares, color=[COLORS[b] for b in BUCKETS])
        for bar, value in zip(bars, shares, strict=True):
            ax.text(bar.get_x() + bar.get_width() / 2, value + 1, f"{value:.1f}%", ha="center", fontsize=13)
        ax.set_ylim(0, max(100.0, max(shares) + 8))
        ax.set_ylabel(cat.t("chart_buckets.share_axis"))
        if profile.estimated:
            ax.set_title(cat.t("profile.estimated"), fontsize=12, loc="left", color="#555555")
        if shift:
            sx = axes[1]
            labels = [str(shift_label(cat, shift.before_label)), str(shift_label(cat, shift.after_label))]
            values = [shift.long_share_before * 100, shift.long_share_after * 100]
            colors = ["#bab0ac", "#e15759" if shift.delta > 0 else "#59a14f"]
            sbars = sx.bar(labels, values, color=colors)
            for bar, value in zip(sbars, values, strict=True):
                sx.text(bar.get_x() + bar.get_width() / 2, value + 1, f"{value:.1f}%", ha="center", fontsize=13)
            sx.set_ylim(0, max(100.0, max(values) + 8))
            sx.set_title(cat.t("chart_buckets.long_share"), fontsize=14)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()
