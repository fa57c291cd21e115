"""Round 4: quantization, tensor parallelism, multi-GPU."""

from __future__ import annotations

from runbooks.model.report import CheckResult, Finding, fact
from runbooks.triage.checks._util import missing
from runbooks.triage.context import TriageContext

ROUND = 4


def check(ctx: TriageContext) -> CheckResult:
    ev = ctx.evidence
    cfg = ev.server_config
    if cfg is None:
        return CheckResult("parallelism", ROUND, (), (), (missing("server_config", ev.issues, "deployment.yaml"),))
    findings: list[Finding] = []
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
            findings.append(Finding("budget_warning", ROUND, "warning",
                                    (fact("budget_warning", "budget", warning=warning),),
                                    ("parallelism_misconfig",), 0.4))
    return CheckResult("parallelism", ROUND, tuple(findings), tuple(dict.fromkeys(used)), tuple(lacking))
