"""`gpumem profile`: buckets, exact percentiles, the shift (in the window and against a
baseline), server logs, metrics scrapes, the chart, and bad input, in English and Chinese."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.main import main
from collectors.access_logs.request_lengths import (
    LogLengths,
    MetricsLengths,
    parse_server_log_requests,
    profile_from_metrics,
)
from collectors.errors import ParseError

ROOT = Path(__file__).resolve().parent.parent
INCIDENT = ROOT / "examples" / "runbook-incident" / "access.log"
HEALTHY = ROOT / "examples" / "healthy-vllm-v1" / "access.log"
SGLANG_LOG = ROOT / "tests" / "data" / "logs" / "sglang_finish_requests.log"
METRICS = ROOT / "tests" / "data" / "metrics"


def _json(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(["profile", *argv, "--json", "--lang", "en"])
    return rc, json.loads(capsys.readouterr().out)


def test_access_log_json_has_exact_counts_percentiles_and_shift(capsys):
    rc, doc = _json(capsys, "--access-log", str(INCIDENT))
    assert rc == 1  # the L+XL share rose by more than 15 points within the window
    assert (doc["kind"], doc["total"], doc["skipped_lines"], doc["estimated"]) == ("access_log", 2400, 0, False)
    assert [(b["bucket"], b["count"]) for b in doc["buckets"]] == [("S", 1051), ("M", 830), ("L", 519), ("XL", 0)]
    assert doc["percentiles"]["input"] == {"p50": 807.0, "p95": 7603.0, "p99": 7852.0, "max": 7898}
    assert doc["percentiles"]["output"] == {"p50": 108.0, "p95": 428.0, "p99": 496.0, "max": 512}
    assert doc["percentiles"]["total"] == {"p50": 951.0, "p95": 7902.0, "p99": 8215.0}
    assert doc["bucket_p95_tokens"] == {"S": 556.0, "M": 2101.0, "L": 8214.0, "XL": None}
    shift = doc["shift"]
    assert (shift["before_count"], shift["after_count"]) == (600, 620)
    assert shift["long_share_before"] == round(50 / 600, 4)
    assert shift["long_share_after"] == round(226 / 620, 4)
    assert shift["alarming"] is True
    assert doc["slices_by"] == "time"
    assert sum(s["total"] for s in doc["slices"]) == 2400
    assert doc["first_at"] == "2026-03-09T18:20:00+00:00"


def test_access_log_text_reads_at_a_glance(capsys):
    main(["profile", "--access-log", str(INCIDENT), "--lang", "en"])
    out = capsys.readouterr().out
    assert out.startswith("gpumem profile · access.log · 2400 requests\n")
    assert "  S  ≤512 in, ≤128 out        1,051   43.8%" in out
    assert "  input                  807     7,603     7,852     7,898" in out
    assert "  input + output         951     7,902     8,215         -" in out
    assert "p95 per bucket (input + output): S 556 · M 2,101 · L 8,214 · XL -" in out
    assert ("L+XL 8.3% (first quarter of the window, 600 requests) → 36.5% (last quarter, 620 requests): "
            "+28.1 points") in out
    assert "the L+XL share rose by 15 points or more" in out


def test_access_log_text_in_chinese(capsys):
    main(["profile", "--access-log", str(INCIDENT), "--lang", "zh"])
    out = capsys.readouterr().out
    assert out.startswith("gpumem profile · access.log · 2400 个请求\n")
    assert "== 长度桶" in out and "输入 ≤512，输出 ≤128" in out
    assert "L+XL 8.3%（窗口前四分之一，600 个请求）→ 36.5%（最后四分之一，620 个请求）：+28.1 个百分点" in out
    assert "L+XL 占比上升了 15 个百分点以上" in out


def test_baseline_shift_compares_the_whole_files(capsys):
    rc, doc = _json(capsys, "--access-log", str(INCIDENT), "--baseline", str(HEALTHY))
    shift = doc["baseline_shift"]
    assert (shift["before_label"], shift["after_label"]) == ("baseline", "current")
    assert (shift["before_count"], shift["after_count"]) == (1800, 2400)
    assert shift["long_share_after"] == 0.2162
    assert shift["long_share_before"] == round(doc["baseline"]["buckets"][2]["share"]
                                                + doc["baseline"]["buckets"][3]["share"], 4)
    assert rc == 1


def test_baseline_text_lists_each_buckets_change(capsys):
    main(["profile", "--access-log", str(INCIDENT), "--baseline", str(HEALTHY), "--lang", "en"])
    out = capsys.readouterr().out
    assert "(baseline, 1800 requests) → 21.6% (now, 2400 requests)" in out
    assert "S: 71.9% → 43.8% (-28.1 points)" in out


def _png_size(data: bytes) -> tuple[int, int]:
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_chart_is_a_png_of_the_documented_size(tmp_path, capsys, lang):
    chart = tmp_path / "buckets.png"
    rc = main(["profile", "--access-log", str(INCIDENT), "--chart", str(chart), "--lang", lang])
    out = capsys.readouterr().out
    data = chart.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR" and _png_size(data) == (1200, 600)
    assert len(data) > 20_000  # areas, axes and a legend, not an empty canvas
    assert str(chart) in out
    assert rc == 1


def test_chart_of_an_untimed_log_is_by_arrival(tmp_path, capsys):
    log = tmp_path / "access.log"
    log.write_text("".join(f"input_tokens={100 if k < 3000 else 9000} output_tokens=20\n" for k in range(6000)))
    rc, doc = _json(capsys, "--access-log", str(log), "--chart", str(tmp_path / "c.png"))
    assert doc["slices_by"] == "arrival"
    assert (doc["shift"]["long_share_before"], doc["shift"]["long_share_after"]) == (0.0, 1.0)
    assert _png_size((tmp_path / "c.png").read_bytes()) == (1200, 600)
    assert rc == 1


def test_sglang_finish_lines_give_a_profile(capsys):
    rc, doc = _json(capsys, "--server-log", str(SGLANG_LOG))
    assert rc == 0
    assert (doc["kind"], doc["total"], doc["skipped_lines"]) == ("server_log", 4, 1)
    assert [b["count"] for b in doc["buckets"]] == [1, 1, 1, 1]
    assert doc["percentiles"]["input"]["max"] == 12000
    assert doc["first_at"] == "2025-03-01T12:00:12+00:00"


@pytest.mark.parametrize(("log", "words"), [
    ("vllm_v1_010.log", "vLLM logs do not print per-request token counts"),
    ("tgi_text.log", "TGI logs do not print per-request token counts"),
    ("sglang_startup.log", "SGLang prints them only with --log-requests"),
])
def test_server_log_without_lengths_says_so_plainly(capsys, log, words):
    rc = main(["profile", "--server-log", str(ROOT / "tests" / "data" / "logs" / log), "--lang", "en"])
    err = capsys.readouterr().err
    assert rc == 3
    assert words in err and "--access-log" in err


@pytest.mark.parametrize(("scrape", "total"), [("vllm_v1_dp2.txt", 22088), ("tgi_3.3.txt", 10233),
                                                ("sglang_dp2.txt", 52001)])
def test_metrics_histograms_give_an_estimated_profile(capsys, scrape, total):
    rc, doc = _json(capsys, "--metrics", str(METRICS / scrape))
    assert rc == 0
    assert (doc["kind"], doc["estimated"], doc["total"]) == ("metrics", True, total)
    assert sum(b["count"] for b in doc["buckets"]) == total
    assert doc["shift"] is None


def _scrape(prompt_counts: list[int]) -> str:
    bounds = ["100", "500", "1000", "5000", "10000", "+Inf"]
    lines = ["# TYPE vllm:request_prompt_tokens histogram"]
    for bound, count in zip(bounds, prompt_counts, strict=True):
        lines.append(f'vllm:request_prompt_tokens_bucket{{le="{bound}",model_name="m"}} {count}')
    lines.append(f'vllm:request_prompt_tokens_count{{model_name="m"}} {prompt_counts[-1]}')
    return "\n".join(lines) + "\n"


def test_metrics_against_an_earlier_scrape_profile_the_traffic_between_them(tmp_path, capsys):
    (tmp_path / "before.txt").write_text(_scrape([100, 500, 900, 1000, 1000, 1000]))
    (tmp_path / "now.txt").write_text(_scrape([100, 500, 900, 1000, 2000, 2000]))  # 1000 new, all 5000-10000
    rc, doc = _json(capsys, "--metrics", str(tmp_path / "now.txt"), "--baseline", str(tmp_path / "before.txt"))
    assert doc["between_scrapes"] is True
    assert doc["total"] == 1000
    assert doc["buckets"][2]["share"] == pytest.approx(3192 / 5000)  # 5000-8192 of 5000-10000
    assert doc["baseline_shift"]["long_share_before"] == pytest.approx(100 * (5000 - 2048) / 4000 / 1000, abs=1e-4)
    assert rc == 1


def test_metrics_without_token_histograms_exit_3(capsys):
    rc = main(["profile", "--metrics", str(METRICS / "dcgm_exporter_h100.txt"), "--lang", "en"])
    assert rc == 3
    assert "has no token histograms" in capsys.readouterr().err


def test_chart_needs_per_request_times(tmp_path, capsys):
    rc = main(["profile", "--metrics", str(METRICS / "vllm_v1_dp2.txt"), "--chart", str(tmp_path / "c.png")])
    assert rc == 2
    assert "--chart needs per-request lines" in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()


def test_missing_file_is_a_usage_error_without_traceback(tmp_path, capsys):
    rc = main(["profile", "--access-log", str(tmp_path / "nope.log"), "--lang", "en"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == f"gpumem profile: {tmp_path / 'nope.log'}: no such file."


def test_access_log_without_lengths_exit_3(tmp_path, capsys):
    log = tmp_path / "access.log"
    log.write_text("GET / 200\nGET /health 200\n")
    rc = main(["profile", "--access-log", str(log), "--lang", "zh"])
    assert rc == 3
    assert "中没有请求长度" in capsys.readouterr().err


def test_one_source_is_required(capsys):
    with pytest.raises(SystemExit) as e:
        main(["profile", "--json"])
    assert e.value.code == 2


# ------------------------------------------------------------------ parsers of outside input

_LOG_LINES = st.lists(st.one_of(
    st.text(max_size=80),
    st.builds(lambda a, b: f"[2025-03-01 12:00:0{a % 10} TP0] Finish: out={{'meta_info': {{'prompt_tokens': {a}, "
                           f"'completion_tokens': {b}}}}}", st.integers(-5, 10**10), st.integers(-5, 10**10)),
    st.sampled_from(["'prompt_tokens': x", "prompt_tokens=7 completion_tokens=", '{"meta_info": {"prompt_tokens": 1}}']),
), max_size=30)


@settings(max_examples=200, deadline=None)
@given(_LOG_LINES)
def test_server_log_parser_returns_lengths_for_any_text(lines):
    found = parse_server_log_requests("\n".join(lines))
    assert isinstance(found, LogLengths)
    if found.profile is not None:
        assert found.profile.total == sum(b.count for b in found.profile.buckets) > 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.one_of(st.none(), st.text(max_size=200)))
def test_metrics_profile_returns_lengths_or_a_parse_error(text, earlier):
    try:
        found = profile_from_metrics(text, "metrics.txt", earlier)
    except ParseError:
        return
    assert isinstance(found, MetricsLengths)
