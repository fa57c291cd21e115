"""The two charts a triage carries, as PNG bytes: GPU memory and request buckets.

Memory over time and the bucket shares are the shared charts (`bot.render.chart_memory`,
`bot.render.chart_buckets`). A live triage draws them from its evidence into the bundle it
writes (`evidence_charts`); a triage thread of a bundle read from disk draws them from the
report (`memory_chart`, `profile_chart`): a bundle with no memory history still gets a memory
chart, one card split into weights, other static memory, KV cache and free space, from the
report's static/dynamic split. Drawing is serialised: the chart modules set matplotlib's global
rc settings while they draw, and the work pool draws on several threads.

The use cases draw nothing themselves: a surface hands them `CHARTS` (`bot.service.triage.Charts`
is what they expect), so `bot.service` imports no `bot.render`.
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass
from typing import Any

from bot.render.chart_buckets import render_bucket_chart
from bot.render.chart_layout import fit_title, outside_legend, renderer
from bot.render.chart_memory import _rc, chart_lang, render_memory_chart
from bot.render.i18n import Catalog
from runbooks.model.evidence import Evidence
from runbooks.model.report import Report

_DRAW = threading.Lock()
_COLORS = {"weights": "#4e79a7", "static": "#76b7b2", "kv": "#f28e2b", "free": "#d9d9d9", "used": "#e15759"}


def evidence_charts(evidence: Evidence, lang: str) -> tuple[bytes | None, bytes | None]:
    """The GPU memory chart (when there is history) and the bucket chart (when there is a profile)
    of a live triage's evidence, for the bundle it writes.

    Charts need matplotlib (`pip install 'gpumem[charts]'`); without it both are None.
    """
    try:
        import matplotlib  # noqa: F401  (lazy: see `_split_chart`)
    except ImportError:
        return None, None
    memory = profile = None
    if evidence.memory_history is not None and evidence.memory_history.series:
        memory = render_memory_chart(evidence.memory_history, evidence.target or "", lang)
    if evidence.requests is not None and evidence.requests.total:
        profile = render_bucket_chart(evidence.requests, evidence.target or "", lang)
    return memory, profile


def memory_chart(report: Report, evidence: Evidence, lang: str = "en") -> bytes | None:
    """GPU memory over time when there is a history, else the split of one card; None without data."""
    history = evidence.memory_history
    if history is not None and history.series:
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
    with _DRAW:
        return render_bucket_chart(p, report.target or "", lang)


def _split_chart(report: Report, lang: str) -> bytes:
    fig = split_figure(report, lang)
    buf = io.BytesIO()
    with matplotlib_rc(lang):
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def matplotlib_rc(lang: str) -> Any:
    import matplotlib  # lazy: see `split_figure`

    return matplotlib.rc_context(_rc(chart_lang(lang)))


def split_figure(report: Report, lang: str) -> Any:
    """One card split into weights, other static memory, KV cache and free space, the memory in
    use now as a red line and the card's size as a dashed line labelled with its GiB; the legend
    below the axes, the title fitted to the width."""
    # lazy, as in the chart modules: matplotlib costs ~450 ms to import (-X importtime), which
    # a triage without charts (a terminal, a JSON report) never pays
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lang = chart_lang(lang)
    cat = Catalog.load(lang)
    mem = report.memory
    assert mem is not None and mem.gpu_total_gib
    total = mem.gpu_total_gib
    parts: list[tuple[str, float, str]] = []
    if mem.static_gib is not None:
        weights = mem.weights_gib or 0.0
        parts += [(cat.t("slack.chart.weights"), weights, _COLORS["weights"]),
                  (cat.t("slack.chart.other_static"), max(0.0, mem.static_gib - weights), _COLORS["static"]),
                  (cat.t("slack.chart.kv_cache"), mem.dynamic_gib or 0.0, _COLORS["kv"])]
    elif mem.gpu_used_gib is not None:
        parts.append((cat.t("slack.chart.in_use"), mem.gpu_used_gib, _COLORS["used"]))
    used = sum(gib for _, gib, _ in parts)
    parts.append((cat.t("slack.chart.free"), max(0.0, total - used), _COLORS["free"]))
    with matplotlib_rc(lang):
        fig = Figure(figsize=(10, 3.6), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        handles = []
        left = 0.0
        for label, gib, color in parts:
            handles.append(ax.barh([0], [gib], left=left, color=color, label=f"{label} {gib:.1f} GiB"))
            left += gib
        if mem.static_gib is not None and mem.gpu_used_gib is not None:
            handles.insert(0, ax.axvline(mem.gpu_used_gib, color=_COLORS["used"], linewidth=3,
                                         label=f"{cat.t('slack.chart.in_use')} {mem.gpu_used_gib:.1f} GiB"))
        # the card's size: a dashed line at its GiB, labelled with it above the bar
        ax.axvline(total, color="#333333", linestyle="--", linewidth=1.6, zorder=3, gid=f"card:{total:.1f}")
        ax.text(total, 1.02, cat.t("chart_memory.card", gib=f"{total:.1f}"), transform=ax.get_xaxis_transform(),
                ha="right", va="bottom", fontsize=11, color="#333333", gid=f"card-label:{total:.1f}")
        ax.set_yticks([])
        ax.set_xlim(0, max(total, left) * 1.02)
        ax.set_xlabel(cat.t("slack.chart.gib"))
        heading = ax.set_title(cat.t("slack.chart.memory_split", target=report.target or cat.t("section.no_target"),
                                     gpu=report.gpu or cat.t("section.gpu_unknown")), loc="left", fontsize=15, pad=22)
        outside_legend(fig, handles, "lower center", ncol=3)
        fit_title(fig, heading)
        renderer(fig)  # the layout again, around the fitted (perhaps wrapped) title
    return fig


def warm_charts(lang: str = "en") -> None:
    """Import matplotlib's Agg backend and draw one small figure with text, so the first chart
    of a triage does not load the fonts."""
    import matplotlib  # lazy: see `_split_chart`
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    chart_lang(lang)
    with matplotlib.rc_context({}):
        fig = Figure(figsize=(2, 1), dpi=50)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        ax.plot([0, 1], [0, 1])
        ax.set_title("warm-up 0.5 GiB", loc="left")
        ax.bar([0], [1])
        fig.savefig(io.BytesIO(), format="png")


@dataclass(frozen=True)
class TriageCharts:
    """The drawer the surfaces hand the triage use cases and runners (`bot.service.triage.Charts`);
    picklable, so a triage worker process draws its own."""

    def of_evidence(self, evidence: Evidence, lang: str) -> tuple[bytes | None, bytes | None]:
        return evidence_charts(evidence, lang)

    def of_report(self, report: Report, evidence: Evidence, lang: str) -> tuple[bytes | None, bytes | None]:
        return memory_chart(report, evidence, lang), profile_chart(report, lang)

    def warm(self, lang: str) -> None:
        warm_charts(lang)


#: the one drawer
CHARTS = TriageCharts()
