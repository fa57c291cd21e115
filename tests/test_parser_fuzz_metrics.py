"""parse_metrics on arbitrary and near-valid text: a ServerMetrics or a ParseError, nothing else."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.parsers.metrics import parse_metrics
from runbooks.model.evidence import ServerMetrics

DATA = Path(__file__).parent / "data" / "metrics"

_NAMES = st.sampled_from([
    "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
    "vllm:cache_config_info", "vllm:num_preemptions_total", "vllm:request_success_total",
    "vllm:request_prompt_tokens_bucket", "vllm:time_to_first_token_seconds_count",
    "vllm:iteration_tokens_total_bucket", "tgi_request_failure", "tgi_queue_size",
    "tgi_request_input_length_bucket", "sglang:num_queue_reqs", "sglang:max_total_num_tokens",
    "sglang:token_usage", "llm_queue_depth", "llm_request_rejected_total", "gpu_memory_used_bytes",
    "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "dcgm_fb_used", "x_created",
])
_LABEL_NAMES = st.sampled_from([
    "engine", "model_name", "le", "finished_reason", "err", "dp_rank", "tp_rank", "gpu", "GPU_I_ID",
    "GPU_I_PROFILE", "Hostname", "hostname", "exported_pod", "pod", "UUID", "num_gpu_blocks", "block_size",
    "kv_cache_size_tokens", "gpu_memory_utilization",
])
_LABEL_VALUES = st.one_of(
    st.sampled_from(["0", "1", "+Inf", "16", "None", "0.9", "3g.40gb", "overloaded", "error", "-1", "NaN",
                     "1e400", "9" * 30]),
    st.text(alphabet=st.characters(blacklist_characters='"\\\n'), max_size=12),
)
_VALUES = st.one_of(
    st.sampled_from(["0", "1.5", "NaN", "+Inf", "-Inf", "1e400", "87.5", "-3", "9" * 400, "x", ""]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@st.composite
def _sample_line(draw) -> str:
    labels = draw(st.dictionaries(_LABEL_NAMES, _LABEL_VALUES, max_size=4))
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line = f"{draw(_NAMES)}{{{body}}} {draw(_VALUES)}"
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(line)))
        line = line[:cut] + draw(st.text(max_size=4)) + line[cut:]
    return line


_TYPE_LINE = st.builds(lambda n, t: f"# TYPE {n} {t}", _NAMES,
                       st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", "info", "bogus"]))
_RECORDED = [line for path in sorted(DATA.glob("*.txt")) for line in path.read_text().split("\n") if line]


def _check(text: str) -> None:
    try:
        metrics = parse_metrics(text)
    except ParseError as e:
        assert e.line is None or 1 <= e.line <= text.count("\n") + 1
        return
    assert isinstance(metrics, ServerMetrics)
    if metrics.kv_cache_usage_ratio is not None:
        assert 0.0 <= metrics.kv_cache_usage_ratio <= 1.0
    for histogram in (metrics.ttft_seconds, metrics.prompt_tokens, metrics.generation_tokens):
        if histogram is not None:
            bounds = [b for b, _ in histogram.buckets]
            assert bounds == sorted(bounds) and bounds[-1] == float("inf")


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_arbitrary_text_gives_metrics_or_parse_error(text):
    _check(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_sample_line(), _TYPE_LINE, st.sampled_from(_RECORDED), st.just("")), max_size=25))
def test_near_valid_exposition_gives_metrics_or_parse_error(lines):
    _check("\n".join(lines))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_RECORDED), min_size=1, max_size=60), st.integers(0, 59), st.text(max_size=6))
def test_recorded_lines_with_damage_give_metrics_or_parse_error(lines, where, junk):
    index = where % len(lines)
    lines[index] = lines[index][: len(lines[index]) // 2] + junk
    _check("\n".join(lines))
