"""The numbers every check needs, derived once from the evidence, each with its source.

A reading can come from several places (KV usage from /metrics or from the log's stats lines;
KV capacity from the engine's own start-up line, its cache_config_info, or our budget).
`TriageContext` picks the most direct one and remembers where it came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from runbooks.catalogs.gpus import UnknownGpu, find_gpu, pinned_gpu_of_labels
from runbooks.catalogs.models import UnknownModel, find_model
from runbooks.model.budget import BudgetInputs
from runbooks.model.evidence import Evidence, GpuDevice, ModelSpec
from runbooks.model.units import GIB
from runbooks.sizing.budget import Budget, compute_budget, inputs_from_config

T = TypeVar("T")


@dataclass(frozen=True)
class Reading(Generic[T]):
    value: T
    source: str


@dataclass(frozen=True)
class TriageContext:
    evidence: Evidence
    engine: str | None
    model: ModelSpec | None
    gpu_name: str | None
    gpu_total_gib: Reading[float] | None
    gpu_used_gib: Reading[float] | None
    gpu_util_pct: Reading[float] | None
    budget: Budget | None
    #: the launch the budget was computed for (None when there is no budget)
    budget_inputs: BudgetInputs | None
    kv_capacity_tokens: Reading[int] | None
    kv_usage_ratio: Reading[float] | None
    queue_depth: Reading[float] | None
    running: Reading[float] | None
    rejected: Reading[float] | None
    preemptions: Reading[float] | None
    gpus_requested: int | None
    #: GPU memory another process held when this engine started (GiB), when the evidence says
    memory_held_elsewhere_gib: Reading[float] | None = None
    #: True when that figure comes from a CUDA OOM's numbers, not from the start-up lines
    held_elsewhere_at_oom: bool = False

    @property
    def config(self):
        return self.evidence.server_config


def _server_devices(ev: Evidence) -> tuple[tuple[GpuDevice, ...], str] | None:
    if ev.gpus and ev.gpus.devices:
        return ev.gpus.devices, ev.gpus.source
    if ev.server_metrics and ev.server_metrics.gpus:
        return ev.server_metrics.gpus, ev.server_metrics.source
    return None


def _busiest(devices: tuple[GpuDevice, ...]) -> GpuDevice:
    """The device closest to full: an OOM happens on the fullest card, not the average one."""
    return max(devices, key=lambda d: (d.used_ratio or 0.0, d.used_bytes or 0))


def _model(ev: Evidence) -> ModelSpec | None:
    if ev.model is not None:
        return ev.model
    cfg = ev.server_config
    for name in (cfg.model, cfg.served_model_name) if cfg else ():
        if not name:
            continue
        try:
            return find_model(name)
        except UnknownModel:
            continue
    if ev.server_metrics and ev.server_metrics.model_name:
        try:
            return find_model(ev.server_metrics.model_name)
        except UnknownModel:
            return None
    return None


def _gpu_name(ev: Evidence) -> str | None:
    """The GPU the server runs on; a MIG slice when the device or the pod's request says so."""
    requested = ev.workload.gpu.mig_profile if ev.workload and ev.workload.gpu else None
    found = _server_devices(ev)
    if found:
        dev = _busiest(found[0])
        if dev.name:
            profile = dev.mig_profile or requested
            return f"{dev.name} MIG {profile}" if profile else dev.name
    # no device reading: the card the workload's node selector pins, where it pins exactly one
    # (a hard scheduling constraint on the label GPU feature discovery sets from the card)
    pinned = pinned_gpu_of_labels(ev.workload.node_selector) if ev.workload else None
    if pinned is not None:
        return f"{pinned.name} MIG {requested}" if requested else pinned.name
    return None


def _gpu_total(ev: Evidence, gpu_name: str | None) -> Reading[float] | None:
    found = _server_devices(ev)
    if found:
        dev = _busiest(found[0])
        if dev.total_bytes:
            return Reading(dev.total_bytes / GIB, found[1])
    if gpu_name:
        try:
            return Reading(find_gpu(gpu_name).total_gib, "catalog")
        except UnknownGpu:
            pass
    return _gpu_total_from_log(ev)


def _gpu_total_from_log(ev: Evidence) -> Reading[float] | None:
    """The card's size as the engine or torch printed it: the start-up figures, the CUDA OOM's
    "total capacity", or SGLang's free memory after loading plus the weights it loaded."""
    logs = ev.logs
    if logs is None:
        return None
    startup = logs.startup
    if startup is not None and startup.total_gpu_gib:
        return Reading(startup.total_gpu_gib, logs.source)
    if logs.oom is not None and logs.oom.total_bytes:
        return Reading(logs.oom.total_bytes / GIB, logs.source)
    if startup is not None and startup.available_after_load_gib is not None and startup.weights_gib:
        return Reading(startup.available_after_load_gib + startup.weights_gib, logs.source)
    return None


def _held_elsewhere(ev: Evidence, total: Reading[float] | None) -> Reading[float] | None:
    """Memory another process held when the engine started: vLLM's "Free memory on device"
    below the card, or memory already in use before this engine loaded anything beyond what
    its own fraction allows (vLLM 0.6.4 "initial_memory_usage")."""
    logs = ev.logs
    startup = logs.startup if logs else None
    oom_held = _held_elsewhere_at_oom(ev)
    if startup is None or total is None:
        return oom_held
    if startup.free_at_start_gib is not None and logs.count("free_below_utilization"):
        held = total.value - startup.free_at_start_gib
        return Reading(round(held, 2), logs.source) if held > 0.05 * total.value else None
    cfg = ev.server_config
    fraction = startup.gpu_memory_utilization or (cfg.memory_fraction if cfg and cfg.memory_fraction_kind == "total"
                                                  else None)
    if startup.initial_usage_gib is not None and fraction is not None:
        own = fraction * total.value
        if startup.initial_usage_gib > own:
            # exact when the engine printed its own weights; else a lower bound: what it may hold
            held = (startup.initial_usage_gib - startup.weights_gib - (startup.non_torch_gib or 0.0)
                    if startup.weights_gib else startup.initial_usage_gib - own)
            return Reading(round(held, 2), logs.source)
    return oom_held


#: memory outside this engine's allocations, as a share of the card, that says another
#: process (or an allocator outside PyTorch's accounting) held it
HELD_ELSEWHERE_AT_OOM_RATIO = 0.5


def _held_elsewhere_at_oom(ev: Evidence) -> Reading[float] | None:
    """Memory the OOM's own figures put outside the failing process.

    torch >= 2.1 names the other processes beside "this process": their sum is held
    elsewhere. Without that line, the card's capacity minus what was free, what PyTorch had
    allocated and what it had reserved is memory this process's allocator does not hold; above
    half the card that is not the engine's CUDA context but another holder. One "Process N"
    alone is the failing process itself as a container numbers it, not another one.
    """
    oom = ev.logs.oom if ev.logs else None
    if oom is None or not oom.total_bytes:
        return None
    source = ev.logs.source
    if oom.this_process_bytes is not None:
        other = oom.other_processes_bytes or 0
        return Reading(round(other / GIB, 2), source) if other >= 0.05 * oom.total_bytes else None
    if oom.in_use_bytes is not None or oom.free_bytes is None or oom.allocated_bytes is None:
        return None
    outside = oom.total_bytes - oom.free_bytes - oom.allocated_bytes - (oom.reserved_unallocated_bytes or 0)
    if outside >= HELD_ELSEWHERE_AT_OOM_RATIO * oom.total_bytes:
        return Reading(round(outside / GIB, 2), source)
    return None


def _usable_gib(gpu_name: str | None, total: Reading[float] | None) -> float | None:
    """Memory the engines can use: nvidia-smi's total counts memory the driver keeps back
    (an H100 shows 81559 MiB, CUDA reports 79.19 GiB), so the catalog's figure wins."""
    if gpu_name:
        try:
            return find_gpu(gpu_name).total_gib
        except UnknownGpu:
            pass
    return total.value if total is not None else None


def build_context(ev: Evidence) -> TriageContext:
    """Derive the shared readings. Pure; never raises on missing evidence."""
    m = ev.server_metrics
    logs = ev.logs
    cfg = ev.server_config
    engine = (cfg.engine if cfg else None) or (m.engine if m and m.engine != "generic" else None) or (
        logs.engine if logs else None
    )
    model = _model(ev)
    gpu_name = _gpu_name(ev)
    total = _gpu_total(ev, gpu_name)

    used = util = None
    found = _server_devices(ev)
    if found:
        dev = _busiest(found[0])
        if dev.used_bytes is not None:
            used = Reading(dev.used_bytes / GIB, found[1])
        if dev.util_gpu_pct is not None:
            util = Reading(dev.util_gpu_pct, found[1])

    budget = inputs = None
    usable = _usable_gib(gpu_name, total)
    if cfg is not None and model is not None and usable is not None:
        if cfg.engine is None:
            cfg = _with_engine(cfg, engine or "vllm")
        inputs = inputs_from_config(cfg, usable, gpu_name=gpu_name)
        budget = compute_budget(model, inputs)

    kv_cap: Reading[int] | None = None
    if m and m.kv_cache_capacity_tokens:
        kv_cap = Reading(m.kv_cache_capacity_tokens, m.source)
    elif logs and logs.startup and logs.startup.kv_cache_tokens:
        kv_cap = Reading(logs.startup.kv_cache_tokens, logs.source)
    elif budget is not None and budget.kv_cache_tokens:
        kv_cap = Reading(int(budget.kv_cache_tokens), "budget")

    kv_use: Reading[float] | None = None
    if m and m.kv_cache_usage_ratio is not None:
        kv_use = Reading(m.kv_cache_usage_ratio, m.source)
    elif logs and logs.stats_peak and logs.stats_peak.kv_cache_usage_ratio is not None:
        kv_use = Reading(logs.stats_peak.kv_cache_usage_ratio, logs.source)
    elif (m and m.kv_cache_used_tokens is not None and math.isfinite(m.kv_cache_used_tokens)
          and m.kv_cache_used_tokens >= 0 and kv_cap is not None and kv_cap.source != "budget" and kv_cap.value > 0):
        # the tokens in use on the page against the capacity the engine printed at start-up
        # (TGI before 2.3.1 exports no capacity gauge: its router's log line says it)
        kv_use = Reading(min(1.0, m.kv_cache_used_tokens / kv_cap.value), f"{m.source}, {kv_cap.source}")

    def _metric(name: str, log_name: str | None = None) -> Reading[float] | None:
        if m and getattr(m, name) is not None:
            return Reading(getattr(m, name), m.source)
        if log_name and logs and logs.stats_peak and getattr(logs.stats_peak, log_name) is not None:
            return Reading(getattr(logs.stats_peak, log_name), logs.source)
        return None

    preempt = _metric("preemptions_total")
    if preempt is None and logs is not None:
        n = logs.count("vllm_preemption") + logs.count("sglang_retraction")
        if n:
            preempt = Reading(float(n), logs.source)

    gpus_requested = None
    if ev.workload and ev.workload.gpu:
        gpus_requested = ev.workload.gpu.count
    held = _held_elsewhere(ev, total)

    return TriageContext(
        evidence=ev,
        engine=engine,
        model=model,
        gpu_name=gpu_name,
        gpu_total_gib=total,
        gpu_used_gib=used,
        gpu_util_pct=util,
        budget=budget,
        budget_inputs=inputs,
        kv_capacity_tokens=kv_cap,
        kv_usage_ratio=kv_use,
        queue_depth=_metric("queue_depth", "waiting"),
        running=_metric("running_requests", "running"),
        rejected=_metric("rejected_total"),
        preemptions=preempt,
        gpus_requested=gpus_requested,
        memory_held_elsewhere_gib=held,
        held_elsewhere_at_oom=held is not None and held == _held_elsewhere_at_oom(ev),
    )


def _with_engine(cfg, engine: str):
    return replace(cfg, engine=engine)
