"""The two charts a triage thread carries, as PNG bytes: GPU memory and request buckets.

Memory over time and the bucket shares are the shared charts (`bot.render.chart_memory`,
`bot.render.chart_buckets`, the same ones live triage draws). A bundle with no memory history still
gets a memory chart: one card split into weights, other static memory, KV cache and free
space, from the report's static/dynamic split. Drawing is serialised: the chart modules set
matplotlib's global rc settings while they draw, and the work pool draws on several threads.
"""

from __future__ import annotations

import io
import threading

from bot.render.i18n import Catalog
from runbooks.model.evidence import Evidence
from runbooks.model.report import Report

_DRAW = threading.Lock()
_COLORS = {"weights": "#4e79a7", "static": "#76b7b2", "kv": "#f28e2b", "free": "#d9d9d9", "used": "#e15759"}


def memory_chart(report: Report, evidence: Evidence, lang: str = "en") -> bytes | None:
    """GPU memory over time when there is a history, else the split of one card; None without data."""
    history = evidence.memory_history
    if history is not None and history.series:
        from bot.render.chart_memory import render_memory_chart

        with _DRAW:
            return render_memory_chart(history, report.target or "", lang)
    mem = report.memory
    if mem is None or not mem.gpu_total_gib:
        return None
    with _DRAW:
        return _split_chart(report, lang)


def profile_chart(report: Report, lang: str = "en") -> bytes | None:
    """Share of requests per bucket (S, M, L, XL) with the L+XL shift; None without a profile."""
    p = report.profile
    if p is None or not p.total:
        return None
    from bot.render.chart_buckets import render_bucket_chart

    with _DRAW:
        return render_bucket_chart(p, report.target or "", lang)


def _split_chart(report: Report, lang: str) -> bytes:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from bot.render.chart_memory import _rc, chart_lang

    lang = chart_lang(lang)
    cat = Catalog.load(lang)
    mem = report.memory
    assert mem is not None and mem.gpu_total_gib
    parts: list[tuple[str, float, str]] = []
    if mem.static_gib is not None:
        weights = mem.weights_gib or 0.0
        parts += [(cat.t("slack.chart.weights"), weights, _COLORS["weights"]),
                  (cat.t("slack.chart.other_static"), max(0.0, mem.static_gib - weights), _COLORS["static"]),
                  (cat.t("slack.chart.kv_cache"), mem.dynamic_gib or 0.0, _COLORS["kv"])]
    elif mem.gpu_used_gib is not None:
        parts.append((cat.t("slack.chart.in_use"), mem.gpu_used_gib, _COLORS["used"]))
    used = sum(gib for _, gib, _ in parts)
    parts.append((cat.t("slack.chart.free"), max(0.0, mem.gpu_total_gib - used), _COLORS["free"]))
    with matplotlib.rc_context(_rc(lang)):
        fig = Figure(figsize=(10, 3.2), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        fig.subplots_adjust(left=0.04, right=0.98, top=0.80, bottom=0.42)
        left = 0.0
        for label, gib, color in parts:
            ax.barh([0], [gib], left=left, color=color, label=f"{label} {gib:.1f} GiB")
            left += gib
        if mem.static_gib is not None and mem.gpu_used_gib is not None:
            ax.axvline(mem.gpu_used_gib, color=_COLORS["used"], linewidth=3,
                       label=f"{cat.t('slack.chart.in_use')} {mem.gpu_used_gib:.1f} GiB")
        ax.set_yticks([])
        ax.set_xlim(0, max(mem.gpu_total_gib, left))
        ax.set_xlabel(cat.t("slack.chart.gib"))
        ax.set_title(cat.t("slack.chart.memory_split", target=report.target or "?", gpu=report.gpu or "GPU"),
                     loc="left", fontsize=15)
        ax.legend(ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.55), frameon=False)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()
