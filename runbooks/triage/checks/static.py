"""Round 1: is static occupancy (weights, runtime reserve, graphs) already too high?"""

from __future__ import annotations

from runbooks.catalogs import thresholds as T
from runbooks.model.report import CheckResult, Finding, fact
from runbooks.model.units import pct
from runbooks.triage.checks._util import gib, missing, visible_gpus
from runbooks.triage.context import TriageContext
from runbooks.triage.weights_estimate import estimate_weights_gib

ROUND = 1
#: the engines' start-up capacity refusals: the cache (or batch budget) does not fit what is left
STARTUP_FAILURES = ("kv_startup_too_small", "no_cache_blocks", "sglang_not_enough_memory", "tgi_prefill_oom",
                    "tgi_total_tokens_oom", "tgi_max_total_tokens_oom")
#: weights at or above this share of the card leave nothing a flag can give back
WEIGHTS_FILL_RATIO = 0.98
#: with weights below this share, a start-up refusal is the memory fraction's to fix
WEIGHTS_ROOM_RATIO = 0.95


def check(ctx: TriageContext) -> CheckResult:
    ev = ctx.evidence
    findings: list[Finding] = []
    used: list[str] = []
    lacking = []
    startup = ev.logs.startup if ev.logs else None
    total = ctx.gpu_total_gib.value if ctx.gpu_total_gib else None

    weights = static = None
    source = None
    if startup and startup.weights_gib is not None:
        weights = startup.weights_gib
        static = weights + (startup.activation_gib or 0) + (startup.non_torch_gib or 0) + (startup.cudagraph_gib or 0)
        source = ev.logs.source
        used.append("logs")
    elif ctx.budget is not None:
        weights = ctx.budget.weights_gib
        static = ctx.budget.static_gib
        source = "budget"
        used.append("budget")

    refusal = _refusal(ctx)
    if weights is not None and total:
        used.append("gpus")
        ratio = static / total
        tp = ev.server_config.tensor_parallel_size if ev.server_config else None
        facts = (
            fact("static_share", source, static_gib=gib(static), weights_gib=gib(weights),
                 total_gib=gib(total), share_pct=pct(ratio), tp=tp or 1),
        )
        # with the engine refusing for lack of cache while the weights still leave room, the
        # static share is a reason to raise the fraction, not proof that the card is too small
        room = refusal is not None and weights < total * WEIGHTS_ROOM_RATIO
        if weights >= total * WEIGHTS_FILL_RATIO:
            findings.append(Finding("weights_exceed_gpu", ROUND, "critical", facts,
                                    ("weights_too_large",), weight=1.0))
        elif ratio >= T.STATIC_CRITICAL_RATIO and not room:
            findings.append(Finding("static_critical", ROUND, "critical", facts, ("weights_too_large",), 0.9))
        elif ratio >= T.STATIC_WARNING_RATIO:
            findings.append(Finding("static_high", ROUND, "warning", facts, ("weights_too_large",), 0.5))
        else:
            findings.append(Finding("static_ok", ROUND, "info", facts))
    else:
        if weights is None:
            # the model known and the card not: the budget lacks only the card
            kind = "static_no_gpu" if ctx.model is not None and not total else "static"
            lacking.append(missing(kind, ev.issues, "logs.txt", "config.json", "deployment.yaml"))
        if not total and ctx.gpu_used_gib is not None:
            # a reading of what is in use (nvidia-smi dmon, a process row) without the card's size
            lacking.append(fact("missing_gpu_total", ctx.gpu_used_gib.source, used_gib=gib(ctx.gpu_used_gib.value)))
        elif not total:
            lacking.append(missing("gpus", ev.issues, "nvidia-smi.txt", "metrics.txt"))

    if refusal is not None:
        findings.append(refusal)
    if weights is None and total:
        estimate = _estimated_beyond_card(ctx, total)
        if estimate is not None:
            used.append("logs")
            findings.append(estimate)
    return CheckResult("static", ROUND, tuple(findings), tuple(dict.fromkeys(used)), tuple(lacking))


def _refusal(ctx: TriageContext) -> Finding | None:
    """The engine's start-up capacity refusal, as a sizing finding.

    The engine's own message decides: the cache (or TGI's batch budget) does not fit what the
    memory fraction leaves, so the flags are at the edge. Only when the card's size and the
    weights' share of it are both known, and the weights alone fill the card, is the card too
    small; and memory another process held at start-up makes it a placement problem.
    """
    logs = ctx.evidence.logs
    if logs is None:
        return None
    key = next((k for k in STARTUP_FAILURES if logs.count(k)), None)
    if key is None:
        return None
    sig = next(s for s in logs.signals if s.key == key)
    facts = [fact("log_signal", logs.source, signal=key, count=logs.count(key), example=sig.example)]
    startup = logs.startup
    capacity = refusal_capacity(ctx)
    length = (startup.max_model_len if startup else None) or (ctx.config.max_model_len if ctx.config else None)
    if capacity is not None and length and capacity < length:
        facts.append(fact("refusal_capacity", logs.source, max_model_len=length, capacity_tokens=capacity))
    supports: tuple[str, ...] = ("params_near_edge",)
    total = ctx.gpu_total_gib.value if ctx.gpu_total_gib else None
    weights = (startup.weights_gib if startup else None) or (ctx.budget.weights_gib if ctx.budget else None)
    if total and weights is not None and weights >= total * WEIGHTS_FILL_RATIO:
        supports = ("weights_too_large",)
    elif ctx.memory_held_elsewhere_gib is not None:
        supports = ("platform_amplifier",)
    return Finding("startup_capacity_error", ROUND, "critical", tuple(facts), supports, weight=0.9)


def refusal_capacity(ctx: TriageContext) -> int | None:
    """The longest context the engine said it could hold: its estimate, or its cache in tokens."""
    startup = ctx.evidence.logs.startup if ctx.evidence.logs else None
    if startup is None:
        return None
    if startup.estimated_max_model_len:
        return startup.estimated_max_model_len
    if startup.kv_cache_tokens:
        return startup.kv_cache_tokens
    if startup.gpu_blocks:
        return startup.gpu_blocks * ((ctx.config.block_size if ctx.config else None) or 16)
    return None


#: an estimate from the model's name must pass the card by this much: the name rounds the count
ESTIMATE_MARGIN = 1.1


def _estimated_beyond_card(ctx: TriageContext, total: float) -> Finding | None:
    """Weights the model's name and precision put beyond one card, for a model the catalog
    does not know: too large for the card, or, with more GPUs visible than the layout uses,
    a parallel layout that left them idle."""
    cfg = ctx.config
    if cfg is None:
        return None
    est = estimate_weights_gib(cfg.model or cfg.served_model_name, cfg.dtype, cfg.quantization)
    if est is None:
        return None
    split = (cfg.tensor_parallel_size or 1) * (cfg.pipeline_parallel_size or 1)
    per_gpu = est.gib / split
    if per_gpu < ESTIMATE_MARGIN * total:
        return None
    visible = visible_gpus(ctx)
    failed = ctx.evidence.logs is not None and bool(
        ctx.evidence.logs.oom or ctx.evidence.logs.count("cuda_oom") or ctx.evidence.logs.errors)
    f = fact("weights_estimate", cfg.source, model=cfg.model, params_b=est.params_b, bytes_per_param=est.bytes_per_param,
             weights_gib=gib(per_gpu), total_gib=gib(total), split=split)
    if visible is not None and visible > split:
        return Finding("weights_beyond_card_gpus_idle", ROUND, "critical" if failed else "warning",
                       (f, fact("gpus_visible", cfg.source, visible=visible, split=split)),
                       ("parallelism_misconfig",), 1.0 if failed else 0.6)
    return Finding("weights_estimate_exceed_gpu", ROUND, "critical" if failed else "warning", (f,),
                   ("weights_too_large",), 0.95 if failed else 0.6)
