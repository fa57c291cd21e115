"""An inference server's /metrics text, normalised into ServerMetrics.

Engines are told apart by metric names: `vllm:` (V0 or V1), `tgi_`, `sglang:`, else
"generic" (the runbook's `llm_*` names, DCGM exporter series, or nothing known at all).

How readings are combined, and why:
- queue and running requests are summed over vLLM `engine` labels and SGLang `dp_rank`
  labels: each data-parallel engine has its own queue.
- KV usage ratios are the max over engines: the fullest engine is the one that preempts.
- KV capacity is per engine (the min over engines), because a request lives in one
  engine's cache; `kv_cache_used_tokens` is likewise the max over engines.
- counters are summed over every label (engines, finish reasons).

>>> m = parse_metrics('tgi_queue_size 3\\ntgi_batch_current_size 12\\n')
>>> (m.engine, m.queue_depth, m.running_requests)
('tgi', 3.0, 12.0)
"""

from __future__ import annotations

import math
from typing import Any

from collectors.parsers.metrics_gpus import devices_from_samples
from collectors.parsers.metrics_samples import (
    Samples,
    combine,
    combine_by,
    label_values,
    natural_key,
    read_samples,
)
from runbooks.catalogs.engine_metrics import name, names, prefix
from runbooks.model.evidence import ServerMetrics

#: series only vLLM's V0 engine exports
_VLLM_V0_ONLY = (*names("vllm", "v0_swapped"), *names("vllm", "v0_cpu_kv_usage"))


def parse_metrics(text: str, source: str = "metrics.txt") -> ServerMetrics:
    """Normalise Prometheus exposition text from vLLM, TGI, SGLang, or a DCGM exporter.

    Text with no known series (or no text) gives a ServerMetrics whose readings are all None.
    A line the exposition parser rejects raises ParseError naming `source` and the line.

    >>> parse_metrics('llm_queue_depth 18\\nllm_request_rejected_total 12\\n').rejected_total
    12.0
    """
    samples = read_samples(text, source)
    present = list(samples.names())
    fields: dict[str, Any]
    if any(n.startswith(prefix("vllm")) for n in present):
        fields = {"engine": "vllm", **_vllm(samples)}
    elif any(n.startswith(prefix("sglang")) for n in present):
        fields = {"engine": "sglang", **_sglang(samples)}
    elif any(n.startswith(prefix("tgi")) for n in present):
        fields = {"engine": "tgi", **_tgi(samples)}
    else:
        fields = {"engine": "generic"}
    # The runbook's own names may sit beside an engine's (a gateway or sidecar exporting
    # them); they fill what the engine's names left empty.
    for key, value in _generic(samples).items():
        if fields.get(key) is None:
            fields[key] = value
    return ServerMetrics(source=source, gpus=devices_from_samples(samples), long_lines_skipped=samples.long_lines,
                         stopped_at_line=samples.stopped_at_line, **fields)


# ------------------------------------------------------------------------------- vLLM


def _vllm(s: Samples) -> dict[str, Any]:
    def v(fact: str) -> str:
        return name("vllm", fact)

    engines = label_values(s, prefix("vllm"), "engine")
    config, capacity = _vllm_cache_config(s)
    return {
        "flavor": _vllm_flavor(s, has_engine_label=bool(engines)),
        "model_name": _model_name(s, v("running"), prefix("vllm")),
        "engine_count": max(len(engines), 1),
        "queue_depth": s.sum(v("queue_waiting")),
        "running_requests": s.sum(v("running")),
        # kv_cache_usage_perc replaced gpu_cache_usage_perc in 0.9; both are fractions.
        "kv_cache_usage_ratio": _ratio(s.max(*names("vllm", "kv_usage"))),
        "kv_cache_capacity_tokens": capacity,
        "preemptions_total": combine(s.counter(v("preemptions_total"))),
        "requests_total": combine(s.counter(v("requests_finished"))),
        "failed_requests_total": _vllm_failed(s),
        "ttft_seconds": s.histogram(v("ttft")),
        "prompt_tokens": s.histogram(v("prompt_tokens")),
        "generation_tokens": s.histogram(v("generation_tokens")),
        "cache_config": config,
        "gpu_memory_utilization": _label_float(config.get("gpu_memory_utilization")),
        "block_size": _label_int(config.get("block_size")),
        "num_gpu_blocks": _label_int(config.get("num_gpu_blocks")),
    }


def _vllm_flavor(s: Samples, *, has_engine_label: bool) -> str | None:
    """V0 and V1 by the names and labels only one of them emits.

    Early V1 builds (0.8) without the `engine` label that still export gpu_cache_usage_perc
    are indistinguishable from V0 here and read as "vllm-v0".
    """
    if any(s.has(n) for n in _VLLM_V0_ONLY):
        return "vllm-v0"
    v1_name, v0_name = names("vllm", "kv_usage")
    if has_engine_label or s.has(v1_name):
        return "vllm-v1"
    if s.has(v0_name):
        return "vllm-v0"
    return None


def _vllm_cache_config(s: Samples) -> tuple[dict[str, str], int | None]:
    """Labels of the first engine's cache_config_info, and the smallest engine's capacity."""
    series = sorted(s.series(name("vllm", "cache_config")), key=lambda ls: natural_key(ls[0].get("engine", "")))
    if not series:
        return {}, None
    capacities = [c for c in (_capacity_tokens(labels) for labels, _ in series) if c is not None]
    return dict(series[0][0]), min(capacities) if capacities else None


def _capacity_tokens(labels: dict[str, str]) -> int | None:
    # Hybrid and sliding-window models make blocks x block size wrong; newer builds say
    # the token capacity outright.
    direct = _label_int(labels.get("kv_cache_size_tokens"))
    if direct is not None:
        return direct
    blocks, block_size = _label_int(labels.get("num_gpu_blocks")), _label_int(labels.get("block_size"))
    if blocks is None or block_size is None:
        return None
    return blocks * block_size


def _vllm_failed(s: Samples) -> float | None:
    """Requests that ended in an engine error, from the `error` finish reason (0.13+,
    `runbooks.catalogs.engine_metrics`); None (unknown, never 0) where the series is absent: V1
    before 0.13 and V0 export stop, length and abort only. Only an explicit error counts;
    "abort" is mostly clients hanging up.
    """
    family, _, matcher = names("vllm", "finished_error")[0].partition("{")
    label, _, value = matcher.rstrip("}").partition("=")
    errors = [(ls, v) for ls, v in s.counter(family) if ls.get(label) == value.strip('"')]
    return combine(errors)


# ----------------------------------------------------------------------------- SGLang


def _sglang(s: Samples) -> dict[str, Any]:
    def g(fact: str) -> str:
        return name("sglang", fact)

    ranks = label_values(s, prefix("sglang"), "dp_rank")
    failed = s.counter(g("disagg_bootstrap_failed")) + s.counter(g("disagg_transfer_failed"))
    return {
        "model_name": _model_name(s, g("running"), prefix("sglang")),
        "engine_count": max(len(ranks), 1),
        "queue_depth": combine_by(s.series(g("queue_waiting")), "dp_rank"),
        "running_requests": combine_by(s.series(g("running")), "dp_rank"),
        "kv_cache_usage_ratio": _ratio(s.max(g("kv_usage"))),
        # exported from 0.5.6 only (runbooks.catalogs.engine_metrics); before, None: the log says it
        "kv_cache_capacity_tokens": _as_int(combine_by(s.first(*names("sglang", "kv_capacity_tokens")), "dp_rank", min)),
        "kv_cache_used_tokens": combine_by(s.series(g("kv_used_tokens")), "dp_rank", max),
        "preemptions_total": _sglang_retractions(s),
        "requests_total": combine(s.counter(g("requests_finished"))),
        "failed_requests_total": combine(failed),
        "ttft_seconds": s.histogram(g("ttft")),
        "prompt_tokens": s.histogram(g("prompt_tokens")),
        "generation_tokens": s.histogram(g("generation_tokens")),
    }


def _sglang_retractions(s: Samples) -> float | None:
    """Retracted requests since start: the counter (0.5.7+), else the gauge 0.4.10-0.5.2 kept
    the running total in. The per-interval gauge of 0.5.2+ (`num_retracted_reqs`) is no total."""
    counter, *older = names("sglang", "retractions_total")
    return combine(s.counter(counter) or s.first(*older))


# -------------------------------------------------------------------------------- TGI


def _tgi(s: Samples) -> dict[str, Any]:
    def t(fact: str) -> str:
        return name("tgi", fact)

    failures = s.counter(t("request_failure"))
    overloaded = [(ls, v) for ls, v in failures if ls.get("err") == "overloaded"]
    failed, rejected = combine(failures), combine(overloaded)
    # TGI's exporter prints a counter only once it has been incremented, so next to a
    # request count, a missing failure series means none so far.
    if s.counter(t("requests_finished")):
        failed = 0.0 if failed is None else failed
        rejected = 0.0 if rejected is None else rejected
    capacity = _as_int(s.max(t("kv_capacity_tokens")))
    # the running batch's reservation (every request's prompt + max_new_tokens), which the
    # scheduler admits against the KV token budget (backends/v3/src/backend.rs:167-173@v3.3.7)
    reserved = s.max(t("kv_batch_tokens"))
    return {
        "queue_depth": s.sum(t("queue_waiting")),
        "running_requests": s.sum(t("running")),
        "kv_cache_capacity_tokens": capacity,
        "kv_cache_used_tokens": reserved,
        "kv_cache_usage_ratio": (min(1.0, reserved / capacity) if reserved is not None and math.isfinite(reserved)
                                 and reserved >= 0 and capacity and capacity > 0 else None),
        "requests_total": combine(s.counter(t("requests_finished"))),
        "failed_requests_total": failed,
        "rejected_total": rejected,
        # TGI has no time-to-first-token histogram.
        "prompt_tokens": s.histogram(t("prompt_tokens")),
        "generation_tokens": s.histogram(t("generation_tokens")),
    }


# ---------------------------------------------------------------------------- generic


def _generic(s: Samples) -> dict[str, Any]:
    return {
        "queue_depth": s.sum("llm_queue_depth"),
        "rejected_total": combine(s.counter("llm_request_rejected")),
    }


# ---------------------------------------------------------------------------- helpers


def _model_name(s: Samples, preferred: str, namespace: str) -> str | None:
    for labels, _ in s.series(preferred):
        if labels.get("model_name"):
            return labels["model_name"]
    labelled = label_values(s, namespace, "model_name")
    return labelled[0] if labelled else None


def _ratio(value: float | None) -> float | None:
    """A usage gauge as a 0..1 fraction.

    The engines export fractions despite `_perc` in vLLM's names; a value above 1 can only
    be a percentage from a re-exporting layer, so it is divided by 100 (above 100: nonsense).
    """
    if value is None or value < 0:
        return None
    if value > 1.0:
        return value / 100.0 if value <= 100.0 else None
    return value


def _label_int(text: str | None) -> int | None:
    number = _label_float(text)
    return _as_int(number)


def _label_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        number = float(text)
    except ValueError:
        return None  # "None", "auto" and the like
    return number if math.isfinite(number) else None


def _as_int(number: float | None) -> int | None:
    if number is None or not math.isfinite(number) or number != int(number):
        return None
    return int(number)
