"""Round 3: did concurrency break through? Flags at the edge, queue and rejects together."""

from __future__ import annotations

from runbooks.catalogs import thresholds as T
from runbooks.model.report import CheckResult, Finding, fact
from runbooks.model.units import pct
from runbooks.triage.checks._util import gib, longest_above, missing
from runbooks.triage.context import TriageContext

ROUND = 3


def check(ctx: TriageContext) -> CheckResult:
    ev = ctx.evidence
    cfg = ev.server_config
    findings: list[Finding] = []
    used: list[str] = []
    lacking = []

    if cfg is not None:
        used.append("server_config")
        edge = _fraction_at_edge(cfg)
        if edge is not None:
            findings.append(edge)
        worst = _worst_case(ctx)
        if worst is not None:
            findings.append(worst)
    else:
        lacking.append(missing("server_config", ev.issues, "deployment.yaml"))

    if ctx.queue_depth is not None or ctx.rejected is not None:
        used.append("server_metrics")
        q = ctx.queue_depth.value if ctx.queue_depth else None
        r = ctx.rejected.value if ctx.rejected else None
        src = (ctx.queue_depth or ctx.rejected).source
        f = fact("queue_and_rejects", src, queue=q if q is None else round(q), rejected=r if r is None else round(r))
        if (q or 0) > T.QUEUE_DEPTH_ALERT and (r or 0) > 0:
            findings.append(Finding("queue_and_rejects_rising", ROUND, "critical", (f,),
                                    ("kv_cache_pressure", "params_near_edge"), 0.7))
        elif (r or 0) > 0:
            findings.append(Finding("rejects_seen", ROUND, "warning", (f,), ("kv_cache_pressure",), 0.5))
        elif (q or 0) > T.QUEUE_DEPTH_ALERT:
            findings.append(Finding("queue_deep", ROUND, "warning", (f,), ("kv_cache_pressure",), 0.4))
    else:
        lacking.append(missing("queue", ev.issues, "metrics.txt"))

    hist = ev.service_history
    if hist is not None and hist.queue_depth:
        used.append("service_history")
        secs = longest_above(hist.queue_depth, T.QUEUE_DEPTH_ALERT + 1)
        if secs >= T.SUSTAINED_S:
            findings.append(Finding("queue_sustained", ROUND, "warning",
                                    (fact("sustained", hist.source, what="queue", threshold=T.QUEUE_DEPTH_ALERT,
                                          minutes=round(secs / 60), peak=max(v for _, v in hist.queue_depth)),),
                                    ("kv_cache_pressure",), 0.5))

    if ctx.gpu_used_gib is not None and ctx.gpu_total_gib is not None:
        used.append("gpus")
        ratio = ctx.gpu_used_gib.value / ctx.gpu_total_gib.value
        if ratio >= T.GPU_MEM_PINNED_RATIO or (
            cfg and cfg.memory_fraction and ratio >= cfg.memory_fraction - 0.03
        ):
            # vLLM and SGLang claim their whole fraction at start-up: a pinned card is
            # expected, and says nothing about how full the KV cache is.
            key = "memory_pinned_preallocated" if ctx.engine in ("vllm", "sglang", "tgi") else "memory_pinned"
            findings.append(Finding(key, ROUND, "info",
                                    (fact("gpu_mem_used", ctx.gpu_used_gib.source,
                                          used_gib=gib(ctx.gpu_used_gib.value),
                                          total_gib=gib(ctx.gpu_total_gib.value), share_pct=pct(ratio)),)))

    if ev.logs is not None:
        used.append("logs")
        n = ev.logs.count("cuda_oom") + ev.logs.count("alloc_failed") + ev.logs.count("sampler_warmup_oom")
        if n:
            sig = next(s for s in ev.logs.signals if s.key in ("cuda_oom", "alloc_failed", "sampler_warmup_oom"))
            supports = _oom_causes(ctx)
            findings.append(Finding("runtime_cuda_oom", ROUND, "critical",
                                    (fact("log_signal", ev.logs.source, signal=sig.key, count=n,
                                          example=sig.example),), supports, 0.8))
    return CheckResult("concurrency", ROUND, tuple(findings), tuple(dict.fromkeys(used)), tuple(lacking))


def _fraction_at_edge(cfg) -> Finding | None:
    frac, kind = cfg.memory_fraction, cfg.memory_fraction_kind
    if frac is None:
        return None
    edge = {"total": T.VLLM_UTIL_EDGE, "free_static": T.SGLANG_MFS_EDGE, "process": T.TGI_FRACTION_EDGE}.get(kind or "")
    if edge is None or frac < edge:
        return None
    flag = {"total": "gpu-memory-utilization", "free_static": "mem-fraction-static",
            "process": "cuda-memory-fraction"}[kind]
    return Finding("memory_fraction_at_edge", ROUND, "warning",
                   (fact("flag_value", cfg.source, flag=flag, value=frac, edge=edge),),
                   ("params_near_edge",), 0.6)


def _worst_case(ctx: TriageContext) -> Finding | None:
    """max-num-seqs sequences at max-model-len against the KV pool: the aggressive combination."""
    cfg = ctx.config
    cap = ctx.kv_capacity_tokens
    seqs = cfg.max_num_seqs or (ctx.budget.max_num_seqs if ctx.budget else None)
    length = cfg.max_model_len or (ctx.budget.max_model_len if ctx.budget else None)
    if cap is None or not seqs or not length or not cap.value:
        return None
    full_len_fit = cap.value / length
    f = fact("worst_case", cap.source, max_num_seqs=seqs, max_model_len=length,
             capacity_tokens=int(cap.value), fit_at_max_len=round(full_len_fit, 1))
    if full_len_fit < 1:
        return Finding("kv_below_one_sequence", ROUND, "critical", (f,), ("params_near_edge",), 0.9)
    at_edge = bool(cfg.memory_fraction and cfg.memory_fraction_kind == "total"
                   and cfg.memory_fraction >= T.VLLM_UTIL_EDGE)
    # Engines rely on most requests being shorter than max-model-len, so seqs x len above the
    # cache is normal; it becomes the runbook's "aggressive combination" when the memory
    # fraction also leaves no buffer for the waves of long requests that do come.
    if at_edge and seqs > full_len_fit * 2:
        return Finding("aggressive_combination", ROUND, "critical", (f,), ("params_near_edge",), 0.75)
    return None


def _oom_causes(ctx: TriageContext) -> tuple[str, ...]:
    """Which causes a CUDA OOM line points at depends on what else is true.

    Weights that nearly fill the card: the OOM came while loading or right after. A memory
    fraction below the edge: the engine kept a margin, so the cache and batch outgrew it.
    Otherwise: the fraction left no room for activations and fragmentation.
    """
    cfg = ctx.config
    b = ctx.budget
    if b is not None and ctx.gpu_total_gib is not None and b.weights_gib >= 0.85 * ctx.gpu_total_gib.value:
        return ("weights_too_large",)
    if cfg and cfg.memory_fraction_kind == "total" and (cfg.memory_fraction or 0.9) < T.VLLM_UTIL_EDGE:
        return ("kv_cache_pressure", "params_near_edge")
    return ("params_near_edge",)
