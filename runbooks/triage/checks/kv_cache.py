"""Round 2: is the KV cache (long context x concurrency) the main cause?"""

from __future__ import annotations

from runbooks.catalogs import thresholds as T
from runbooks.model.report import CheckResult, Finding, fact
from runbooks.model.units import pct
from runbooks.remediation.solver import ENGINE_FLAGS, request_lengths
from runbooks.triage.checks._util import longest_above, missing
from runbooks.triage.context import TriageContext

ROUND = 2
_KV_LOG_SIGNALS = ("kv_insufficient", "vllm_preemption", "sglang_retraction", "prefill_rejected")


def check(ctx: TriageContext) -> CheckResult:
    ev = ctx.evidence
    findings: list[Finding] = []
    used: list[str] = []
    lacking = []
    prof = ev.requests

    blocked = admission_blocked(ctx)
    if ctx.kv_usage_ratio is not None:
        used.append("server_metrics")
        ratio = ctx.kv_usage_ratio.value
        f = fact("kv_usage", ctx.kv_usage_ratio.source, usage_pct=pct(ratio))
        if ratio >= T.KV_USAGE_HIGH_RATIO:
            findings.append(Finding("kv_usage_high", ROUND, "critical" if ratio >= 0.97 else "warning",
                                    (f,), ("kv_cache_pressure",), 0.8))
        elif blocked is not None:
            # below the line, but the waiting requests show the cache has no room for them
            findings.append(blocked)
        else:
            findings.append(Finding("kv_usage_ok", ROUND, "info", (f,)))
    else:
        # TGI logs no usage lines: its /metrics (with the start-up capacity) is where usage is
        lacking.append(missing("kv_usage_tgi" if ctx.engine == "tgi" else "kv_usage", ev.issues, "metrics.txt",
                               "logs.txt"))

    hist = ev.service_history
    if hist is not None and hist.kv_cache_usage_ratio:
        used.append("service_history")
        secs = longest_above(hist.kv_cache_usage_ratio, T.KV_USAGE_HIGH_RATIO)
        if secs >= T.SUSTAINED_S:
            findings.append(Finding("kv_usage_sustained", ROUND, "warning",
                                    (fact("sustained", hist.source, what="kv_usage",
                                          threshold=pct(T.KV_USAGE_HIGH_RATIO), minutes=round(secs / 60),
                                          peak=pct(max(v for _, v in hist.kv_cache_usage_ratio))),),
                                    ("kv_cache_pressure",), 0.6))

    if ctx.preemptions is not None and ctx.preemptions.value > 0:
        findings.append(Finding("preemptions_seen", ROUND, "warning",
                                (fact("preemptions", ctx.preemptions.source, count=int(ctx.preemptions.value)),),
                                ("kv_cache_pressure",), 0.6))

    if ev.logs is not None:
        used.append("logs")
        rejects = [s for s in ev.logs.signals if s.key in ("kv_insufficient", "prefill_rejected", "queue_full")]
        if rejects:
            findings.append(Finding("kv_rejects_logged", ROUND, "critical",
                                    tuple(fact("log_signal", ev.logs.source, signal=s.key, count=s.count,
                                               example=s.example) for s in rejects),
                                    ("kv_cache_pressure",), 0.9))
        alloc = kv_alloc_finding(ctx)
        if alloc is not None:
            findings.append(alloc)

    if prof is not None and prof.total > 0:
        used.append("request_profile")
        long_share = prof.share("L", "XL")
        short_share = prof.share("S")
        f_prof = fact("profile_shares", prof.source, total=prof.total,
                      s_pct=pct(prof.share("S")), m_pct=pct(prof.share("M")),
                      l_pct=pct(prof.share("L")), xl_pct=pct(prof.share("XL")),
                      p95_in=prof.p95_input_tokens, p99_in=prof.p99_input_tokens)
        if prof.shift is not None and prof.shift.delta >= T.LONG_SHARE_SHIFT:
            findings.append(Finding("long_share_jumped", ROUND, "critical",
                                    (fact("long_share_shift", prof.source,
                                          before_pct=pct(prof.shift.long_share_before),
                                          after_pct=pct(prof.shift.long_share_after),
                                          before_label=prof.shift.before_label,
                                          after_label=prof.shift.after_label), f_prof),
                                    ("kv_cache_pressure",), 0.9))
        elif long_share >= T.LONG_SHARE_HIGH:
            findings.append(Finding("long_share_high", ROUND, "warning", (f_prof,),
                                    ("kv_cache_pressure",), 0.6))
        mixed = short_share >= T.MIXED_SHORT_SHARE and long_share >= T.MIXED_LONG_SHARE
        if mixed:
            supporting = [f_prof]
            ttft = ev.server_metrics.ttft_seconds if ev.server_metrics else None
            p99 = ttft.quantile(0.99) if ttft else None
            severity, weight = "warning", 0.6
            if p99 is not None and p99 >= T.TTFT_P99_SLOW_S:
                # short requests waiting seconds for a first token behind long ones: the pool,
                # not the card, is the problem
                supporting.append(fact("ttft_p99", ev.server_metrics.source, seconds=round(p99, 2)))
                severity, weight = "critical", 0.9
            findings.append(Finding("mixed_pool", ROUND, severity, tuple(supporting), ("mixed_pool",), weight))
        elif long_share < T.LONG_SHARE_HIGH and (prof.shift is None or prof.shift.delta < T.LONG_SHARE_SHIFT):
            findings.append(Finding("profile_ok", ROUND, "info", (f_prof,)))
        demand = _demand_finding(ctx)
        if demand is not None:
            findings.append(demand)
    else:
        lacking.append(missing("request_profile", ev.issues, "access.log", "metrics.txt"))

    return CheckResult("kv_cache", ROUND, tuple(findings), tuple(dict.fromkeys(used)), tuple(lacking))


def kv_alloc_finding(ctx: TriageContext) -> Finding | None:
    """SGLang's allocator refusal with its figures: fewer tokens available than asked is the
    pool running out (KV pressure); as many or more available contradicts pressure (a paging
    or accounting fault of the engine's, e.g. sglang#4602 with --page-size 64)."""
    logs = ctx.evidence.logs
    alloc = logs.kv_alloc_failure if logs is not None else None
    if alloc is None:
        return None
    f = fact("kv_alloc", logs.source, phase=alloc.phase or "scheduler", requested=alloc.requested,
             available=alloc.available, count=alloc.count, example=alloc.example)
    if alloc.tokens_to_spare:
        return Finding("kv_alloc_tokens_free", ROUND, "warning", (f,))
    return Finding("kv_alloc_failed", ROUND, "critical", (f,), ("kv_cache_pressure",), 0.9)


def _demand_finding(ctx: TriageContext) -> Finding | None:
    """KV the live mix needs (requests at once x the p95 request) against what the pool holds.

    Requests at once are the running and waiting ones, never more than the engine's cap
    (--max-num-seqs and its kin: the rest wait outside the cache); the p95 request is the
    exact p95 of input + output where the profile has it, as `gpumem budget --profile` takes it
    (`request_lengths`), so both say the same. The pool is the engine's own figure where it
    reported one, else gpumem's budget; the fact says which."""
    prof = ctx.evidence.requests
    cap = ctx.kv_capacity_tokens
    if prof is None or cap is None or not cap.value or prof.p95_input_tokens is None:
        return None
    cfg = ctx.config
    seqs = cfg.max_num_seqs if cfg is not None and cfg.max_num_seqs else None
    if seqs is None and ctx.budget is not None and ctx.budget.max_num_seqs:
        seqs = ctx.budget.max_num_seqs
    engine = ((cfg.engine if cfg is not None else None) or "vllm").lower()
    seqs_flag = ENGINE_FLAGS.get(engine, ENGINE_FLAGS["vllm"])[1]
    concurrent, admitted = None, "live"
    if ctx.running is not None:
        concurrent = ctx.running.value + (ctx.queue_depth.value if ctx.queue_depth else 0)
        if seqs and concurrent > seqs:
            concurrent, admitted = seqs, f"cap:--{seqs_flag} {seqs}"
    if not concurrent and seqs:
        concurrent, admitted = seqs, f"full:--{seqs_flag} {seqs}"
    if not concurrent:
        return None
    _, per_request, _ = request_lengths(prof)
    demand = int(concurrent) * int(per_request)
    ratio = demand / cap.value
    f = fact("kv_demand", cap.source, concurrent=int(concurrent), tokens_per_request=int(per_request),
             demand_tokens=int(demand), capacity_tokens=int(cap.value), demand_pct=pct(ratio), admitted=admitted,
             pool="computed" if cap.source == "budget" else "measured")
    if ratio >= 1.0:
        return Finding("kv_demand_exceeds_capacity", ROUND, "critical", (f,), ("kv_cache_pressure",), 0.85)
    if ratio >= T.SAFE_KV_TARGET_RATIO:
        return Finding("kv_demand_near_capacity", ROUND, "warning", (f,), ("kv_cache_pressure",), 0.5)
    return Finding("kv_demand_ok", ROUND, "info", (f,))


def admission_blocked(ctx: TriageContext) -> Finding | None:
    """Requests waiting while the cache cannot hold one more sequence of the size the running
    ones hold on average (usage x (running + 1) / running >= 1): the engine queues them for
    lack of KV blocks, whatever the usage line says. None when the readings are missing, when
    nothing waits, or when usage is already past its line (kv_usage_high says it)."""
    kv, queue, running = ctx.kv_usage_ratio, ctx.queue_depth, ctx.running
    if kv is None or queue is None or running is None or queue.value <= 0 or running.value <= 0:
        return None
    ratio = kv.value
    if ratio >= T.KV_USAGE_HIGH_RATIO:
        return None
    per_request = ratio / running.value
    if ratio + per_request < 1.0:
        return None
    f = fact("kv_admission", kv.source, usage_pct=pct(ratio), running=round(running.value),
             waiting=round(queue.value), per_request_pct=pct(per_request))
    return Finding("kv_admission_blocked", ROUND, "warning", (f,), ("kv_cache_pressure",), 0.5)
