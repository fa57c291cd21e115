"""Layout helpers every chart shares, so that nothing is cut, run together or drawn over data.

- `fit_text`: a title (or an axis label) that would run past the room it has is set smaller,
  down to a floor, then wrapped onto more lines, breaking after spaces, `/`, `-`, `·`, `:` or
  between CJK characters; never cut.
- `wrap_labels`: category tick labels wrapped to the width of their slot, so neighbours do not
  run together; `wrap_label`: a legend entry on lines of a given length.
- `thin_date_ticks`: at most a phone's worth of time labels (`%H:%M`).
- `outside_legend`: the legend below the axes (or to their right), where it cannot cover bars
  or lines; constrained layout makes room for it.
- `overlaps`, `extent`: the geometry the tests check, in display pixels.

Charts use matplotlib's constrained layout, which keeps axis labels, tick labels, titles and
outside legends inside the figure at the figure's fixed size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

#: room between a text and the figure's edge, in pixels
EDGE_PX = 6
_BREAK = re.compile(r"(?<=[\s/·:_,，：、\-])|(?<=[\u2e80-\u9fff\uff00-\uffef])|(?=[\u2e80-\u9fff\uff00-\uffef])")


def renderer(fig: Any) -> Any:
    """The figure's renderer, after the layout engine has placed everything (it acts at draw
    time): `draw_without_rendering` lays the figure out without rasterizing it, a fifth of a full
    draw's cost, and the text extents measured after it are the ones the saved image has."""
    fig.draw_without_rendering()
    return fig.canvas.get_renderer()


def _width(artist: Any, r: Any) -> float:
    return artist.get_window_extent(r).width


def _pieces(text: str) -> list[str]:
    return [p for p in _BREAK.split(text) if p]


def _wrapped(artist: Any, text: str, room: float, r: Any) -> str:
    lines: list[str] = []
    line = ""
    for piece in _pieces(text):
        trial = line + piece
        artist.set_text(trial.strip())
        if line and _width(artist, r) > room:
            lines.append(line.rstrip())
            line = piece.lstrip()
        else:
            line = trial
    lines.append(line.rstrip())
    return "\n".join(lines)


def fit_text(fig: Any, artist: Any, room_px: float, min_size: float = 10.0, r: Any = None) -> None:
    """Make `artist`'s text fit in `room_px` pixels of width: smaller (not under `min_size`),
    then wrapped. The text's words are kept whole where the breaks allow. `r`: a renderer of the
    laid-out figure (`renderer`), so that several fits share one layout pass."""
    r = r or renderer(fig)
    text = artist.get_text().replace("\n", " ")
    artist.set_text(text)
    size = artist.get_fontsize()
    while _width(artist, r) > room_px and size > min_size:
        size = max(min_size, size - 1)
        artist.set_fontsize(size)
    if _width(artist, r) > room_px:
        artist.set_text(_wrapped(artist, text, room_px, r))


def fit_title(fig: Any, title: Any, min_size: float = 11.0, within: Any = None, r: Any = None) -> None:
    """A title starting where it starts, fitted to the figure's right edge, or to the right
    edge of the axes `within` (when a legend stands beside them)."""
    r = r or renderer(fig)
    left = title.get_window_extent(r).x0
    right = fig.bbox.width - EDGE_PX if within is None else within.get_window_extent(r).x1
    fit_text(fig, title, right - max(left, 0.0), min_size, r)


def fit_axis_label(fig: Any, ax: Any, axis: str = "y", min_size: float = 10.0, r: Any = None) -> None:
    """The y label fitted to the axes' height (the x label to their width)."""
    r = r or renderer(fig)
    box = ax.get_window_extent(r)
    label = ax.yaxis.label if axis == "y" else ax.xaxis.label
    room = (box.height if axis == "y" else box.width) * 0.95
    # a rotated label's "width" along the text is its extent's height
    if axis == "y":
        size = label.get_fontsize()
        text = label.get_text().replace("\n", " ")
        label.set_text(text)
        while label.get_window_extent(r).height > room and size > min_size:
            size = max(min_size, size - 1)
            label.set_fontsize(size)
        if label.get_window_extent(r).height > room:
            label.set_rotation(0)
            wrapped = _wrapped(label, text, room, r)
            label.set_rotation(90)
            label.set_text(wrapped)
    else:
        fit_text(fig, label, room, min_size, r)


def wrap_labels(fig: Any, ax: Any, positions: Sequence[float], labels: Sequence[str], r: Any = None) -> None:
    """Category labels on the x axis, each wrapped to its slot's width (tick labels are set
    again from the formatter at every draw, so the wrapped texts become the labels)."""
    r = r or renderer(fig)
    slot = ax.get_window_extent(r).width / max(1, len(labels)) * 0.92
    probe = fig.text(0, 0, "", fontproperties=ax.get_xticklabels()[0].get_fontproperties()
                     if ax.get_xticklabels() else None)
    wrapped = []
    for text in labels:
        probe.set_text(text)
        wrapped.append(text if _width(probe, r) <= slot else _wrapped(probe, text, slot, r))
    probe.remove()
    ax.set_xticks(list(positions), labels=wrapped)


def thin_date_ticks(ax: Any, at_most: int = 7, tz: Any = None) -> None:
    """Time ticks as %H:%M, no more than `at_most` of them."""
    from matplotlib import dates as mdates

    locator = mdates.AutoDateLocator(minticks=3, maxticks=at_most, tz=tz)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=tz))


def outside_legend(fig: Any, handles: Sequence[Any], where: str = "lower center", ncol: int = 1,
                   fontsize: float | None = None) -> Any:
    """A figure legend outside the axes (constrained layout's `outside` locations)."""
    kwargs: dict[str, Any] = {"handles": list(handles), "loc": f"outside {where}", "ncol": ncol, "frameon": False}
    if fontsize is not None:
        kwargs["fontsize"] = fontsize
    return fig.legend(**kwargs)


def wrap_label(text: str, width: int) -> str:
    """A legend entry broken onto lines of about `width` characters (CJK counts two).

    >>> wrap_label("llm/service-number-5-with-a-long-name", 20)
    'llm/service-number-\\n5-with-a-long-name'
    """
    lines, line, used = [], "", 0
    for piece in _pieces(text):
        cost = sum(2 if ord(c) >= 0x2E80 else 1 for c in piece)
        if line and used + cost > width:
            lines.append(line.rstrip())
            line, used = piece.lstrip(), cost
        else:
            line, used = line + piece, used + cost
    lines.append(line.rstrip())
    return "\n".join(lines)


def extent(artist: Any, r: Any) -> Any:
    return artist.get_window_extent(r)


def overlaps(a: Any, b: Any, slack: float = 0.5) -> bool:
    """Two display boxes overlap by more than `slack` pixels each way."""
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > slack) and (min(a.y1, b.y1) - max(a.y0, b.y0) > slack)


def any_overlap(boxes: Iterable[Any]) -> bool:
    found = list(boxes)
    return any(overlaps(found[i], found[j]) for i in range(len(found)) for j in range(i + 1, len(found)))
