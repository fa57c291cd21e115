"""The triage runbook: evidence in, report out. One entry point for CLI, Slack and tests.

>>> report = triage(Evidence(target="llm/qwen"))
>>> report.verdict.primary
'insufficient_evidence'
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from runbooks.catalogs import thresholds as T
from runbooks.catalogs.engine_flags import role_flag
from runbooks.model.evidence import Evidence
from runbooks.model.report import Action, EdgeFlag, MemorySplit, Report
from runbooks.remediation.solver import ENGINE_FLAGS
from runbooks.triage.actions import safe_flags
from runbooks.triage.checks import ROUNDS
from runbooks.triage.context import GIB, TriageContext, build_context
from runbooks.triage.failure_actions import engine_of
from runbooks.triage.verdict import decide

#: steps reported as progress ("3/7 kv_cache"): evidence, the five rounds, the verdict
STEPS: tuple[str, ...] = ("evidence", *(name for name, _ in ROUNDS), "verdict")

Progress = Callable[[int, int, str], None]


def triage(evidence: Evidence, now: datetime | None = None, on_step: Progress | None = None) -> Report:
    """Run the five rounds over the evidence and decide. Pure: `now` only stamps the report."""
    total = len(STEPS)

    def step(i: int, name: str) -> None:
        if on_step is not None:
            on_step(i, total, name)

    step(1, "evidence")
    ctx = build_context(evidence)
    results = []
    for i, (name, check) in enumerate(ROUNDS, start=2):
        step(i, name)
        results.append(check(ctx))
    checks = tuple(results)
    step(total, "verdict")
    verdict = decide(checks, ctx)
    actions: dict[str, Action] = {}
    for cause in verdict.causes:
        for a in cause.actions:
            actions.setdefault(a.id, a)
    cfg = evidence.server_config
    return Report(
        target=evidence.target or (evidence.workload.name if evidence.workload else None),
        generated_at=now,
        engine=ctx.engine,
        engine_version=(cfg.engine_version if cfg else None) or (evidence.logs.engine_version if evidence.logs else None),
        model=ctx.model.name if ctx.model else (cfg.model if cfg else None),
        gpu=ctx.gpu_name,
        verdict=verdict,
        memory=_memory_split(ctx),
        budget=ctx.budget,
        profile=evidence.requests,
        flags_at_edge=_flags_at_edge(ctx) or _flags_the_failure_names(verdict),
        checks=checks,
        actions=tuple(actions.values()),
        read_issues=evidence.issues,
        sources=evidence.sources,
        managers=evidence.workload.managers if evidence.workload else None,
        target_kind=target_kind(evidence),
    )


#: the kinds a target names as NAMESPACE/KIND/NAME, by the lower-case word it uses
_TARGET_KINDS = {k.lower(): k for k in ("Deployment", "StatefulSet", "InferenceService", "LeaderWorkerSet")}


def target_kind(evidence: Evidence) -> str | None:
    """The kind of the object the target names: the KIND of NAMESPACE/KIND/NAME, else the
    workload's own; None where no workload was read.

    >>> target_kind(Evidence(target="llm/inferenceservice/qwen"))
    'InferenceService'
    >>> target_kind(Evidence(target="llm/vllm")) is None
    True
    """
    parts = (evidence.target or "").split("/")
    if len(parts) == 3 and parts[1].lower() in _TARGET_KINDS:
        return _TARGET_KINDS[parts[1].lower()]
    return evidence.workload.kind if evidence.workload else None


def _memory_split(ctx: TriageContext) -> MemorySplit | None:
    ev = ctx.evidence
    total = ctx.gpu_total_gib.value if ctx.gpu_total_gib else None
    used = ctx.gpu_used_gib.value if ctx.gpu_used_gib else None
    kv_ratio = ctx.kv_usage_ratio.value if ctx.kv_usage_ratio else None
    startup = ev.logs.startup if ev.logs else None
    pool = ctx.kv_capacity_tokens
    tokens = dict(kv_cache_tokens=int(pool.value) if pool is not None and pool.value else None,
                  kv_tokens_measured=pool is not None and pool.source != "budget")
    if startup is not None and startup.weights_gib is not None and startup.kv_cache_gib is not None:
        static = startup.weights_gib + sum(
            x or 0.0 for x in (startup.activation_gib, startup.non_torch_gib, startup.cudagraph_gib)
        )
        return MemorySplit(total or startup.total_gpu_gib, used, round(static, 2), round(startup.kv_cache_gib, 2),
                           round(startup.weights_gib, 2), "engine_log", kv_ratio, **tokens)
    b = ctx.budget
    if b is not None:
        kv_gib = b.kv_cache_gib
        if tokens["kv_tokens_measured"] and tokens["kv_cache_tokens"] and b.kv_bytes_per_token:
            # one value per fact: the cache is the pool the engine reported, in the budget's
            # bytes per token, not the budget's own pool beside it
            kv_gib = tokens["kv_cache_tokens"] * b.kv_bytes_per_token / GIB
        return MemorySplit(total, used, round(b.static_gib, 2), round(kv_gib, 2), round(b.weights_gib, 2),
                           "budget", kv_ratio, **tokens)
    if total is None:
        # a reading in use against an unknown card says nothing about the split (and would
        # print as "of n/a GiB"); the in-use figure stays in the concurrency round's facts
        return None
    return MemorySplit(total, used, None, None, None, "gpus", kv_ratio)


#: the facts of load, not of a failure: the queue and the refusals (`checks.concurrency`)
_LOAD_FACTS = frozenset({"queue_and_rejects", "queue_depth_only", "rejects_only"})


def _flags_the_failure_names(verdict) -> tuple[EdgeFlag, ...]:
    """With "flags at the edge" named but no flag value past its line (the engine refused or
    ran out of memory with values below the lines), the flags its actions move are the ones at
    the edge: listed from those changes, so the section never says "none" beside the verdict."""
    cause = next((c for c in verdict.causes if c.id == "params_near_edge"), None)
    if cause is None:
        return ()
    # named on the queue and the rejects alone, nothing failed: the flags are at the edge of
    # the load, and the section says so rather than naming a failure the evidence lacks
    reason = "edge_by_load" if cause.evidence_for and all(
        f.key in _LOAD_FACTS for f in cause.evidence_for) else "edge_by_failure"
    out: dict[str, EdgeFlag] = {}
    for action in cause.actions:
        for change in action.changes:
            if change.kind == "set_arg" and change.flag and change.flag not in out:
                out[change.flag] = EdgeFlag(change.flag, "default" if change.old is None else f"{change.old}",
                                            "(unset)" if change.new is None else f"{change.new}", reason)
    return tuple(out.values())


def _flags_at_edge(ctx: TriageContext) -> tuple[EdgeFlag, ...]:
    cfg = ctx.config
    if cfg is None:
        return ()
    safe = safe_flags(ctx)
    # each flag spelled as the engine names it (the engine table's roles)
    length_flag, seqs_flag, _ = ENGINE_FLAGS[engine_of(ctx)]
    out: list[EdgeFlag] = []
    if cfg.memory_fraction is not None and cfg.memory_fraction_kind == "total" and (
        cfg.memory_fraction >= T.VLLM_UTIL_EDGE
    ):
        out.append(EdgeFlag(role_flag("vllm", "memory_fraction"), f"{cfg.memory_fraction:g}",
                            f"{safe.get('gpu_memory_utilization', T.SAFE_VLLM_UTIL):g}", "edge_memory_fraction"))
    if cfg.memory_fraction is not None and cfg.memory_fraction_kind == "free_static" and (
        cfg.memory_fraction >= T.SGLANG_MFS_EDGE
    ):
        out.append(EdgeFlag(role_flag("sglang", "memory_fraction"), f"{cfg.memory_fraction:g}",
                            f"{safe.get('mem_fraction_static', 0.85):g}", "edge_memory_fraction"))
    cap = ctx.kv_capacity_tokens.value if ctx.kv_capacity_tokens else None
    prof = ctx.evidence.requests
    if cfg.max_num_seqs and cfg.max_model_len and cap:
        # with a profile: do max-num-seqs requests of the p95 length fit? without: full length, 2x slack
        if prof is not None and prof.p95_input_tokens is not None:
            over = cfg.max_num_seqs * (prof.p95_input_tokens + (prof.p95_output_tokens or 0)) > cap
        else:
            over = cfg.max_num_seqs * cfg.max_model_len > 2 * cap
        if over and safe["max_num_seqs"] < cfg.max_num_seqs:
            out.append(EdgeFlag(seqs_flag, str(cfg.max_num_seqs), str(safe["max_num_seqs"]),
                                "edge_seqs_over_cache"))
    if cfg.max_model_len and prof is not None and prof.p99_input_tokens is not None and (
        cfg.max_model_len > 2 * (prof.p99_input_tokens + (prof.p99_output_tokens or 0))
    ):
        out.append(EdgeFlag(length_flag, str(cfg.max_model_len), str(safe["max_model_len"]), "edge_len_over_p99"))
    return tuple(out)


__all__ = ["GIB", "STEPS", "triage"]
