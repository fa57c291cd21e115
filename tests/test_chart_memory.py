"""render_memory_chart: a PNG a phone can read, in English or Chinese, the same bytes for the same input."""

from __future__ import annotations

import struct
import warnings
from datetime import UTC, datetime, timedelta

import pytest

from bot.render import chart_memory
from bot.render.chart_memory import HEIGHT_PX, WIDTH_PX, chart_lang, cjk_font, render_memory_chart
from runbooks.model.evidence import MemoryHistory, MemoryPoint, MemorySeries
from runbooks.model.units import GIB

START = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)


def _history(devices: int = 2, restarts: bool = True) -> MemoryHistory:
    series = []
    for d in range(devices):
        points = tuple(
            MemoryPoint(START + timedelta(seconds=15 * i), (60 + d + (i % 40) / 4) * GIB, 79.6 * GIB)
            for i in range(241)
        )
        series.append(MemorySeries(f"gpu-node-{d}/gpu{d}", points))
    oom = (START + timedelta(minutes=35),)
    return MemoryHistory(
        source="prometheus", series=tuple(series), start=START, end=START + timedelta(hours=1),
        restarts_at=(START + timedelta(minutes=20), *oom) if restarts else (),
        oom_killed_at=oom if restarts else (),
    )


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    return struct.unpack(">II", png[16:24])


def _render_strict(history: MemoryHistory, title: str, lang: str) -> bytes:
    # matplotlib warns "Glyph ... missing from font" when it would draw an empty box
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*[Gg]lyph.*missing.*")
        return render_memory_chart(history, title, lang)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_chart_is_a_png_of_the_phone_friendly_size(lang):
    png = _render_strict(_history(), "llm/vllm-server", lang)
    assert _png_size(png) == (WIDTH_PX, HEIGHT_PX) == (1000, 500)
    assert 10_000 < len(png) < 400_000


def test_the_same_history_gives_the_same_bytes():
    assert render_memory_chart(_history(), "llm/vllm-server", "en") == render_memory_chart(
        _history(), "llm/vllm-server", "en")


def test_restarts_and_oom_kills_are_drawn():
    with_marks = render_memory_chart(_history(restarts=True), "t", "en")
    without = render_memory_chart(_history(restarts=False), "t", "en")
    assert with_marks != without


def test_chinese_labels_use_a_cjk_font_when_one_is_installed():
    # `make test` installs fonts-wqy-microhei; elsewhere the chart falls back to English
    font = cjk_font()
    assert chart_lang("zh") == ("zh" if font is not None else "en")
    zh = _render_strict(_history(), "llm/vllm-server 显存", "zh")
    en = _render_strict(_history(), "llm/vllm-server 显存", "en")
    assert (zh != en) == (font is not None)


def test_without_a_cjk_font_chinese_falls_back_to_english_without_boxes(monkeypatch):
    monkeypatch.setattr(chart_memory, "cjk_font", lambda: None)
    assert chart_lang("zh") == "en"
    png = _render_strict(_history(), "llm/vllm-server 显存", "zh")
    assert png == _render_strict(_history(), "llm/vllm-server", "en")


def test_an_empty_history_still_gives_a_chart_that_says_so():
    png = _render_strict(MemoryHistory("prometheus"), "llm/vllm-server", "en")
    assert _png_size(png) == (WIDTH_PX, HEIGHT_PX)


def test_many_devices_are_capped_and_the_rest_counted():
    png = _render_strict(_history(devices=12), "llm/big", "en")
    assert _png_size(png) == (WIDTH_PX, HEIGHT_PX)
