"""Round 3: did concurrency break through? Flags at the edge, queue and rejects together."""

from __future__ import annotations

import re

from runbooks.catalogs import thresholds as T
from runbooks.catalogs.engine_flags import role_flag
from runbooks.launch.flag_tables import MEMORY_FRACTION_KIND
from runbooks.model.report import CheckResult, Finding, fact
from runbooks.model.units import GIB, MIB, pct
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
        if r is None:
            f = fact("queue_depth_only", src, queue=round(q))
        elif q is None:
            f = fact("rejects_only", src, rejected=round(r))
        else:
            f = fact("queue_and_rejects", src, queue=round(q), rejected=round(r))
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
        oom = _oom_finding(ctx)
        if oom is not None:
            findings.append(oom)
    return CheckResult("concurrency", ROUND, tuple(findings), tuple(dict.fromkeys(used)), tuple(lacking))


def oom_phase(ctx: TriageContext) -> str | None:
    """The phase the log's CUDA OOM came in (OOM_PHASES), None when nothing says."""
    logs = ctx.evidence.logs
    if logs is None:
        return None
    if logs.oom is not None and logs.oom.phase is not None:
        return logs.oom.phase
    if logs.count("sampler_warmup_oom"):
        return "sampler_warmup"
    if any(_SHARD_START.search(e.example) for e in logs.errors):
        # TGI's launcher: a shard that failed to start died loading (warm-up comes after "ready")
        return "loading"
    return None


_SHARD_START = re.compile(r"ShardCannotStart|Shard \d{1,4} failed to start")


def _oom_finding(ctx: TriageContext) -> Finding | None:
    """A CUDA OOM, read for its numbers and its phase, not as a keyword.

    Served requests OOM at run time; an OOM while loading, profiling, capturing CUDA graphs
    or warming up is a start-up failure; with no phase in the evidence it is neither.
    """
    logs = ctx.evidence.logs
    keys = ("cuda_oom", "alloc_failed", "sampler_warmup_oom")
    # a sampler warm-up OOM line is also a "CUDA out of memory" line: counted once
    n = max(logs.oom.count if logs.oom else 0, logs.count("cuda_oom")) + logs.count("alloc_failed")
    if not n or _host_memory_only(logs):
        return None
    sig = next((s for s in logs.signals if s.key in keys), None)
    phase = oom_phase(ctx)
    facts = [fact("log_signal", logs.source, signal=sig.key if sig else "cuda_oom", count=n,
                  example=(logs.oom.example if logs.oom else None) or (sig.example if sig else None))]
    oom = logs.oom
    if oom is not None and oom.total_bytes:
        facts.append(fact("oom_numbers", logs.source, total_gib=gib(oom.total_bytes / GIB),
                          held_gib=gib((oom.in_use_bytes or oom.total_bytes - (oom.free_bytes or 0)) / GIB),
                          allocated_gib=gib((oom.allocated_bytes or 0) / GIB),
                          tried_mib=round((oom.tried_bytes or 0) / MIB)))
    if oom is not None and _fragmented(oom):
        facts.append(fact("oom_fragmentation", logs.source,
                          reserved_gib=gib(oom.reserved_unallocated_bytes / GIB)))
    if oom is not None and _in_graph_pools(oom):
        facts.append(fact("oom_graph_pools", logs.source, pool_gib=gib(oom.private_pools_bytes / GIB)))
    if oom is not None and under_cap(oom):
        facts.append(fact("oom_under_cap", logs.source, allowed_gib=gib(oom.allowed_bytes / GIB),
                          free_gib=gib(oom.free_bytes / GIB)))
    if phase is not None:
        facts.append(_PHASE_FACTS[phase](logs.source))
    if _beyond_card(oom):
        facts.append(fact("oom_request_exceeds_card", logs.source, tried_gib=gib(oom.tried_bytes / GIB),
                          total_gib=gib(oom.total_bytes / GIB)))
    key = "cuda_oom" if phase is None else "runtime_cuda_oom" if phase == "serving" else "startup_cuda_oom"
    return Finding(key, ROUND, "critical", tuple(facts), _oom_causes(ctx, phase), 0.8)


#: the phase an OOM came in, worded
_PHASE_FACTS = {
    "loading": lambda src: fact("oom_while_loading", src),
    "profiling": lambda src: fact("oom_while_profiling", src),
    "kv_cache": lambda src: fact("oom_while_kv_cache", src),
    "cudagraph": lambda src: fact("oom_while_cudagraph", src),
    "sampler_warmup": lambda src: fact("oom_while_sampler_warmup", src),
    "warmup": lambda src: fact("oom_while_warmup", src),
    "serving": lambda src: fact("oom_while_serving", src),
}


def _load_filled_card(oom) -> bool:
    """An OOM while loading weights whose allocation (plus the request) reached 90% of the card."""
    if oom is None or not oom.total_bytes:
        return False
    held = (oom.allocated_bytes or oom.in_use_bytes or 0) + (oom.tried_bytes or 0)
    return held >= 0.9 * oom.total_bytes


def _host_memory_only(logs) -> bool:
    """The only "OutOfMemoryError" is Ray's host-memory kill (`ray.exceptions.OutOfMemoryError`),
    without a CUDA figure: host RAM, read by the platform round, not a CUDA OOM."""
    oom = logs.oom
    if oom is None or oom.total_bytes or oom.count > 1 or not oom.example:
        return False
    return any(e.kind == "host_memory_kill" and oom.example.startswith(e.example[:100]) for e in logs.errors)


def _beyond_card(oom) -> bool:
    """An OOM asking for more than the card's whole capacity in one allocation."""
    return bool(oom is not None and oom.tried_bytes and oom.total_bytes and oom.tried_bytes > oom.total_bytes)


def _fragmented(oom) -> bool:
    """Reserved-but-unallocated memory that would have served the failed request."""
    spare = oom.reserved_unallocated_bytes or 0
    return spare >= max(oom.tried_bytes or 0, GIB // 2) and (not oom.total_bytes or spare >= 0.02 * oom.total_bytes)


def _in_graph_pools(oom) -> bool:
    """torch >= 2.4: CUDA graph pools held at least as much cached memory as the request asked
    for (and half a GiB or more), which the allocation could not take."""
    pools = oom.private_pools_bytes or 0
    return pools >= max(oom.tried_bytes or 0, GIB // 2)


def under_cap(oom) -> bool:
    """torch was held to a memory fraction (its "allowed" figure) and the card still had room
    for the request: the cap refused it, not the card."""
    if not oom.allowed_bytes or oom.free_bytes is None or not oom.total_bytes:
        return False
    tried = oom.tried_bytes or 0
    if oom.allocated_bytes is not None:
        # torch refuses past the cap what it has reserved plus the request: where its figures
        # put that under the cap, the cap did not refuse it
        reserved = oom.allocated_bytes + (oom.reserved_unallocated_bytes or 0)
        if reserved + tried < 0.98 * oom.allowed_bytes:
            return False
    return oom.allowed_bytes < oom.total_bytes and oom.free_bytes > tried


def _fraction_at_edge(cfg) -> Finding | None:
    frac, kind = cfg.memory_fraction, cfg.memory_fraction_kind
    if frac is None:
        return None
    edge = {"total": T.VLLM_UTIL_EDGE, "free_static": T.SGLANG_MFS_EDGE}.get(kind or "")
    if edge is None or frac < edge:
        return None
    # the engine whose fraction is of this kind, and its flag from the engine table
    engine = next(e for e, k in MEMORY_FRACTION_KIND.items() if k == kind)
    flag = role_flag(engine, "memory_fraction")
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
    if cap.source == "budget" and ctx.memory_held_elsewhere_gib is not None:
        return None  # the budget assumes the card is the engine's own; here it was not
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


def _oom_causes(ctx: TriageContext, phase: str | None) -> tuple[str, ...]:
    """Which causes a CUDA OOM points at depends on its phase and what else is true.

    Weights that fill the card (its size and their share both known): the card is too small.
    Memory held by another process at start-up: placement. An OOM in a start-up phase after
    the weights loaded (profiling, CUDA-graph capture, sampler warm-up, TGI warm-up): the
    memory settings left no room for it. While serving too: the engines preallocate the KV
    cache, so a request that runs out of memory ran out in the margin left beside it (its
    activations, a long prefill): the margin or the batch the flags allow is at the edge,
    whatever the fraction (KV-cache pressure is named by its own evidence: usage, preemption).
    """
    if _beyond_card(ctx.evidence.logs.oom if ctx.evidence.logs else None):
        # one allocation larger than the whole card: no memory setting makes it fit, so no
        # cause in the set is named (an attention kernel or a request shape is at fault)
        return ()
    b = ctx.budget
    startup = ctx.evidence.logs.startup if ctx.evidence.logs else None
    weights = (startup.weights_gib if startup else None) or (b.weights_gib if b else None)
    total = ctx.gpu_total_gib.value if ctx.gpu_total_gib else None
    if weights is not None and total and weights >= (0.85 if phase in (None, "loading") else 0.98) * total:
        return ("weights_too_large",)
    if ctx.memory_held_elsewhere_gib is not None:
        return ("platform_amplifier",)
    if phase == "loading" and _load_filled_card(ctx.evidence.logs.oom):
        # the card's size and the weights' share both come from the OOM: loading alone filled it
        return ("weights_too_large",)
    return ("params_near_edge",)
