"""A Deployment's total of its pods' /metrics readings.

Each pod is its own server with its own queue and KV cache, so:
- queues, running requests, engine counts and counters add up over pods;
- the KV usage ratio is the fullest pod's (the one that preempts first), and the used tokens too;
- the KV capacity is the smallest pod's: a request lives in one pod's cache;
- histograms add up bucket by bucket (bounds every pod shares; a pod with other bounds is
  counted at its nearest bound below, never above).

>>> from runbooks.model.evidence import ServerMetrics
>>> total = sum_server_metrics([ServerMetrics("a", queue_depth=3.0, kv_cache_usage_ratio=0.5),
...                             ServerMetrics("b", queue_depth=4.0, kv_cache_usage_ratio=0.9)])
>>> total.queue_depth, total.kv_cache_usage_ratio
(7.0, 0.9)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from runbooks.model.evidence import ServerMetrics
from runbooks.model.lengths import Histogram

T = TypeVar("T", int, float)

_SUMMED = ("queue_depth", "running_requests", "preemptions_total", "rejected_total", "failed_requests_total",
           "requests_total")
_HISTOGRAMS = ("ttft_seconds", "prompt_tokens", "generation_tokens")


def sum_server_metrics(per_pod: Sequence[ServerMetrics], source: str = "metrics-total") -> ServerMetrics:
    """The Deployment's readings from each pod's; empty input gives readings that are all None."""
    pods = list(per_pod)
    if not pods:
        return ServerMetrics(source=source)
    engines = Counter(m.engine for m in pods if m.engine != "generic")
    fields: dict[str, object] = {name: _combine([getattr(m, name) for m in pods], sum) for name in _SUMMED}
    # a pod that cannot count failed requests (vLLM before 0.13 has no error finish): the
    # others' errors are still at least that many, but their zero is no "no errors" for it
    if not fields["failed_requests_total"] and any(m.failed_requests_total is None for m in pods):
        fields["failed_requests_total"] = None
    for name in _HISTOGRAMS:
        fields[name] = merge_histograms([getattr(m, name) for m in pods])
    return ServerMetrics(
        source=source,
        engine=engines.most_common(1)[0][0] if engines else "generic",
        flavor=_first([m.flavor for m in pods]),
        model_name=_first([m.model_name for m in pods]),
        engine_count=sum(max(m.engine_count, 1) for m in pods),
        kv_cache_usage_ratio=_combine([m.kv_cache_usage_ratio for m in pods], max),
        kv_cache_capacity_tokens=_combine([m.kv_cache_capacity_tokens for m in pods], min),
        kv_cache_used_tokens=_combine([m.kv_cache_used_tokens for m in pods], max),
        cache_config=next((dict(m.cache_config) for m in pods if m.cache_config), {}),
        gpu_memory_utilization=_first([m.gpu_memory_utilization for m in pods]),
        block_size=_first([m.block_size for m in pods]),
        num_gpu_blocks=_combine([m.num_gpu_blocks for m in pods], min),
        gpus=tuple(gpu for m in pods for gpu in m.gpus),
        **fields,  # type: ignore[arg-type]
    )


def _combine(values: list[T | None], how: Callable[[list[T]], T]) -> T | None:
    present = [v for v in values if v is not None]
    return how(present) if present else None


def _first(values: list[T | str | None]) -> T | str | None:
    return next((v for v in values if v is not None), None)


def merge_histograms(histograms: Sequence[Histogram | None]) -> Histogram | None:
    """Add cumulative histograms bucket by bucket over the union of their bounds.

    >>> a = Histogram(((1.0, 2.0), (math.inf, 3.0)), count=3.0)
    >>> merge_histograms([a, a]).buckets
    ((1.0, 4.0), (inf, 6.0))
    """
    present = [h for h in histograms if h is not None and h.buckets]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    bounds = sorted({bound for h in present for bound, _ in h.buckets})
    buckets = tuple((bound, sum(_cumulative_at(h, bound) for h in present)) for bound in bounds)
    sums = [h.sum for h in present]
    return Histogram(
        buckets=buckets,
        count=sum(h.count for h in present),
        sum=math.fsum(s for s in sums if s is not None) if all(s is not None for s in sums) else None,
    )


def _cumulative_at(histogram: Histogram, bound: float) -> float:
    """The cumulative count at `bound`: the count at the largest own bound not above it."""
    below = 0.0
    for own, cumulative in histogram.buckets:
        if own > bound:
            break
        below = cumulative
    return below
