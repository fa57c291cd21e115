"""A metrics file cannot take the memory or the time of its size: over-long lines are left out and
counted, and reading stops at a series cap, and the report says both."""

from __future__ import annotations

import shutil
from pathlib import Path

from collectors.bundle import load_bundle
from collectors.parsers.metrics import parse_metrics
from collectors.parsers.metrics_samples import MAX_LINE_CHARS, MAX_SERIES
from tests.support import words

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DATA = Path(__file__).resolve().parent / "data" / "metrics"


def test_reading_stops_at_the_series_cap_and_says_where(tmp_path):
    head = (DATA / "vllm_v0_0.6.txt").read_text()
    junk = "\n".join(f'junk_total{{pod="p{i}"}} {i}' for i in range(MAX_SERIES + 10_000))
    text = head + "\n# TYPE junk_total counter\n" + junk + "\n"
    m = parse_metrics(text)
    sample_lines = [n for n, line in enumerate(text.split("\n"), 1) if line and not line.startswith("#")]
    assert m.stopped_at_line == sample_lines[MAX_SERIES]  # the first sample line past the cap
    assert m.engine == "vllm" and m.queue_depth == parse_metrics(head).queue_depth, "what came first is read"


def test_an_over_long_line_is_left_out_and_counted_and_the_rest_read():
    text = (DATA / "vllm_v0_0.6.txt").read_text()
    long = 'vllm:junk{x="' + "a" * (MAX_LINE_CHARS + 1) + '"} 1'
    m = parse_metrics(long + "\n" + text)
    assert m.long_lines_skipped == 1 and m.stopped_at_line is None
    assert m.queue_depth == parse_metrics(text).queue_depth


def test_the_bundle_report_names_what_was_left_out(tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(EXAMPLES / "runbook-incident", bundle)
    metrics = bundle / "metrics.txt"
    junk = "\n".join(f'junk_total{{pod="p{i}"}} {i}' for i in range(MAX_SERIES + 5))
    metrics.write_text(metrics.read_text() + "\n" + "x" * (MAX_LINE_CHARS + 5) + "\n" + junk + "\n")
    ev = load_bundle(bundle)
    skipped = [(words.message(i), i.line) for i in ev.issues if i.source == "metrics.txt" and i.kind == "skipped"]
    assert skipped[0] == ("1 line over 64 KiB left out", None)
    assert skipped[1][0] == f"over {MAX_SERIES:,} series: read up to here, the rest left out" and skipped[1][1] > 0
    assert ev.server_metrics.engine == "vllm"


def test_an_ordinary_file_is_read_whole():
    m = parse_metrics((DATA / "vllm_v0_0.6.txt").read_text())
    assert (m.long_lines_skipped, m.stopped_at_line) == (0, None)
