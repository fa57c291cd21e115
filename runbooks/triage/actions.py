"""Recommended actions: the runbook's action tables, with values computed from the evidence.

Tier "now" is what on-call may do at night without a load test (lower concurrency or context,
add margin, a temporary pool split, fix probes); "escalate" needs owners and load tests
(quantization, TP, more GPUs).
"""

from __future__ import annotations

import math

from runbooks.catalogs import thresholds as T
from runbooks.model.report import Action, Finding
from runbooks.triage.context import TriageContext

_ORDER = (
    "set_safe_flags", "lower_max_num_seqs", "cap_max_model_len", "lower_memory_fraction", "scale_out",
    "split_pools", "fix_parallel_layout", "add_startup_probe", "raise_memory_limit", "isolate_gpu",
    "hpa_on_queue_depth", "bigger_mig_profile", "lower_max_surge", "fix_launch", "add_shm",
    "quantize_weights", "bigger_gpu_or_tp", "review_tp",
)


def _round_len(tokens: float) -> int:
    """Round a context length up to a multiple of 1024 (what people actually set)."""
    return max(1024, int(math.ceil(tokens / 1024.0)) * 1024)


def safe_flags(ctx: TriageContext) -> dict[str, float | int]:
    """The runbook's stop-the-bleeding template, sized to this service instead of fixed.

    max-model-len covers the p99 request (input + output) instead of a blanket 4096;
    max-num-seqs is what the KV pool holds at that length with 10% margin; the memory fraction
    steps back from the edge. Falls back to the runbook's template where evidence is missing.
    """
    cfg = ctx.config
    prof = ctx.evidence.requests
    out: dict[str, float | int] = {}
    cur_len = cfg.max_model_len if cfg else None
    if prof is not None and prof.p99_input_tokens is not None:
        want = _round_len(prof.p99_input_tokens + (prof.p99_output_tokens or 0))
        length = min(want, cur_len) if cur_len else want
    else:
        length = min(T.SAFE_MAX_MODEL_LEN, cur_len) if cur_len else T.SAFE_MAX_MODEL_LEN
    out["max_model_len"] = length
    cap = ctx.kv_capacity_tokens.value if ctx.kv_capacity_tokens else None
    new_fraction = None
    if cfg and cfg.memory_fraction_kind == "total":
        new_fraction = min(cfg.memory_fraction or 0.9, T.SAFE_VLLM_UTIL)
    if cap and new_fraction is not None and cfg.memory_fraction and ctx.gpu_total_gib is not None:
        # stepping the fraction back shrinks the cache by exactly that share of the card
        kv_gib = _kv_gib(ctx)
        if kv_gib:
            shrink = (cfg.memory_fraction - new_fraction) * ctx.gpu_total_gib.value
            cap = cap * max(0.0, kv_gib - shrink) / kv_gib
    per_request = None
    if prof is not None and prof.p95_input_tokens is not None:
        per_request = prof.p95_input_tokens + (prof.p95_output_tokens or 0)
    if cap:
        seqs = int(cap * T.SAFE_KV_TARGET_RATIO // (per_request or length))
        seqs = max(1, seqs)
    else:
        seqs = T.SAFE_MAX_NUM_SEQS
    if cfg and cfg.max_num_seqs:
        seqs = min(seqs, cfg.max_num_seqs)
    out["max_num_seqs"] = seqs
    if new_fraction is not None:
        out["gpu_memory_utilization"] = new_fraction
    elif cfg and cfg.memory_fraction_kind == "free_static":
        out["mem_fraction_static"] = min(cfg.memory_fraction or 0.88, 0.85)
    return out


def _kv_gib(ctx: TriageContext) -> float | None:
    startup = ctx.evidence.logs.startup if ctx.evidence.logs else None
    if startup is not None and startup.kv_cache_gib:
        return startup.kv_cache_gib
    return ctx.budget.kv_cache_gib if ctx.budget is not None else None


def actions_for(cause_id: str, findings: list[Finding], ctx: TriageContext) -> tuple[Action, ...]:
    ids = {f.id for f in findings}
    cfg = ctx.config
    wl = ctx.evidence.workload
    safe = safe_flags(ctx) if cfg is not None else {}
    acts: dict[str, Action] = {}

    def add(action_id: str, tier: str = "now", **params) -> None:
        acts.setdefault(action_id, Action(action_id, params, tier))

    if cause_id == "kv_cache_pressure":
        if cfg and cfg.max_num_seqs and safe.get("max_num_seqs", cfg.max_num_seqs) < cfg.max_num_seqs:
            add("lower_max_num_seqs", current=cfg.max_num_seqs, target=safe["max_num_seqs"])
        if cfg and cfg.max_model_len and safe.get("max_model_len", cfg.max_model_len) < cfg.max_model_len:
            add("cap_max_model_len", current=cfg.max_model_len, target=safe["max_model_len"])
        replicas = wl.replicas if wl else None
        if replicas:
            add("scale_out", current=replicas, target=replicas + max(1, replicas // 2))
        long_share = ctx.evidence.requests.share("L", "XL") if ctx.evidence.requests else None
        if long_share and long_share >= T.MIXED_LONG_SHARE:
            add("split_pools", "escalate", long_pct=round(long_share * 100, 1))
    elif cause_id == "params_near_edge":
        if safe:
            add("set_safe_flags", **safe)
        if cfg and cfg.memory_fraction and cfg.memory_fraction_kind == "total" and (
            cfg.memory_fraction >= T.VLLM_UTIL_EDGE
        ):
            add("lower_memory_fraction", flag="gpu-memory-utilization", current=cfg.memory_fraction,
                target=T.SAFE_VLLM_UTIL)
    elif cause_id == "weights_too_large":
        add("quantize_weights", "escalate", model=ctx.model.name if ctx.model else None)
        add("bigger_gpu_or_tp", "escalate", gpu=ctx.gpu_name)
    elif cause_id == "mixed_pool":
        prof = ctx.evidence.requests
        add("split_pools", "now", long_pct=round(prof.share("L", "XL") * 100, 1) if prof else None)
    elif cause_id == "parallelism_misconfig":
        if "parallelism_exceeds_gpus" in ids or "gpus_idle" in ids:
            add("fix_parallel_layout", gpus=ctx.gpus_requested,
                tp=cfg.tensor_parallel_size if cfg else None)
        add("review_tp", "escalate")
    elif cause_id == "platform_amplifier":
        if "liveness_kills_slow_start" in ids or "probe_kills" in ids:
            add("add_startup_probe", budget_s=600)
        if "container_oomkilled" in ids:
            add("raise_memory_limit")
        if "gpu_shared" in ids:
            add("isolate_gpu")
        if "hpa_cpu_only" in ids:
            add("hpa_on_queue_depth", target=6)
        if "mig_slice_small" in ids:
            add("bigger_mig_profile", "escalate",
                profile=wl.gpu.mig_profile if wl and wl.gpu else None)
        if "rollout_step_large" in ids:
            add("lower_max_surge", current=wl.max_surge if wl else None)
        if "launch_problem" in ids:
            add("fix_launch")
        if "no_shm_for_tp" in ids:
            add("add_shm")
    return tuple(sorted(acts.values(), key=lambda a: _ORDER.index(a.id)))
