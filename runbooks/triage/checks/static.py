"""Round 1: is static occupancy (weights, runtime reserve, graphs) already too high?"""

from __future__ import annotations

from runbooks.catalogs import thresholds as T
from runbooks.model.report import CheckResult, Finding, fact
from runbooks.model.units import pct
from runbooks.triage.checks._util import gib, missing
from runbooks.triage.context import TriageContext

ROUND = 1
_STARTUP_FAILURES = ("kv_startup_too_small", "no_cache_blocks", "sglang_not_enough_memory", "tgi_prefill_oom")


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

    if weights is not None and total:
        used.append("gpus")
        ratio = static / total
        tp = ev.server_config.tensor_parallel_size if ev.server_config else None
        facts = (
            fact("static_share", source, static_gib=gib(static), weights_gib=gib(weights),
                 total_gib=gib(total), share_pct=pct(ratio), tp=tp or 1),
        )
        if weights >= total * 0.98:
            findings.append(Finding("weights_exceed_gpu", ROUND, "critical", facts,
                                    ("weights_too_large",), weight=1.0))
        elif ratio >= T.STATIC_CRITICAL_RATIO:
            findings.append(Finding("static_critical", ROUND, "critical", facts, ("weights_too_large",), 0.9))
        elif ratio >= T.STATIC_WARNING_RATIO:
            findings.append(Finding("static_high", ROUND, "warning", facts, ("weights_too_large",), 0.5))
        else:
            findings.append(Finding("static_ok", ROUND, "info", facts))
    else:
        if weights is None:
            lacking.append(missing("static", ev.issues, "logs.txt", "config.json", "deployment.yaml"))
        if not total:
            lacking.append(missing("gpus", ev.issues, "nvidia-smi.txt", "metrics.txt"))

    if ev.logs is not None:
        for key in _STARTUP_FAILURES:
            n = ev.logs.count(key)
            if n:
                sig = next(s for s in ev.logs.signals if s.key == key)
                supports = ("weights_too_large",) if ctx.budget is None or ctx.budget.weights_gib > 0.6 * (
                    total or 1e9) else ("params_near_edge",)
                findings.append(Finding("startup_capacity_error", ROUND, "critical",
                                        (fact("log_signal", ev.logs.source, signal=key, count=n,
                                              example=sig.example),),
                                        supports, weight=0.9))
    return CheckResult("static", ROUND, tuple(findings), tuple(dict.fromkeys(used)), tuple(lacking))
