"""The charts' layout, checked on the drawn figures rather than on pixels, in English and Chinese:
every text inside the figure (titles not cut, y labels not clipped), legends off the plotted
data (outside the axes), tick labels not run together, and the card's size drawn on the memory
chart as a line at its GiB, labelled with it. Inputs are the hard cases: long service names and
titles, many devices, a shift whose parts have long names, a long shift."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache

import pytest

from bot.render.chart_buckets import bucket_figure
from bot.render.chart_fleet import fleet_figure
from bot.render.chart_layout import any_overlap, overlaps, wrap_label
from bot.render.chart_memory import memory_figure
from bot.render.chart_profile import profile_figure
from bot.render.chart_shift import shift_figure
from bot.service.handover import ShiftSeries
from runbooks.alerts.fleet import Service, rank
from runbooks.model.evidence import MemoryHistory, MemoryPoint, MemorySeries
from runbooks.model.lengths import BucketShare, ProfileShift, RequestProfile
from runbooks.model.units import GIB
from runbooks.profile.detail import BucketSlice, ProfileDetail

T0 = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
LONG = "production-inference/qwen2.5-72b-instruct-awq-long-context-pool-canary"
LANGS = ("en", "zh")
CARD_GIB = 79.6


def _memory(devices: int = 2, card_gib: float = CARD_GIB) -> MemoryHistory:
    series = []
    for d in range(devices):
        points = tuple(MemoryPoint(T0 + timedelta(seconds=15 * i), (60 + d + (i % 40) / 4) * GIB, card_gib * GIB)
                       for i in range(241))
        series.append(MemorySeries(f"gpu-node-{d}/gpu{d}", points))
    oom = (T0 + timedelta(minutes=35),)
    return MemoryHistory("prometheus", tuple(series), restarts_at=(T0 + timedelta(minutes=20), *oom), start=T0,
                         end=T0 + timedelta(hours=1), oom_killed_at=oom)


def _profile() -> RequestProfile:
    buckets = (BucketShare("S", 500, 0.5), BucketShare("M", 130, 0.13), BucketShare("L", 300, 0.30),
               BucketShare("XL", 70, 0.07))
    return RequestProfile("prometheus", total=1000, buckets=buckets, shift=ProfileShift(0.08, 0.37, 500, 500))


def _detail(by_time: bool) -> ProfileDetail:
    slices = []
    for i in range(48):
        counts = (50 - i // 2, 20, 10 + i // 2, 5 + (i > 24) * 10)
        if by_time:
            slices.append(BucketSlice(i, counts, start=T0 + timedelta(minutes=5 * i), end=T0 + timedelta(minutes=5 * i + 5)))
        else:
            slices.append(BucketSlice(i, counts, first_request=i * 1000, last_request=(i + 1) * 1000))
    return ProfileDetail(slices=tuple(slices), by_time=by_time)


def _shift() -> list[ShiftSeries]:
    return [ShiftSeries(f"llm/service-number-{i}-with-a-long-deployment-name",
                        tuple((T0 + timedelta(minutes=m), 0.5 + 0.04 * i + (m % 7) / 50) for m in range(0, 480, 5)))
            for i in range(8)]


def _fleet_rows():
    return rank([Service("production-inference", f"svc-{i}-with-a-rather-long-deployment-name", ("vllm",),
                         {"kv_now": 0.5 + i * 0.05, "kv_max": 0.6 + i * 0.05}) for i in range(8)]
                + [Service("ml", "embedder", (), {"gpu_used": 0.97})])


FIGURES = {
    "memory": lambda lang: memory_figure(_memory(), "llm/vllm-server", lang),
    "memory-long": lambda lang: memory_figure(_memory(devices=9), LONG, lang),
    "buckets": lambda lang: bucket_figure(_profile(), LONG, lang),
    "profile-time": lambda lang: profile_figure(_detail(True), f"access.log ({LONG})", 48000, lang),
    "profile-arrival": lambda lang: profile_figure(_detail(False), "access.log", 48000, lang),
    "shift": lambda lang: shift_figure(_shift(), T0, T0 + timedelta(hours=8), lang),
    "fleet": lambda lang: fleet_figure(_fleet_rows(), f"Memory headroom · {LONG}", lang),
}
CASES = [pytest.param(name, lang, id=f"{name}-{lang}") for name in FIGURES for lang in LANGS]


@cache
def _figure(name: str, lang: str):
    """The figure of one case, drawn once for the five checks that read it (none changes it)."""
    return FIGURES[name](lang)


def _drawn_ticks(axis):
    """The tick labels matplotlib draws: those of ticks inside the axis' view (the locator's
    others are laid out but not drawn)."""
    return [t.label1 for t in axis._update_ticks() if t.label1.get_visible() and t.label1.get_text()]


def _texts(fig):
    """Every drawn, non-empty text of the figure: titles, labels, tick labels, legend entries, notes."""
    from matplotlib.text import Text

    ticks = {id(t.label1) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for t in axis.get_major_ticks()}
    drawn = [t for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for t in _drawn_ticks(axis)]
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in ticks] + drawn


def _data_boxes(ax, r):
    """The display boxes of what an axes plots: lines, bars, areas."""
    from matplotlib.collections import PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    boxes = [line.get_window_extent(r) for line in ax.get_lines() if len(line.get_xdata())]
    boxes += [p.get_window_extent(r) for p in ax.patches if isinstance(p, Rectangle) and p.get_width() and p.get_height()]
    boxes += [c.get_window_extent(r) for c in ax.collections if isinstance(c, PolyCollection)]
    assert boxes or not any(isinstance(a, Line2D) for a in ax.get_children())
    return boxes


@pytest.mark.parametrize(("name", "lang"), CASES)
def test_every_text_is_inside_the_figure(name, lang):
    fig = _figure(name, lang)
    r = fig.canvas.get_renderer()
    frame = fig.bbox
    for t in _texts(fig):
        box = t.get_window_extent(r)
        assert box.x0 >= -0.5 and box.y0 >= -0.5 and box.x1 <= frame.x1 + 0.5 and box.y1 <= frame.y1 + 0.5, (
            name, t.get_text(), box.bounds, frame.bounds)


@pytest.mark.parametrize(("name", "lang"), CASES)
def test_titles_are_whole_and_within_the_width(name, lang):
    fig = _figure(name, lang)
    r = fig.canvas.get_renderer()
    titles = [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()]
    if fig._suptitle is not None:
        titles.append(fig._suptitle)
    assert titles
    for t in titles:
        box = t.get_window_extent(r)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.x1, (name, t.get_text(), box.bounds)
        # wrapped, never shortened: the words are all there
        assert "…" not in t.get_text() and "..." not in t.get_text()
    if "long" in name or name in ("buckets", "profile-time", "fleet"):
        assert any(LONG.replace("/", "").replace("-", "")[:40] in t.get_text().replace("\n", "").replace("/", "")
                   .replace("-", "") for t in titles), [t.get_text() for t in titles]


@pytest.mark.parametrize(("name", "lang"), CASES)
def test_legends_are_off_the_data(name, lang):
    fig = _figure(name, lang)
    r = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    for legend in legends:
        box = legend.get_window_extent(r)
        for ax in fig.axes:
            # outside every axes, so over no line, bar or area
            assert not overlaps(box, ax.get_window_extent(r)), (name, box.bounds, ax.get_window_extent(r).bounds)
            for data in _data_boxes(ax, r):
                assert not overlaps(box, data), name
        for other in _texts(fig):
            if other.figure is fig and other not in legend.get_texts() and other is not legend.get_title():
                assert not overlaps(box, other.get_window_extent(r)), (name, other.get_text())


@pytest.mark.parametrize(("name", "lang"), CASES)
def test_tick_labels_do_not_run_together(name, lang):
    fig = _figure(name, lang)
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = _drawn_ticks(axis)
            boxes = [t.get_window_extent(r) for t in labels]
            assert not any_overlap(boxes), (name, [t.get_text() for t in labels])
        # and the axis labels stay clear of the tick labels
        for label, axis in ((ax.xaxis.label, ax.xaxis), (ax.yaxis.label, ax.yaxis)):
            if label.get_text():
                for t in _drawn_ticks(axis):
                    assert not overlaps(label.get_window_extent(r), t.get_window_extent(r)), (name, label.get_text())


@pytest.mark.parametrize(("name", "lang"), CASES)
def test_titles_stay_clear_of_legends_and_labels(name, lang):
    fig = _figure(name, lang)
    r = fig.canvas.get_renderer()
    titles = [t for ax in fig.axes for t in (ax.title, ax._left_title) if t.get_text()]
    titles += [fig._suptitle] if fig._suptitle is not None else []
    others = [t for t in _texts(fig) if t not in titles]
    for title in titles:
        for other in others:
            assert not overlaps(title.get_window_extent(r), other.get_window_extent(r)), (name, other.get_text())


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("card", [CARD_GIB, 22.5, 139.8])
def test_the_card_is_a_line_at_its_gib_labelled_with_it(lang, card):
    fig = memory_figure(_memory(card_gib=card), "llm/vllm-server", lang)
    r = fig.canvas.get_renderer()
    (ax,) = fig.axes
    (line,) = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("card:")]
    assert line.get_gid() == f"card:{card:.1f}"
    assert list(line.get_ydata()) == [pytest.approx(card, abs=0.05)] * 2 and list(line.get_xdata()) == [0, 1]
    assert line.get_linestyle() == "--"
    (label,) = [t for t in ax.texts if t.get_gid() == f"card-label:{card:.1f}"]
    assert f"{card:.1f} GiB" in label.get_text()
    # beside the axes, at the line's height, inside the figure
    box, axes_box = label.get_window_extent(r), ax.get_window_extent(r)
    line_y = ax.transData.transform((0, card))[1]
    assert box.x0 >= axes_box.x1 and box.x1 <= fig.bbox.x1
    assert box.y0 <= line_y <= box.y1
    # the y axis reaches above the card so its line is seen
    assert ax.get_ylim()[1] > card


def test_two_card_sizes_get_a_line_and_a_label_each():
    a, b = _memory(devices=1, card_gib=79.6), _memory(devices=1, card_gib=44.4)
    mixed = MemoryHistory("prometheus", (a.series[0], MemorySeries("gpu-node-9/gpu0", tuple(
        MemoryPoint(p.at, p.used_bytes / 2, 44.4 * GIB) for p in b.series[0].points))), start=T0,
        end=T0 + timedelta(hours=1))
    fig = memory_figure(mixed, "llm/mixed", "en")
    (ax,) = fig.axes
    assert sorted(ln.get_gid() for ln in ax.get_lines() if (ln.get_gid() or "").startswith("card:")) == [
        "card:44.4", "card:79.6"]
    assert sorted(t.get_text() for t in ax.texts if (t.get_gid() or "").startswith("card-label")) == [
        "card 44.4 GiB", "card 79.6 GiB"]


def test_a_long_title_is_wrapped_or_made_smaller_never_cut():
    fig = memory_figure(_memory(), LONG + " " + LONG, "en")
    r = fig.canvas.get_renderer()
    title = fig.axes[0]._left_title
    assert title.get_text().replace("\n", "").replace(" ", "") == (LONG + LONG).replace(" ", "")
    assert "\n" in title.get_text() and title.get_window_extent(r).x1 <= fig.bbox.x1


def test_the_time_axis_has_a_phones_worth_of_labels():
    fig = shift_figure(_shift(), T0, T0 + timedelta(hours=8), "en")
    labels = [t.get_text() for t in _drawn_ticks(fig.axes[0].xaxis)]
    assert 3 <= len(labels) <= 9 and all(len(x) == 5 and x[2] == ":" for x in labels)


def test_the_shift_parts_names_are_wrapped_under_their_bars():
    fig = bucket_figure(_profile(), "llm/x", "en")
    sx = fig.axes[1]
    names = [t.get_text() for t in sx.get_xticklabels()]
    assert names[0].replace("\n", " ") == "first quarter of the window" and "\n" in names[0]


def test_a_legend_entry_is_wrapped_at_a_break():
    assert wrap_label("llm/service-number-5-with-a-long-name", 20) == "llm/service-number-\n5-with-a-long-name"
    assert wrap_label("GpumemKVCacheHigh：持续 10 分钟超过 90%", 24).count("\n") == 1
    assert wrap_label("short", 20) == "short"
