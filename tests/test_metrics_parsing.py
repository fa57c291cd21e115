"""parse_metrics: recorded /metrics payloads paired with the readings they must give."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from collectors.errors import ParseError
from collectors.parsers.metrics import parse_metrics
from collectors.parsers.metrics_samples import read_samples
from runbooks.model.evidence import ServerMetrics
from runbooks.model.serde import from_jsonable, to_jsonable
from runbooks.model.units import MIB
from tests.support import words

DATA = Path(__file__).parent / "data" / "metrics"


def _load(name: str) -> ServerMetrics:
    return parse_metrics((DATA / name).read_text(), source=name)


# Each recorded payload with the normalised readings it must give (fields not listed: None).
EXPECTED: dict[str, dict[str, object]] = {
    "vllm_v0_0.6.txt": {
        "engine": "vllm", "flavor": "vllm-v0", "model_name": "Qwen/Qwen2.5-7B-Instruct", "engine_count": 1,
        "queue_depth": 18.0, "running_requests": 41.0, "kv_cache_usage_ratio": 0.9734,
        "kv_cache_capacity_tokens": 64142 * 16, "preemptions_total": 153.0, "requests_total": 7921.0 + 681.0,
        "gpu_memory_utilization": 0.9, "block_size": 16, "num_gpu_blocks": 64142,
    },
    "vllm_v1_dp2.txt": {
        "engine": "vllm", "flavor": "vllm-v1", "model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "engine_count": 2, "queue_depth": 7.0 + 12.0, "running_requests": 96.0 + 88.0,
        "kv_cache_usage_ratio": 0.9467, "kv_cache_capacity_tokens": 35468 * 16, "preemptions_total": 12.0 + 31.0,
        "requests_total": 10211.0 + 904.0 + 55.0 + 9987.0 + 861.0 + 70.0,
        "gpu_memory_utilization": 0.92, "block_size": 16, "num_gpu_blocks": 35470,
    },
    "tgi_3.3.txt": {
        "engine": "tgi", "engine_count": 1, "queue_depth": 26.0, "running_requests": 32.0,
        "kv_cache_capacity_tokens": 187648, "requests_total": 10234.0, "rejected_total": 312.0,
        "failed_requests_total": 312.0 + 47.0 + 5.0,
        # the running batch's reservation against the KV token budget
        "kv_cache_used_tokens": 129000.0, "kv_cache_usage_ratio": 129000 / 187648,
    },
    "sglang_dp2.txt": {
        "engine": "sglang", "model_name": "Qwen/Qwen2.5-32B-Instruct", "engine_count": 2,
        "queue_depth": 9.0 + 14.0, "running_requests": 48.0 + 51.0, "kv_cache_usage_ratio": 0.74,
        "kv_cache_capacity_tokens": 405872, "kv_cache_used_tokens": 301204.0, "preemptions_total": 17.0 + 4.0,
        "requests_total": 52001.0,
    },
    "runbook_generic.txt": {"engine": "generic", "queue_depth": 18.0, "rejected_total": 12.0},
    "dcgm_exporter_h100.txt": {"engine": "generic"},
    "node_exporter_only.txt": {"engine": "generic"},
}
_READINGS = ("flavor", "model_name", "queue_depth", "running_requests", "kv_cache_usage_ratio",
             "kv_cache_capacity_tokens", "kv_cache_used_tokens", "preemptions_total", "rejected_total",
             "failed_requests_total", "requests_total", "gpu_memory_utilization", "block_size", "num_gpu_blocks")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_payload_gives_expected_readings(name):
    metrics = _load(name)
    expected = EXPECTED[name]
    assert metrics.source == name
    assert metrics.engine == expected["engine"]
    assert metrics.engine_count == expected.get("engine_count", 1)
    for field in _READINGS:
        assert getattr(metrics, field) == pytest.approx(expected.get(field)), field


# ------------------------------------------------------------------------------ vLLM


def test_v1_engine_labels_are_summed_for_queue_depth_and_running():
    text = """
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 4.0
vllm:num_requests_waiting{engine="2",model_name="m"} 0.0
vllm:num_requests_running{model_name="m",engine="0"} 10.0
vllm:num_requests_running{model_name="m",engine="1"} 11.0
vllm:num_requests_running{model_name="m",engine="2"} 12.0
"""
    metrics = parse_metrics(text)
    assert (metrics.queue_depth, metrics.running_requests, metrics.engine_count) == (7.0, 33.0, 3)


def test_v1_kv_usage_is_the_fullest_engine():
    assert _load("vllm_v1_dp2.txt").kv_cache_usage_ratio == 0.9467


def test_v1_capacity_is_the_smallest_engine_and_config_is_the_first_engine():
    metrics = _load("vllm_v1_dp2.txt")
    assert metrics.kv_cache_capacity_tokens == 35468 * 16
    assert metrics.cache_config["engine"] == "0"
    assert metrics.cache_config["num_gpu_blocks"] == "35470"
    assert metrics.cache_config["enable_prefix_caching"] == "True"
    assert metrics.num_gpu_blocks == 35470


def test_kv_cache_size_tokens_label_is_preferred_over_blocks_times_block_size():
    text = ('vllm:cache_config_info{block_size="16",engine="0",kv_cache_size_tokens="311040",'
            'num_gpu_blocks="9720",gpu_memory_utilization="0.9"} 1.0\n')
    assert parse_metrics(text).kv_cache_capacity_tokens == 311040


def test_cache_config_none_labels_give_no_numbers():
    text = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None",gpu_memory_utilization="None"} 1.0\n'
    metrics = parse_metrics(text)
    assert (metrics.num_gpu_blocks, metrics.gpu_memory_utilization, metrics.block_size) == (None, None, 16)
    assert metrics.kv_cache_capacity_tokens is None
    assert metrics.cache_config == {"block_size": "16", "num_gpu_blocks": "None", "gpu_memory_utilization": "None"}


def test_v1_histograms_are_summed_bucket_by_bucket_whatever_the_label_order():
    prompt = _load("vllm_v1_dp2.txt").prompt_tokens
    assert prompt is not None
    bounds = [b for b, _ in prompt.buckets]
    assert bounds == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
                      10000.0, 20000.0, math.inf]
    assert dict(prompt.buckets)[1000.0] == 6702.0 + 6540.0
    assert dict(prompt.buckets)[20000.0] == 11168.0 + 10916.0
    assert prompt.count == 11170.0 + 10918.0
    assert prompt.sum == pytest.approx(1.9534211e07 + 1.8811902e07)


def test_ttft_histogram_keeps_v1_long_tail_bounds():
    ttft = _load("vllm_v1_dp2.txt").ttft_seconds
    assert ttft is not None
    assert [b for b, _ in ttft.buckets][-3:] == [640.0, 2560.0, math.inf]
    assert ttft.count == 11170.0 + 10918.0


def test_v0_histograms_and_bounds_come_from_the_text():
    metrics = _load("vllm_v0_0.6.txt")
    assert metrics.prompt_tokens is not None and metrics.generation_tokens is not None
    assert metrics.prompt_tokens.buckets[-2:] == ((5000.0, 8570.0), (math.inf, 8602.0))
    assert metrics.generation_tokens.count == 8602.0
    assert metrics.ttft_seconds is not None and metrics.ttft_seconds.sum == pytest.approx(2873.9142)


def test_created_samples_are_ignored():
    samples = read_samples((DATA / "vllm_v1_dp2.txt").read_text())
    assert not [n for n in samples.names() if n.endswith("_created")]
    assert _load("vllm_v1_dp2.txt").preemptions_total == 43.0


def test_iteration_tokens_total_is_read_as_the_histogram_it_is():
    samples = read_samples((DATA / "vllm_v1_dp2.txt").read_text())
    assert samples.counter("vllm:iteration_tokens") == []
    histogram = samples.histogram("vllm:iteration_tokens_total")
    assert histogram is not None and histogram.count == 63410.0 + 63305.0


def test_aborted_requests_are_not_failures_but_error_finishes_are():
    text = """
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 90.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 7.0
vllm:request_success_total{engine="0",finished_reason="error",model_name="m"} 2.0
vllm:request_success_total{engine="1",finished_reason="error",model_name="m"} 1.0
"""
    metrics = parse_metrics(text)
    assert (metrics.requests_total, metrics.failed_requests_total) == (100.0, 3.0)
    assert parse_metrics(text.replace('"error"', '"length"')).failed_requests_total is None


@pytest.mark.parametrize(("text", "flavor"), [
    ('vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n', "vllm-v0"),
    ('vllm:num_requests_swapped{model_name="m"} 0\nvllm:num_requests_running{engine="0",model_name="m"} 1\n',
     "vllm-v0"),
    ('vllm:cpu_cache_usage_perc{model_name="m"} 0\n', "vllm-v0"),
    ('vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5\n', "vllm-v1"),
    ('vllm:kv_cache_usage_perc{model_name="m"} 0.5\n', "vllm-v1"),
    ('vllm:num_preemptions_total{model_name="m"} 1\n', None),
])
def test_vllm_flavor_follows_names_and_labels(text, flavor):
    metrics = parse_metrics(text)
    assert (metrics.engine, metrics.flavor) == ("vllm", flavor)


def test_kv_cache_usage_prefers_the_new_name():
    text = ('vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.3\n')
    assert parse_metrics(text).kv_cache_usage_ratio == 0.3


@pytest.mark.parametrize(("value", "ratio"), [("0.87", 0.87), ("1.0", 1.0), ("87.5", 0.875), ("250", None),
                                              ("-1", None)])
def test_usage_gauge_above_one_is_read_as_a_percentage(value, ratio):
    metrics = parse_metrics(f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {value}\n')
    assert metrics.kv_cache_usage_ratio == pytest.approx(ratio)


# ------------------------------------------------------------------------------- TGI


def test_tgi_counters_without_total_are_read_typed_or_untyped():
    typed = "# TYPE tgi_request_count counter\ntgi_request_count 12\ntgi_queue_size 1\n"
    untyped = "tgi_request_count 12\ntgi_queue_size 1\n"
    assert parse_metrics(typed).requests_total == 12.0
    assert parse_metrics(untyped).requests_total == 12.0


def test_tgi_overloaded_failures_are_rejects_and_all_failures_count():
    metrics = _load("tgi_3.3.txt")
    assert (metrics.rejected_total, metrics.failed_requests_total) == (312.0, 364.0)


def test_tgi_usage_is_the_batch_reservation_over_the_token_budget_and_unknown_without_the_budget():
    both = parse_metrics("tgi_batch_current_max_tokens 18900\ntgi_batch_max_total_tokens 19056\n")
    assert (both.kv_cache_used_tokens, both.kv_cache_capacity_tokens) == (18900.0, 19056)
    assert both.kv_cache_usage_ratio == pytest.approx(18900 / 19056)
    # before 2.3.1 the budget is only in the router's log line: usage is not known from the page
    alone = parse_metrics("tgi_batch_current_max_tokens 18900\ntgi_queue_size 2\n")
    assert (alone.kv_cache_used_tokens, alone.kv_cache_usage_ratio) == (18900.0, None)
    # a reservation past the budget (speculation) reads as full, never as a percentage
    assert parse_metrics("tgi_batch_current_max_tokens 19500\ntgi_batch_max_total_tokens 19056\n"
                         ).kv_cache_usage_ratio == 1.0


def test_tgi_missing_failure_series_next_to_a_request_count_means_none_yet():
    metrics = parse_metrics("# TYPE tgi_request_count counter\ntgi_request_count 40\n")
    assert (metrics.rejected_total, metrics.failed_requests_total) == (0.0, 0.0)
    assert parse_metrics("tgi_queue_size 0\n").rejected_total is None


def test_tgi_input_length_buckets_are_the_non_integer_bounds_of_the_text():
    prompt = _load("tgi_3.3.txt").prompt_tokens
    assert prompt is not None
    finite = [b for b, _ in prompt.buckets if not math.isinf(b)]
    assert len(finite) == 100
    assert finite[:3] == pytest.approx([40.95, 81.9, 122.85])
    assert finite[-1] == pytest.approx(4095.0)
    assert prompt.count == 10233.0
    assert 1400 < (prompt.quantile(0.5) or 0) < 1500


def test_tgi_has_no_ttft_histogram():
    metrics = _load("tgi_3.3.txt")
    assert metrics.ttft_seconds is None
    assert metrics.generation_tokens is not None and metrics.generation_tokens.count == 10234.0


# ---------------------------------------------------------------------------- SGLang


def test_sglang_dp_ranks_are_summed_for_queue_and_capacity_is_per_rank():
    metrics = _load("sglang_dp2.txt")
    assert (metrics.queue_depth, metrics.running_requests) == (23.0, 99.0)
    assert (metrics.kv_cache_capacity_tokens, metrics.kv_cache_used_tokens) == (405872, 301204.0)


def test_sglang_tensor_rank_copies_count_once():
    text = """
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 6.0
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0"} 6.0
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 30.0
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0"} 30.0
"""
    metrics = parse_metrics(text)
    assert (metrics.queue_depth, metrics.running_requests, metrics.engine_count) == (6.0, 30.0, 1)


def test_sglang_histograms_and_token_usage():
    metrics = _load("sglang_dp2.txt")
    assert metrics.ttft_seconds is not None and metrics.ttft_seconds.buckets[0] == (0.1, 5120.0)
    assert metrics.prompt_tokens is not None and metrics.prompt_tokens.buckets[-2][0] == 1.1e6
    assert metrics.generation_tokens is not None and metrics.generation_tokens.count == 52001.0
    assert metrics.kv_cache_usage_ratio == 0.74


# ----------------------------------------------------------------- generic and DCGM


def test_runbook_generic_names_give_queue_rejects_and_gpu_bytes():
    metrics = _load("runbook_generic.txt")
    assert (metrics.engine, metrics.queue_depth, metrics.rejected_total) == ("generic", 18.0, 12.0)
    (gpu,) = metrics.gpus
    assert (gpu.index, gpu.used_bytes, gpu.total_bytes) == ("0", 68_000_000_000, 82_000_000_000)


def test_generic_names_fill_gaps_beside_an_engine():
    text = 'vllm:num_requests_waiting{model_name="m"} 3\nllm_request_rejected_total 5\nllm_queue_depth 9\n'
    metrics = parse_metrics(text)
    assert (metrics.engine, metrics.queue_depth, metrics.rejected_total) == ("vllm", 3.0, 5.0)


def test_dcgm_exporter_devices_in_bytes_with_pod_mapping():
    metrics = _load("dcgm_exporter_h100.txt")
    assert metrics.engine == "generic" and metrics.queue_depth is None
    first, second = metrics.gpus
    assert first.index == "0" and second.index == "1"
    assert first.used_bytes == 75714 * MIB
    assert first.reserved_bytes == 533 * MIB
    assert first.total_bytes == (75714 + 5312 + 533) * MIB == 81559 * MIB
    assert (first.util_gpu_pct, first.util_mem_bandwidth_pct) == (93.0, 61.0)
    assert (first.host, first.pod, first.namespace) == ("gpu-node-7", "llama-70b-7d9f8c6b5-x2x9z", "llm-serving")
    assert first.uuid == "GPU-3c1f9a62-8e0b-7d41-a2e5-91b0c6d8f4a7"
    assert first.name == "NVIDIA H100 80GB HBM3"


def test_dcgm_lower_case_hostname_and_exported_pod_win():
    gpus = _load("dcgm_federate_exported_pod.txt").gpus
    assert [g.index for g in gpus] == ["0", "1", "2"]
    assert {g.host for g in gpus} == {"gpu-node-12"}
    assert [g.pod for g in gpus] == ["sglang-qwen-32b-0", "sglang-qwen-32b-0", "tgi-mistral-7b-5f6d7c8b9-qq2lm"]
    assert {g.namespace for g in gpus} == {"inference"}
    assert gpus[2].used_bytes == 18004 * MIB and gpus[2].util_gpu_pct == 34.0


def test_dcgm_mig_gives_one_device_per_instance():
    gpus = _load("dcgm_mig_a100.txt").gpus
    assert [(g.index, g.mig_profile) for g in gpus] == [("0:2", "3g.40gb"), ("0:9", "1g.10gb"), ("0:10", "1g.10gb")]
    assert gpus[0].total_bytes == 40192 * MIB and gpus[0].used_bytes == 35210 * MIB
    assert gpus[1].total_bytes == 9728 * MIB
    assert [g.pod for g in gpus] == ["qwen-14b-6c7d8e9f0-abcde", "embed-bge-m3-55b6c7d8e-fghij", "rerank-7f8e9d0c1-klmno"]
    assert all(g.util_gpu_pct is None for g in gpus)


def test_dcgm_compatibility_names_and_lower_case_uuid():
    gpus = _load("dcgm_compat_1x.txt").gpus
    assert [(g.index, g.used_bytes, g.total_bytes) for g in gpus] == [
        ("0", 21686 * MIB, (21686 + 1342) * MIB), ("1", 297 * MIB, (297 + 22731) * MIB)]
    assert gpus[0].uuid == "GPU-5e4d3c2b-1a09-4f8e-9d7c-6b5a4f3e2d1c" and gpus[0].util_gpu_pct == 97.0


def test_dcgm_without_free_series_leaves_total_unknown():
    (gpu,) = parse_metrics('DCGM_FI_DEV_FB_USED{gpu="3",Hostname="n1"} 100\n').gpus
    assert (gpu.index, gpu.used_bytes, gpu.total_bytes, gpu.host) == ("3", 100 * MIB, None, "n1")


# ------------------------------------------------------------------ odd and invalid


@pytest.mark.parametrize("name", ["", "\n\n", "# just a comment\n", "node_exporter_only.txt"])
def test_text_without_known_series_gives_all_readings_none(name):
    text = (DATA / name).read_text() if name.endswith(".txt") else name
    metrics = parse_metrics(text)
    assert metrics == ServerMetrics(source="metrics.txt")


def test_nan_samples_are_skipped_and_duplicates_keep_the_last():
    text = ('vllm:num_requests_waiting{engine="0",model_name="m"} NaN\n'
            'vllm:num_requests_waiting{engine="1",model_name="m"} 2\n'
            'vllm:num_requests_waiting{engine="1",model_name="m"} 5\n')
    assert parse_metrics(text).queue_depth == 5.0


def test_crlf_line_endings_and_a_byte_order_mark_are_accepted():
    text = (DATA / "vllm_v0_0.6.txt").read_text()
    assert parse_metrics("\ufeff" + text.replace("\n", "\r\n")) == parse_metrics(text)


def test_timestamps_on_sample_lines_are_accepted():
    assert parse_metrics("llm_queue_depth 18 1741637824123\n").queue_depth == 18.0


# Invalid exposition, with the line ParseError must name.
INVALID = [
    ('vllm:num_requests_waiting{engine="0" 3\n', 1),
    ("llm_queue_depth 18\nllm_request_rejected_total twelve\n", 2),
    ('llm_queue_depth 18\n\nfoo{bar="baz",} 1\nfoo{bar=baz} 2\n', 4),
    ('foo{bar="a",bar="b"} 2\n', 1),
    ("ok 1\n# TYPE gauge_x nonsense\ngauge_x 3\nother 4\n", 2),
    ("# TYPE x histogram\nx_bucket{le=\"1\"} 1\n# TYPE y bogus\n", 3),
    ('a{b="c"} 1 2 3 x\n', 1),
    ("9starts_with_digit 1\n", 1),
    ('m{l="unterminated} 1\n', 1),
]


def test_invalid_exposition_raises_parse_error_naming_the_line():
    for text, line in INVALID:
        with pytest.raises(ParseError) as caught:
            parse_metrics(text, source="pod-a/metrics.txt")
        assert (caught.value.source, caught.value.line) == ("pod-a/metrics.txt", line), text


def test_parse_error_message_is_clipped():
    with pytest.raises(ParseError) as caught:
        parse_metrics('m{l="' + "x" * 5000 + '" 1\n')
    assert len(words.message(caught.value)) <= 200


def test_server_metrics_round_trip_through_json():
    metrics = _load("vllm_v1_dp2.txt")
    assert from_jsonable(ServerMetrics, to_jsonable(metrics)) == metrics


def test_sglang_retractions_by_version():
    """runbooks.catalogs.engine_metrics: the counter from 0.5.7, a running-total gauge in
    0.4.10-0.5.2, and only a per-interval gauge (no total) in 0.5.2-0.5.6."""
    base = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 3\n"
    new = base + ("# TYPE sglang:num_retracted_requests counter\n"
                  "sglang:num_retracted_requests_total{model_name=\"m\"} 7\n"
                  "# TYPE sglang:max_total_num_tokens gauge\nsglang:max_total_num_tokens{model_name=\"m\"} 20480\n")
    old = base + "# TYPE sglang:total_retracted_reqs gauge\nsglang:total_retracted_reqs{model_name=\"m\"} 5\n"
    between = base + "# TYPE sglang:num_retracted_reqs gauge\nsglang:num_retracted_reqs{model_name=\"m\"} 2\n"
    m_new, m_old, m_between = (parse_metrics(t) for t in (new, old, between))
    assert (m_new.preemptions_total, m_new.kv_cache_capacity_tokens) == (7.0, 20480)
    assert (m_old.preemptions_total, m_old.kv_cache_capacity_tokens) == (5.0, None)
    assert m_between.preemptions_total is None
