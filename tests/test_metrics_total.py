"""A Deployment's /metrics total from its pods' readings."""

from __future__ import annotations

import math

from collectors.parsers.metrics import parse_metrics
from collectors.parsers.metrics_total import merge_histograms, sum_server_metrics
from runbooks.model.evidence import GpuDevice, ServerMetrics
from runbooks.model.lengths import Histogram


def test_queues_and_counters_add_up_usage_is_the_fullest_pod_capacity_the_smallest():
    a = ServerMetrics("a", engine="vllm", queue_depth=18.0, running_requests=124.0, kv_cache_usage_ratio=0.98,
                      kv_cache_capacity_tokens=1_108_880, preemptions_total=57.0, requests_total=100.0,
                      num_gpu_blocks=69305, gpus=(GpuDevice("0", host="n1"),))
    b = ServerMetrics("b", engine="vllm", queue_depth=6.0, running_requests=40.0, kv_cache_usage_ratio=0.41,
                      kv_cache_capacity_tokens=900_000, preemptions_total=3.0, failed_requests_total=2.0,
                      num_gpu_blocks=56250, gpus=(GpuDevice("0", host="n2"),))
    total = sum_server_metrics([a, b])
    assert (total.queue_depth, total.running_requests) == (24.0, 164.0)
    assert total.kv_cache_usage_ratio == 0.98
    assert total.kv_cache_capacity_tokens == 900_000 and total.num_gpu_blocks == 56250
    assert total.preemptions_total == 60.0
    assert total.requests_total == 100.0 and total.failed_requests_total == 2.0  # one pod without: still a sum
    assert total.engine == "vllm" and total.engine_count == 2 and total.source == "metrics-total"
    assert [g.host for g in total.gpus] == ["n1", "n2"]


def test_a_zero_failed_count_beside_a_pod_that_cannot_count_is_unknown():
    """vLLM before 0.13 has no error finish reason: beside it, another pod's 0 is no "no errors"."""
    new = ServerMetrics("a", engine="vllm", failed_requests_total=0.0)
    old = ServerMetrics("b", engine="vllm", failed_requests_total=None)
    assert sum_server_metrics([new, old]).failed_requests_total is None
    assert sum_server_metrics([new, new]).failed_requests_total == 0.0
    assert sum_server_metrics([ServerMetrics("c", engine="vllm", failed_requests_total=3.0), old]) \
        .failed_requests_total == 3.0


def test_readings_no_pod_has_stay_none_and_no_pods_give_an_empty_total():
    total = sum_server_metrics([ServerMetrics("a"), ServerMetrics("b")])
    assert total.queue_depth is None and total.kv_cache_usage_ratio is None and total.ttft_seconds is None
    assert sum_server_metrics([]) == ServerMetrics("metrics-total")


def test_data_parallel_engines_inside_pods_are_counted():
    total = sum_server_metrics([ServerMetrics("a", engine="vllm", engine_count=2), ServerMetrics("b", engine="vllm")])
    assert total.engine_count == 3


def test_histograms_with_the_same_bounds_add_bucket_by_bucket():
    a = Histogram(((0.1, 2.0), (1.0, 5.0), (math.inf, 6.0)), count=6.0, sum=3.0)
    b = Histogram(((0.1, 1.0), (1.0, 1.0), (math.inf, 4.0)), count=4.0, sum=9.0)
    merged = merge_histograms([a, None, b])
    assert merged == Histogram(((0.1, 3.0), (1.0, 6.0), (math.inf, 10.0)), count=10.0, sum=12.0)


def test_histograms_with_other_bounds_count_at_the_nearest_bound_below():
    a = Histogram(((1.0, 2.0), (math.inf, 4.0)), count=4.0)
    b = Histogram(((0.5, 1.0), (2.0, 3.0), (math.inf, 3.0)), count=3.0)
    merged = merge_histograms([a, b])
    assert merged.buckets == ((0.5, 1.0), (1.0, 3.0), (2.0, 5.0), (math.inf, 7.0))
    assert merged.count == 7.0 and merged.sum is None
    assert all(x[1] <= y[1] for x, y in zip(merged.buckets, merged.buckets[1:], strict=False))


def test_total_of_two_scraped_pods(tmp_path):
    text = "vllm:num_requests_waiting 3\nvllm:kv_cache_usage_perc 0.5\n"
    other = "vllm:num_requests_waiting 4\nvllm:kv_cache_usage_perc 0.75\n"
    total = sum_server_metrics([parse_metrics(text, "metrics-a.txt"), parse_metrics(other, "metrics-b.txt")])
    assert (total.queue_depth, total.kv_cache_usage_ratio, total.flavor) == (7.0, 0.75, "vllm-v1")
