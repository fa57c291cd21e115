"""The series each engine exports that the runbook's alerts read (reference/formats.md).

The one place the engines' and exporters' series are named: the alerts, the dashboards and
gpumem's own live queries (collectors/prometheus/promql.py) are built from these tables, and
the names that changed across versions come from `runbooks.catalogs.engine_metrics`. None where
the engine exports nothing to alert on, with the reason in `missing`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runbooks.catalogs.engine_metrics import first_version, name, names, prefix, samples

ENGINES = ("vllm", "sglang", "tgi")


def _counter(name: str) -> str:
    """A counter's samples as Prometheus stores them (`_total` added to the family name)."""
    return name if name.endswith("_total") else name + "_total"


@dataclass(frozen=True)
class EngineSeries:
    """What one engine exports for the alerts; metric names are regexes of one or more names."""

    engine: str
    #: what every series name of the engine starts with ("vllm:", "tgi_")
    prefix: str
    #: KV-cache usage, a fraction 0..1 (None: computed, see `kv_ratio`)
    kv_usage: str | None
    #: TGI: (current batch tokens, KV token budget), divided per pod
    kv_ratio: tuple[str, str] | None
    queue: str
    #: labels that tell apart copies of one queue (SGLang's TP ranks all report it); max over
    #: the other labels within these before adding up
    queue_distinct: tuple[str, ...] | None
    #: a counter of preempted (retracted) requests, and an older per-interval gauge of them
    preemptions: str | None
    preemptions_gauge: str | None
    ttft_buckets: str | None
    prompt_buckets: str
    #: generated (output) tokens per request, a histogram's buckets
    generation_buckets: str
    #: the label that names the served model (None: the engine labels no model)
    model_label: str | None
    #: a counter of requests the engine refused or ended without an answer, its extra matchers,
    #: and the label that says why (None: one reason only)
    rejects: str
    rejects_matchers: tuple[str, ...]
    rejects_by: str | None
    #: series that say a pod runs this engine (always exported once it serves)
    presence: str
    #: the engine claims its memory fraction at start-up: GPU memory near full says nothing
    preallocates: bool
    #: rule id -> why the engine has no such rule (a catalog key under rules_cli.missing)
    missing: dict[str, str] = field(default_factory=dict)
    #: the first version whose rejects series counts engine errors (vLLM's "error" finish
    #: reason, `runbooks.catalogs.engine_metrics`); before it a flat line says nothing about
    #: errors (unknown, not none). None: every version's series counts them
    errors_counted_since: tuple[int, int, int] | None = None
    #: rule id -> the versions it can fire on, where older ones do not export what it reads (a
    #: catalog key under rules_cli.version; the facts in runbooks.catalogs.engine_metrics)
    version_limits: dict[str, str] = field(default_factory=dict)


SERIES: dict[str, EngineSeries] = {
    "vllm": EngineSeries(
        engine="vllm",
        prefix=prefix("vllm"),
        # V1 (0.9+) and V0 / early V1; both exported by 0.9-0.11, with the same value
        kv_usage=samples("vllm", "kv_usage"),
        kv_ratio=None,
        queue=samples("vllm", "queue_waiting"),
        queue_distinct=None,
        preemptions=samples("vllm", "preemptions_total"),
        preemptions_gauge=None,
        ttft_buckets=samples("vllm", "ttft"),
        prompt_buckets=samples("vllm", "prompt_tokens"),
        generation_buckets=samples("vllm", "generation_tokens"),
        model_label="model_name",
        # vLLM queues what it cannot hold rather than refusing it: a request ends aborted (the
        # client or a gateway gave up) or, from 0.13, in an engine error
        rejects=samples("vllm", "requests_finished"),
        rejects_matchers=('finished_reason=~"abort|error"',),
        rejects_by="finished_reason",
        presence=samples("vllm", "running", "queue_waiting", "cache_config"),
        preallocates=True,
        errors_counted_since=first_version("vllm", "finished_error"),
    ),
    "sglang": EngineSeries(
        engine="sglang",
        prefix=prefix("sglang"),
        kv_usage=samples("sglang", "kv_usage"),
        kv_ratio=None,
        queue=samples("sglang", "queue_waiting"),
        # with --enable-metrics-for-all-schedulers every TP rank reports its DP rank's queue
        queue_distinct=("dp_rank",),
        preemptions=_counter(names("sglang", "retractions_total")[0]),
        preemptions_gauge=names("sglang", "retractions_last_interval")[0],
        ttft_buckets=samples("sglang", "ttft"),
        # only with --collect-tokens-histogram
        prompt_buckets=samples("sglang", "prompt_tokens"),
        generation_buckets=samples("sglang", "generation_tokens"),
        model_label="model_name",
        rejects=samples("sglang", "aborted"),
        rejects_matchers=(),
        rejects_by=None,
        presence=samples("sglang", "running", "queue_waiting", "kv_usage"),
        preallocates=True,
        # the counter from 0.5.7, the per-interval gauge from 0.5.2; 0.4.10-0.5.1 only a
        # running-total gauge, before 0.4.10 nothing
        version_limits={"preemptions_rising": "sglang_retractions_from_0_5_2"},
    ),
    "tgi": EngineSeries(
        engine="tgi",
        prefix=prefix("tgi"),
        kv_usage=None,
        # no usage gauge: the current batch's token reservation against the KV token budget
        kv_ratio=(name("tgi", "kv_batch_tokens"), name("tgi", "kv_capacity_tokens")),
        queue=samples("tgi", "queue_waiting"),
        queue_distinct=None,
        preemptions=None,
        preemptions_gauge=None,
        ttft_buckets=None,
        prompt_buckets=samples("tgi", "prompt_tokens"),
        generation_buckets=samples("tgi", "generation_tokens"),
        model_label=None,
        # counters without `_total` (metrics-exporter-prometheus); err="overloaded" is the
        # queue refusing, "validation" a request over the length limits
        rejects=samples("tgi", "request_failure"),
        rejects_matchers=(),
        rejects_by="err",
        presence=samples("tgi", "queue_waiting", "running", "kv_capacity_tokens", "requests_finished"),
        preallocates=True,
        missing={"preemptions_rising": "tgi_no_preemption", "ttft_p99_high": "tgi_no_ttft"},
        # tgi_batch_max_total_tokens is set by the v3 backend from 2.3.1 only
        version_limits={"kv_cache_high": "tgi_kv_budget_from_2_3_1"},
    ),
}


@dataclass(frozen=True)
class Exporters:
    """The series of the exporters beside the engines, whatever the engine: DCGM (MiB, %, degrees
    C, W; with the 1.x `-o` names), gpumem's NVML agent (bytes, ratios 0..1; its pods are the
    agent's, matched to the workload's by GPU UUID), kube-state-metrics."""

    fb_used: str = "DCGM_FI_DEV_FB_USED|dcgm_fb_used"
    fb_free: str = "DCGM_FI_DEV_FB_FREE|dcgm_fb_free"
    #: in the exporter's default counters only since 4.3.1-4.4.0
    fb_reserved: str = "DCGM_FI_DEV_FB_RESERVED"
    gpu_util: str = "DCGM_FI_DEV_GPU_UTIL|dcgm_gpu_utilization"
    gpu_temp: str = "DCGM_FI_DEV_GPU_TEMP|dcgm_gpu_temp"
    power: str = "DCGM_FI_DEV_POWER_USAGE|dcgm_power_usage"
    agent_used: str = "gpumem_gpu_memory_used_bytes"
    agent_total: str = "gpumem_gpu_memory_total_bytes"
    agent_util: str = "gpumem_gpu_utilization_ratio"
    restarts: str = "kube_pod_container_status_restarts_total"
    terminated_reason: str = "kube_pod_container_status_last_terminated_reason"
    terminated_at: str = "kube_pod_container_status_last_terminated_timestamp"
    resource_requests: str = "kube_pod_container_resource_requests"
    pod_owner: str = "kube_pod_owner"
    deployment_spec_replicas: str = "kube_deployment_spec_replicas"
    deployment_available: str = "kube_deployment_status_replicas_available"
    statefulset_ready: str = "kube_statefulset_status_replicas_ready"
    hpa_desired: str = "kube_horizontalpodautoscaler_status_desired_replicas"


EXPORTERS = Exporters()


def presence(engines: tuple[str, ...]) -> str:
    """A name regex of the series that mark a pod as running one of `engines`."""
    return "|".join(SERIES[e].presence for e in engines)


def preallocating() -> tuple[str, ...]:
    """The engines whose GPU memory is full by design once they start."""
    return tuple(e for e in ENGINES if SERIES[e].preallocates)
