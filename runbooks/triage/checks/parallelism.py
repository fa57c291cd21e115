"""Round 4: quantization, tensor parallelism, multi-GPU."""

from __future__ import annotations

from runbooks.model.report import CheckResult, Finding, fact
from runbooks.triage.checks._util import missing, visible_gpus
from runbooks.triage.context import TriageContext

ROUND = 4


def check(ctx: TriageContext) -> CheckResult:
    ev = ctx.evidence
    cfg = ev.server_config
    printed = _printed_error(ctx)
    if cfg is None:
        lacking = (missing("server_config", ev.issues, "deployment.yaml"),)
        if printed is not None:
            return CheckResult("parallelism", ROUND, (printed,), ("logs",), lacking)
        return CheckResult("parallelism", ROUND, (), (), lacking)
    findings: list[Finding] = [printed] if printed is not None else []
    used = ["server_config"]
    lacking = []
    tp = cfg.tensor_parallel_size or 1
    pp = cfg.pipeline_parallel_size or 1
    dp = cfg.data_parallel_size or 1
    wanted = tp * pp * dp

    if ctx.gpus_requested is not None:
        used.append("workload")
        if wanted > ctx.gpus_requested:
            findings.append(Finding("parallelism_exceeds_gpus", ROUND, "critical",
                                    (fact("parallel_layout", cfg.source, tp=tp, pp=pp, dp=dp,
                                          gpus=ctx.gpus_requested),),
                                    ("parallelism_misconfig",), 1.0))
        elif wanted < ctx.gpus_requested:
            findings.append(Finding("gpus_idle", ROUND, "warning",
                                    (fact("parallel_layout", cfg.source, tp=tp, pp=pp, dp=dp,
                                          gpus=ctx.gpus_requested),),
                                    ("parallelism_misconfig",), 0.5))
    elif ev.workload is not None:
        lacking.append(fact("missing_gpu_request", ev.workload.source))
    else:
        visible = visible_gpus(ctx)
        if visible is not None and visible > wanted:
            used.append("logs")
            findings.append(Finding("gpus_visible_unused", ROUND, "warning",
                                    (fact("gpus_visible", cfg.source, visible=visible, split=wanted),),
                                    ("parallelism_misconfig",), 0.45))

    model = ctx.model
    if model is not None and model.num_kv_heads and not model.is_mla and tp > model.num_kv_heads:
        used.append("model")
        findings.append(Finding("tp_exceeds_kv_heads", ROUND, "warning",
                                (fact("kv_heads_replicated", "model", tp=tp, kv_heads=model.num_kv_heads),),
                                ("parallelism_misconfig",), 0.5))
    elif model is None:
        lacking.append(missing("model", ev.issues, "config.json"))

    if ctx.budget is not None and tp > 1 and ctx.gpu_total_gib is not None:
        # Weights that would fit on one card with room for a useful cache: TP spreads them
        # but each rank still holds its slice of every long request's cache.
        one_gpu_weights = ctx.budget.weights_gib * tp
        if one_gpu_weights < 0.5 * ctx.gpu_total_gib.value:
            findings.append(Finding("tp_not_needed_for_weights", ROUND, "info",
                                    (fact("weights_one_gpu", "budget", weights_gib=round(one_gpu_weights, 1),
                                          total_gib=round(ctx.gpu_total_gib.value, 1), tp=tp),)))
    if ctx.budget is not None:
        for warning in getattr(ctx.budget, "warnings", ()):
            findings.append(_budget_warning(warning))
    return CheckResult("parallelism", ROUND, tuple(findings), tuple(dict.fromkeys(used)), tuple(lacking))


#: the budget's warnings that are about the parallel layout: evidence for parallelism_misconfig
BUDGET_LAYOUT_WARNINGS = frozenset({"tp_exceeds_kv_heads_replicated", "pp_uneven_layers"})
#: the budget's warnings that say the flags leave no margin: evidence for params_near_edge
BUDGET_EDGE_WARNINGS = frozenset({"headroom_negative", "sglang_reserve_below_activation", "context_exceeds_kv_pool",
                                  "tgi_total_tokens_exceed_kv"})


def _budget_warning(warning: str) -> Finding:
    """A budget warning as a finding of what it is about: the layout, the margin the flags leave,
    or neither (a limit of the budget's own figures, a capability of the card, a flag the version
    ignores): those are said, and count for no cause."""
    f = (fact("budget_warning", "budget", warning=warning),)
    if warning in BUDGET_LAYOUT_WARNINGS:
        return Finding("budget_warning", ROUND, "warning", f, ("parallelism_misconfig",), 0.4)
    if warning in BUDGET_EDGE_WARNINGS:
        return Finding("budget_edge_warning", ROUND, "warning", f, ("params_near_edge",), 0.4)
    return Finding("budget_note", ROUND, "info", f)


def _printed_error(ctx: TriageContext) -> Finding | None:
    """A parallel-layout error the engine printed (heads or layers a TP/PP size does not divide,
    fewer GPUs than the layout needs): the engine refused the layout, whatever else is known."""
    logs = ctx.evidence.logs
    err = logs.parallel_error if logs else None
    if err is None:
        return None
    cfg = ctx.config
    src = logs.source
    if err.kind == "gpus_insufficient":
        size = err.size or (cfg.tensor_parallel_size if cfg else None)
        gpus = err.gpus or _gpus_seen(ctx)
        if size and gpus:
            f = fact("gpus_fewer_than_layout", src, size=size, gpus=gpus)
        else:
            f = fact("engine_said", src, example=err.example)
    elif err.kind == "layers_indivisible":
        f = fact("layers_indivisible", src, layers=err.heads, size=err.size)
    elif err.kind == "kv_heads_indivisible":
        f = fact("kv_heads_indivisible", src, heads=err.heads, size=err.size)
    else:
        f = fact("heads_indivisible", src, heads=err.heads, size=err.size)
    return Finding("parallel_config_error", ROUND, "critical", (f,), ("parallelism_misconfig",), 1.0)


def _gpus_seen(ctx: TriageContext) -> int | None:
    """GPUs the evidence shows the server has: the pod's request, else the cards nvidia-smi lists."""
    if ctx.gpus_requested:
        return ctx.gpus_requested
    gpus = ctx.evidence.gpus
    return len(gpus.devices) if gpus and gpus.devices else None
