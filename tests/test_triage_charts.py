"""The memory chart a triage thread carries when its bundle has no memory history: one card split
into weights, other static memory, KV cache and free space. Checked on the drawn figure, in
English and Chinese: the card's size is a dashed line at its GiB, labelled with it; every text is
inside the figure (its window extent within the figure's box); the title is whole and fitted;
the legend is off the bar."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from bot.render.chart_layout import overlaps
from bot.render.chart_memory import chart_lang
from bot.render.triage_charts import memory_chart, split_figure
from bot.service import triage as triage_service
from collectors.bundle import load_bundle
from runbooks.model.report import Report
from tests.test_chart_geometry import LONG, _data_boxes, _texts

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: a card with room to spare, weights larger than the card, a MIG slice
BUNDLES = ("runbook-incident", "weights-too-large-l4", "mig-slice-small")
LANGS = ("en", "zh")


@cache
def _report(name: str) -> Report:
    return triage_service.triage_bundle(str(EXAMPLES / name)).report


def _figure(name: str, lang: str, long: bool = False):
    report = _report(name)
    return split_figure(replace(report, target=LONG) if long else report, lang)


CASES = [(n, lang, long) for n in BUNDLES for lang in LANGS for long in (False, True)]


@pytest.mark.parametrize(("name", "lang", "long"), CASES)
def test_the_card_is_a_dashed_line_at_its_gib_labelled_with_it(name, lang, long):
    fig = _figure(name, lang, long)
    r = fig.canvas.get_renderer()
    (ax,) = fig.axes
    total = _report(name).memory.gpu_total_gib
    (line,) = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("card:")]
    assert line.get_gid() == f"card:{total:.1f}" and line.get_linestyle() == "--"
    assert list(line.get_xdata()) == [pytest.approx(total)] * 2
    (label,) = [t for t in ax.texts if t.get_gid() == f"card-label:{total:.1f}"]
    assert f"{total:.1f} GiB" in label.get_text()
    # above the bar, ending at the line, inside the figure; the axis reaches past the card
    box, line_x = label.get_window_extent(r), ax.transData.transform((total, 0))[0]
    assert box.x1 == pytest.approx(line_x, abs=1.0) and box.y0 >= ax.get_window_extent(r).y1 - 0.5
    assert ax.get_xlim()[1] > total


@pytest.mark.parametrize(("name", "lang", "long"), CASES)
def test_every_text_is_inside_the_figure_and_the_title_is_whole(name, lang, long):
    fig = _figure(name, lang, long)
    r = fig.canvas.get_renderer()
    frame = fig.bbox
    texts = _texts(fig)
    assert len(texts) >= 8  # title, card label, axis label, ticks, legend entries
    for t in texts:
        box = t.get_window_extent(r)
        assert box.x0 >= -0.5 and box.y0 >= -0.5 and box.x1 <= frame.x1 + 0.5 and box.y1 <= frame.y1 + 0.5, (
            t.get_text(), box.bounds, frame.bounds)
    (ax,) = fig.axes
    title = ax._left_title.get_text()
    assert "…" not in title and "..." not in title
    if long:
        assert LONG.replace("-", "")[:30] in title.replace("\n", "").replace("-", "")


@pytest.mark.parametrize(("name", "lang", "long"), CASES)
def test_the_legend_is_off_the_bar_and_the_labels(name, lang, long):
    fig = _figure(name, lang, long)
    r = fig.canvas.get_renderer()
    (legend,) = fig.legends
    (ax,) = fig.axes
    box = legend.get_window_extent(r)
    assert not overlaps(box, ax.get_window_extent(r))
    for data in _data_boxes(ax, r):
        assert not overlaps(box, data)
    for other in _texts(fig):
        if other not in legend.get_texts():
            assert not overlaps(box, other.get_window_extent(r)), other.get_text()


def test_the_chart_names_an_unknown_workload_and_gpu_in_words():
    report = replace(_report("runbook-incident"), target=None, gpu=None)
    words_in = {"en": ("workload not named", "GPU not reported"), "zh": ("未写明工作负载", "未报告 GPU")}
    for lang in ("en", "zh"):
        # without a CJK font the chart is drawn in English rather than in empty boxes
        words = words_in[chart_lang(lang)]
        title = split_figure(report, lang).axes[0]._left_title.get_text().replace("\n", " ")
        assert all(w in title for w in words) and "?" not in title, title


def test_a_bundle_without_memory_history_gets_the_split_as_png():
    png = memory_chart(_report("runbook-incident"), load_bundle(EXAMPLES / "runbook-incident"), "en")
    assert png is not None and png.startswith(b"\x89PNG")
