"""From findings to a ranked verdict: the runbook's root-cause matrix, with confidence.

Each finding points at causes with a weight; a cause's score combines its findings as
independent pieces of evidence (noisy-OR), so two strong signals beat five weak ones and no
single weak signal names a cause. Confidence is the score, discounted when the evidence the
runbook asks for (memory, logs, request profile, flags, metrics) was not there to look at.
"""

from __future__ import annotations

from dataclasses import replace

from runbooks.catalogs import thresholds as T
from runbooks.model.report import (
    CAUSE_IDS,
    Action,
    Cause,
    CheckResult,
    Fact,
    Finding,
    Misjudgement,
    Verdict,
    fact,
)
from runbooks.triage.actions import actions_for
from runbooks.triage.context import TriageContext
from runbooks.triage.health import capture_next, health_evidence, in_kubernetes

_SEVERITY_FACTOR = {"critical": 1.0, "warning": 0.7, "info": 0.0}
#: a cause below this score is not named at all
MIN_SCORE = 0.3
#: findings that count against a cause when present
_AGAINST = {
    "kv_cache_pressure": ("kv_usage_ok", "kv_demand_ok", "kv_alloc_tokens_free"),
    "params_near_edge": ("kv_alloc_tokens_free",),
    "weights_too_large": ("static_ok",),
    "mixed_pool": ("profile_ok",),
}
#: findings gpumem computes (the p95 mix against the pool): an estimate that weighs against a
#: cause only where no measured reading of the engine supports it
_COMPUTED = frozenset({"kv_demand_ok"})
#: the engine's own measured signs of KV pressure (its usage gauge, preemptions, its refusals)
_MEASURED_PRESSURE = frozenset({"kv_usage_high", "preemptions_seen", "kv_rejects_logged", "kv_alloc_failed"})
#: what would rule each cause out: catalog keys, worded by the renderers
_RULE_OUT = {
    "weights_too_large": ("rule_out_weights",),
    "kv_cache_pressure": ("rule_out_kv",),
    "mixed_pool": ("rule_out_mixed_pool",),
    "params_near_edge": ("rule_out_params",),
    "parallelism_misconfig": ("rule_out_parallelism",),
    "platform_amplifier": ("rule_out_platform",),
}
#: findings that say the engine did not start (or crashed): never "healthy"
ENGINE_DOWN = frozenset({"engine_not_started", "startup_capacity_error", "startup_cuda_oom", "cuda_oom",
                         "runtime_cuda_oom", "parallel_config_error", "nccl_failed", "gpu_runtime_error",
                         "memory_held_elsewhere", "pods_restarting", "container_oomkilled",
                         "unexplained_failure_down"})
#: findings that forbid "healthy": the engine is down, or the log states an error no rule explains
NOT_HEALTHY = ENGINE_DOWN | {"unexplained_failure", "kv_admission_blocked", "kv_alloc_failed", "kv_alloc_tokens_free"}
#: findings that read the configuration, not a symptom: a fraction at its edge, GPUs visible
#: or requested beyond the layout, TP past the KV heads, a liveness budget short of a load, an
#: HPA on CPU only, a large rollout step. They say where trouble would come from, not that it
#: came, so alone (no symptom anywhere in the evidence) they name no cause: they are shown,
#: and the verdict rests on what the engine shows (health, or what to capture)
FLAG_ONLY = frozenset({"memory_fraction_at_edge", "gpus_visible_unused", "liveness_kills_slow_start", "hpa_cpu_only",
                       "rollout_step_large", "tp_exceeds_kv_heads", "gpus_idle"})
#: findings whose numbers say the failure seen is not a memory shortage, and the causes they
#: contradict: such a cause is named only on findings other than FLAG_ONLY ones (a fraction at
#: its edge does not explain a crash the engine's own figures say was not short of memory)
CONTRADICTS = {"kv_alloc_tokens_free": frozenset({"kv_cache_pressure", "params_near_edge"})}
#: evidence kinds the runbook wants together, and how much each adds to coverage
_COVERAGE = {"gpus": 0.2, "logs": 0.2, "request_profile": 0.2, "server_config": 0.2, "server_metrics": 0.2}


def coverage(checks: tuple[CheckResult, ...], ctx: TriageContext) -> float:
    ev = ctx.evidence
    have = {
        "gpus": ctx.gpu_used_gib is not None or ev.memory_history is not None,
        "logs": ev.logs is not None,
        "request_profile": ev.requests is not None and ev.requests.total > 0,
        "server_config": ev.server_config is not None,
        "server_metrics": ev.server_metrics is not None,
    }
    return round(sum(w for k, w in _COVERAGE.items() if have[k]), 2)


def _label(confidence: float) -> str:
    if confidence >= 0.75:
        return "high"
    if confidence >= 0.5:
        return "medium"
    return "low"


def decide(checks: tuple[CheckResult, ...], ctx: TriageContext) -> Verdict:
    """Rank the causes the findings support; `healthy` or `insufficient_evidence` otherwise."""
    findings = [f for c in checks for f in c.findings]
    cover = coverage(checks, ctx)
    causes: list[Cause] = []
    symptom = any(f.id not in FLAG_ONLY and _SEVERITY_FACTOR[f.severity] > 0 for f in findings)
    for cause_id in CAUSE_IDS:
        support = [f for f in findings if cause_id in f.supports and _SEVERITY_FACTOR[f.severity] > 0]
        if not support or (not symptom and all(f.id in FLAG_ONLY for f in support)):
            continue
        contradicted = any(cause_id in CONTRADICTS.get(f.id, ()) for f in findings)
        if contradicted and all(f.id in FLAG_ONLY for f in support):
            continue
        miss = 1.0
        for f in support:
            miss *= 1.0 - f.weight * _SEVERITY_FACTOR[f.severity]
        score = 1.0 - miss
        against = [f for f in findings if f.id in _AGAINST.get(cause_id, ())
                   and not (f.id in _COMPUTED and any(g.id in _MEASURED_PRESSURE for g in support))]
        score *= 0.8 ** len(against)
        if score < MIN_SCORE:
            continue
        confidence = round(score * (0.6 + 0.4 * cover), 2)
        causes.append(Cause(
            id=cause_id,
            confidence=confidence,
            confidence_label=_label(confidence),
            evidence_for=_facts(support),
            evidence_against=_facts(against),
            rule_out=_rule_out(cause_id, support),
            actions=actions_for(cause_id, support, ctx),
        ))
    causes.sort(key=lambda c: (-c.confidence, CAUSE_IDS.index(c.id)))
    causes = one_action_per_flag(causes)
    health: tuple[Fact, ...] = ()
    capture: tuple[Fact, ...] = ()
    level, why = _priority(findings, ctx)
    if causes:
        primary = causes[0].id
    else:
        # healthy needs positive evidence of a serving engine, and no failure in the evidence:
        # a launch command, start-up lines or flags (any "coverage") are not evidence of health
        health = health_evidence(ctx) if not {f.id for f in findings} & NOT_HEALTHY else ()
        primary = "healthy" if health else "insufficient_evidence"
        if health:
            level, why = "low", None
        if not health:
            capture = capture_next(ctx)
    return Verdict(
        primary=primary,
        causes=tuple(causes),
        misjudgements=_misjudgements(causes, findings, ctx),
        priority=level,
        priority_why=why,
        evidence_coverage=cover,
        health_evidence=health,
        capture_next=capture,
        kubernetes=in_kubernetes(ctx),
    )


#: what would rule out the finding's reading, quoting its own values: finding id -> (fact
#: key, the params it copies from the first of the finding's facts that has them all)
_RULE_OUT_BY_FINDING = {
    "engines_share_gpu": ("rule_out_shared_launches", ("gpus",)),
    "gpu_shared": ("rule_out_one_process", ("gpu", "processes")),
    "host_memory_killed": ("rule_out_host_memory", ()),
    "container_oomkilled": ("rule_out_host_memory", ()),
    "gpu_sharing_layer_error": ("rule_out_sharing_layer", ()),
    "memory_held_elsewhere": ("rule_out_held_elsewhere", ("held_gib", "total_gib")),
    "weights_beyond_card_gpus_idle": ("rule_out_weights_estimate", ("weights_gib", "total_gib", "model")),
    "weights_estimate_exceed_gpu": ("rule_out_weights_estimate", ("weights_gib", "total_gib", "model")),
    "gpus_visible_unused": ("rule_out_gpus_visible", ("visible", "split")),
    "kv_usage_high": ("rule_out_kv_usage", ("usage_pct",)),
    "kv_admission_blocked": ("rule_out_kv_admission", ("waiting", "running", "usage_pct")),
    "preemptions_seen": ("rule_out_preemptions", ("count",)),
    "kv_rejects_logged": ("rule_out_kv_rejects", ("count",)),
    "kv_alloc_failed": ("rule_out_kv_alloc", ("requested", "available")),
    "kv_demand_exceeds_capacity": ("rule_out_kv_demand", ("demand_tokens", "capacity_tokens")),
    "kv_demand_near_capacity": ("rule_out_kv_demand", ("demand_tokens", "capacity_tokens")),
    "long_share_jumped": ("rule_out_long_share", ("before_pct", "after_pct")),
    "queue_and_rejects_rising": ("rule_out_queue_rejects", ("queue", "rejected")),
    "memory_fraction_at_edge": ("rule_out_fraction", ("flag", "value", "edge")),
    "kv_below_one_sequence": ("rule_out_one_sequence", ("max_model_len", "capacity_tokens")),
    "aggressive_combination": ("rule_out_combination", ("max_num_seqs", "max_model_len", "capacity_tokens")),
    "cuda_oom": ("rule_out_oom_margin", ("held_gib", "total_gib")),
    "runtime_cuda_oom": ("rule_out_oom_margin", ("held_gib", "total_gib")),
    "startup_cuda_oom": ("rule_out_oom_margin", ("held_gib", "total_gib")),
    "startup_capacity_error": ("rule_out_refusal", ("max_model_len", "capacity_tokens")),
    "pods_restarting": ("rule_out_restarts", ("count",)),
    "probe_kills": ("rule_out_probe_kills", ("count",)),
    "probe_path_not_found": ("rule_out_probe_path", ("answer",)),
    "liveness_kills_slow_start": ("rule_out_probe_budget", ("budget_s", "need_s")),
    "static_high": ("rule_out_static", ("static_gib", "total_gib", "share_pct")),
    "static_critical": ("rule_out_static", ("static_gib", "total_gib", "share_pct")),
    "weights_exceed_gpu": ("rule_out_static", ("static_gib", "total_gib", "share_pct")),
    "gpus_idle": ("rule_out_layout", ("tp", "pp", "dp", "gpus")),
    "parallelism_exceeds_gpus": ("rule_out_layout", ("tp", "pp", "dp", "gpus")),
    "mixed_pool": ("rule_out_mix", ("s_pct", "l_pct", "xl_pct")),
    "mig_slice_small": ("rule_out_mig", ("profile",)),
}


#: a rule-out the engine's own figure states, beside one computed for the same question: the
#: measured one is kept (one value per fact)
_MEASURED_OVER_COMPUTED = {"rule_out_one_sequence": "rule_out_refusal"}


def _rule_out(cause_id: str, support: list[Finding]) -> tuple[Fact, ...]:
    """What would rule the cause out: the readings of its own findings with their values where
    a finding has them, else the runbook's general test for the cause."""
    out: dict[tuple, Fact] = {}
    general = False
    for f in support:
        spec = _RULE_OUT_BY_FINDING.get(f.id)
        source = next((x for x in f.facts if spec and all(x.params.get(n) is not None for n in spec[1])), None)
        if spec is None or source is None:
            general = True
            continue
        key, names = spec
        params = {n: source.params[n] for n in names}
        out.setdefault((key, *params.values()), fact(key, source.source, **params))
    keys = {f.key for f in out.values()}
    out = {k: f for k, f in out.items() if _MEASURED_OVER_COMPUTED.get(f.key) not in keys}
    if not out or general:
        for k in _RULE_OUT[cause_id]:
            out.setdefault((k,), fact(k))
    return tuple(out.values())


def _set_flags(action: Action) -> set[str]:
    return {c.flag for c in action.changes if c.kind == "set_arg" and c.flag}


def one_action_per_flag(causes: list[Cause]) -> list[Cause]:
    """Each flag is changed by one action in the report: where a combined action (the safe-flag
    template) and a single-flag one both set a flag, the single-flag action keeps it (its risk
    and rollback are about that flag) and the combined one keeps the flags no other action
    sets; one left with none is dropped, unless it is its cause's only action. A template's
    pasted `args` line names only the flags it changes.

    The owner of a flag is the action setting the fewest flags, the earlier one (by cause rank,
    then action order) on a tie; actions of the same id are one action shown under two causes.
    """
    owner: dict[str, tuple[int, int, str]] = {}
    for ci, cause in enumerate(causes):
        for ai, action in enumerate(cause.actions):
            flags = _set_flags(action)
            for flag in flags:
                rank = (len(flags), ci * 1000 + ai, action.id)
                if flag not in owner or rank[:2] < owner[flag][:2]:
                    owner[flag] = rank
    out: list[Cause] = []
    for cause in causes:
        kept: list[Action] = []
        for action in cause.actions:
            lost = {f for f in _set_flags(action) if owner[f][2] != action.id}
            if not lost:
                kept.append(_with_changes(action, action.changes))
                continue
            changes = tuple(c for c in action.changes if not (c.kind == "set_arg" and c.flag in lost))
            if changes:
                kept.append(_with_changes(action, changes))
        if not kept and cause.actions:
            kept = list(cause.actions)  # every cause keeps an action: the overlap is the lesser harm
        out.append(replace(cause, actions=tuple(kept)))
    return out


def _with_changes(action: Action, changes: tuple) -> Action:
    """The action with these changes; its pasted `args` line names exactly the flags they set,
    so no flag is shown "set" to the value it already has."""
    params = dict(action.params)
    if isinstance(params.get("args"), str):
        params["args"] = " ".join(_arg(c) for c in changes if c.kind == "set_arg" and c.flag)
    return replace(action, params=params, changes=changes)


def _arg(change) -> str:
    value = change.new
    if value is True:
        return f"--{change.flag}"
    return f"--{change.flag}={value:g}" if isinstance(value, float) else f"--{change.flag}={value}"


def _facts(findings: list[Finding]) -> tuple[Fact, ...]:
    seen: dict[tuple, Fact] = {}
    for f in sorted(findings, key=lambda f: -f.weight * _SEVERITY_FACTOR[f.severity]):
        for x in f.facts:
            seen.setdefault((x.key, tuple(sorted(map(str, x.params.items())))), x)
    return tuple(seen.values())


def _priority(findings: list[Finding], ctx: TriageContext) -> tuple[str, str | None]:
    """The runbook's priority and what in the evidence sets it (a `priority_why` key): the
    wording says "pods keep restarting" only with restarts, "rejected" only with rejects."""
    ids = {f.id for f in findings}
    oom = {"runtime_cuda_oom", "startup_cuda_oom", "cuda_oom"}
    restarting = ids & {"pods_restarting", "container_oomkilled"}
    if ids & (oom | {"container_oomkilled", "startup_capacity_error"}) and (
        ids & {"pods_restarting", "startup_capacity_error", "startup_cuda_oom", "container_oomkilled"}
    ):
        return "highest", "oom_restarting" if restarting else "oom_at_start"
    crash_looping = any(f.id == "pods_restarting" and f.severity == "critical" for f in findings)
    if crash_looping:
        return "high", "restarting"
    if ids & {"kv_rejects_logged", "queue_and_rejects_rising", "rejects_seen"}:
        return "high", "rejects"
    if ids & oom:
        return "high", "oom"
    if ids & {"parallel_config_error", "nccl_failed", "gpu_runtime_error", "engine_not_started",
              "unexplained_failure_down", "host_memory_killed", "gpu_sharing_layer_error"}:
        return "high", "engine_down"
    if ids & {"kv_below_one_sequence", "weights_exceed_gpu", "parallelism_exceeds_gpus", "memory_held_elsewhere"}:
        return "high", "cannot_fit"
    if ids & {"kv_usage_high", "preemptions_seen", "memory_fraction_at_edge", "aggressive_combination"}:
        return "medium", "memory_edge"
    if "memory_pinned" in ids:
        # an engine that preallocates its fraction pins the card by design: no urgency in that
        return "medium", "memory_pinned"
    return "low", None


def _misjudgements(causes: list[Cause], findings: list[Finding], ctx: TriageContext) -> tuple[Misjudgement, ...]:
    ids = {c.id for c in causes}
    dynamic = bool(ids & {"kv_cache_pressure", "mixed_pool"})
    out: list[Misjudgement] = []
    util = ctx.gpu_util_pct
    if dynamic and util is not None and util.value < T.LOW_GPU_UTIL_PCT:
        out.append(Misjudgement("low_util_not_memory", (fact("gpu_util", util.source, util_pct=util.value),)))
    if dynamic and "weights_too_large" not in ids:
        static = next((f for f in findings if f.id == "static_ok"), None)
        out.append(Misjudgement("quantization_will_fix", static.facts if static else ()))
    tp = ctx.config.tensor_parallel_size if ctx.config else None
    if dynamic and (tp or 1) > 1:
        out.append(Misjudgement("more_tp_will_fix", (fact("tp_size", ctx.config.source, tp=tp),)))
    if "mixed_pool" in ids:
        out.append(Misjudgement("bigger_gpu_will_fix", ()))
    return tuple(out)
