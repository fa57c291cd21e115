"""Recommended actions: the runbook's action tables, with values computed from the evidence.

Tier "now" is what on-call may do at night without a load test (lower concurrency or context,
add margin, a temporary pool split, fix probes); "escalate" needs owners and load tests
(quantization, TP, more GPUs). Flag values come from the one safe-flag solver
(`runbooks.remediation.solver`), the same one `gpumem budget --profile` uses, and each action
carries the typed changes (`runbooks.model.changes.Change`) a plan would apply.
"""

from __future__ import annotations

from dataclasses import replace

from runbooks.catalogs import thresholds as T
from runbooks.catalogs.engine_flags import ROLES, role_flag
from runbooks.model.changes import (
    AddStartupProbe,
    Change,
    HpaOnQueueDepth,
    LowerMaxSurge,
    RaiseMemoryLimit,
    Scale,
    SetArg,
    SplitPools,
)
from runbooks.model.report import Action, Finding
from runbooks.remediation.solver import (
    ENGINE_FLAGS,
    Launched,
    SafePlan,
    solve_from_capacity,
    solve_safe_flags,
)
from runbooks.remediation.split import default_threshold
from runbooks.remediation.value_ranges import number_of
from runbooks.sizing.capacity import MeasuredPool
from runbooks.triage.context import TriageContext
from runbooks.triage.failure_actions import (
    DEFAULT_FRACTION,
    default_max_num_seqs,
    engine_of,
    margin_action,
    oom_actions,
    parallel_actions,
    platform_actions,
    refusal_actions,
    restart_action,
    tgi_limits_held,
    wiggle_action,
)
from runbooks.triage.health import in_kubernetes
from runbooks.triage.spelling import choose, engine_version, respell

_ORDER = (
    "fit_max_model_len", "raise_memory_fraction", "raise_memory_fraction_to", "unset_batch_total_tokens",
    "lower_batch_prefill_tokens", "lower_input_with_prefill", "limit_cuda_graphs", "set_safe_flags", "lower_max_num_seqs", "cap_max_model_len",
    "raise_process_fraction", "lower_memory_fraction", "add_memory_margin", "add_memory_margin_any", "lower_memory_fraction_to",
    "lower_wiggle_room", "check_tgi_version_for_wiggle", "set_expandable_segments", "find_memory_cap",
    "scale_out", "split_pools", "fit_tp_to_heads", "fit_pp_to_layers", "fit_layout_to_gpus", "check_visible_gpus",
    "fix_parallel_layout", "free_gpu_memory", "add_shm", "fix_gpu_runtime", "fix_probe_path", "add_startup_probe",
    "raise_memory_limit", "isolate_gpu", "hpa_on_queue_depth", "bigger_mig_profile", "lower_max_surge",
    "fix_launch", "read_previous_log", "set_max_running", "lower_concurrency_unsized", "one_engine_per_gpu",
    "check_sharing_layer", "raise_host_memory", "quantize_weights", "quantize_weights_unnamed", "bigger_gpu_or_tp",
    "bigger_card_or_tp", "review_tp", "upgrade_tgi_for_wiggle_room",
)
#: actions that need owners and a load test: gpumem never plans or applies them, whatever a
#: triage recorded (quantization, a bigger GPU or MIG slice, a TP review)
ESCALATE_ONLY = frozenset({"quantize_weights", "quantize_weights_unnamed", "bigger_gpu_or_tp", "bigger_card_or_tp",
                           "bigger_mig_profile", "review_tp", "upgrade_tgi_for_wiggle_room"})
#: findings that say the engine met a CUDA OOM
_OOM_FINDINGS = frozenset({"cuda_oom", "startup_cuda_oom", "runtime_cuda_oom"})
#: the memory-fraction key of `safe_flags` per engine (the engine's flag, underscored)
_FRACTION_KEY = {engine: flags[2].replace("-", "_") for engine, flags in ENGINE_FLAGS.items()}
#: which kind of fraction each engine's flag is (ServerConfig.memory_fraction_kind)
_FRACTION_KIND = {"vllm": "total", "sglang": "free_static", "tgi": "process"}


def _engine(ctx: TriageContext) -> str:
    engine = (ctx.config.engine if ctx.config else None) or ctx.engine or "vllm"
    return engine if engine in ENGINE_FLAGS else "vllm"


def safe_plan(ctx: TriageContext) -> SafePlan | None:
    """The safe flags for this service, from the one solver; None without a server config.

    With the model known, the KV pool comes from the capacity budget (as in `gpumem budget`);
    otherwise from the capacity the engine reported.
    """
    cfg = ctx.config
    if cfg is None:
        return None
    profile = ctx.evidence.requests
    spelled = {"engine_version": engine_version(ctx), "used_flags": tuple(cfg.flags)}
    reported = ctx.kv_capacity_tokens
    if ctx.model is not None and ctx.budget_inputs is not None:
        # the engine's own capacity at the running flags, where it reported one, anchors the pool
        measured = (MeasuredPool(int(reported.value), reported.source)
                    if reported is not None and reported.source != "budget" and reported.value else None)
        return replace(solve_safe_flags(ctx.model, ctx.budget_inputs, profile, measured=measured), **spelled)
    engine = _engine(ctx)
    kind = cfg.memory_fraction_kind or _FRACTION_KIND[engine]
    fraction = cfg.memory_fraction if kind == _FRACTION_KIND[engine] else None
    if fraction is None and engine == "vllm" and kind == "total":
        fraction = 0.9  # vLLM's default --gpu-memory-utilization
    launched = Launched(engine, cfg.max_model_len, cfg.max_num_seqs, fraction)
    cap = ctx.kv_capacity_tokens.value if ctx.kv_capacity_tokens else None
    return replace(solve_from_capacity(
        launched, cap, profile, block_size=cfg.block_size, kv_cache_gib=_kv_gib(ctx),
        gpu_total_gib=ctx.gpu_total_gib.value if ctx.gpu_total_gib else None,
        model_max=ctx.model.max_position_embeddings if ctx.model else None), **spelled)


def safe_flags(ctx: TriageContext) -> dict[str, float | int]:
    """The safe plan's values under engine-independent keys (max_model_len, max_num_seqs) and
    the engine's memory-fraction key (gpu_memory_utilization, mem_fraction_static,
    cuda_memory_fraction)."""
    plan = safe_plan(ctx)
    if plan is None:
        return {}
    out: dict[str, float | int] = {"max_model_len": plan.max_model_len, "max_num_seqs": plan.max_num_seqs}
    if plan.memory_fraction is not None:
        out[_FRACTION_KEY[plan.engine]] = plan.memory_fraction
    return out


def _kv_gib(ctx: TriageContext) -> float | None:
    startup = ctx.evidence.logs.startup if ctx.evidence.logs else None
    if startup is not None and startup.kv_cache_gib:
        return startup.kv_cache_gib
    return ctx.budget.kv_cache_gib if ctx.budget is not None else None


def _current_fraction(ctx: TriageContext, plan: SafePlan) -> float | None:
    cfg = ctx.config
    if cfg is not None and cfg.memory_fraction is not None and (cfg.memory_fraction_kind or
                                                                 _FRACTION_KIND[plan.engine]) == _FRACTION_KIND[plan.engine]:
        return cfg.memory_fraction
    return None


def _plan_changes(ctx: TriageContext, plan: SafePlan, container: str | None) -> tuple[Change, ...]:
    """set_arg changes for every flag the plan moves (flags already at their value are left out)."""
    cfg = ctx.config
    length_flag, seqs_flag, fraction_flag = plan.flags
    out = []
    if plan.max_input_tokens is not None and plan.max_input_tokens != cfg.max_input_tokens:
        out.append(SetArg(container, role_flag(plan.engine, "input_length"), cfg.max_input_tokens, plan.max_input_tokens))
    if plan.max_model_len != cfg.max_model_len:
        out.append(SetArg(container, length_flag, cfg.max_model_len, plan.max_model_len))
    if plan.max_num_seqs != cfg.max_num_seqs:
        out.append(SetArg(container, seqs_flag, cfg.max_num_seqs, plan.max_num_seqs))
    current = _current_fraction(ctx, plan)
    if plan.memory_fraction is not None and plan.memory_fraction != current:
        out.append(SetArg(container, fraction_flag, current, plan.memory_fraction))
    return tuple(out)


def actions_for(cause_id: str, findings: list[Finding], ctx: TriageContext) -> tuple[Action, ...]:
    ids = {f.id for f in findings}
    cfg = ctx.config
    wl = ctx.evidence.workload
    container = wl.container if wl else None
    plan = safe_plan(ctx)
    acts: dict[str, Action] = {}

    def add(action_id: str, tier: str = "now", changes: tuple[Change, ...] = (), **params) -> None:
        # one tier per action, whatever verdict recommends it (ESCALATE_ONLY is the table)
        tier = tier_of(action_id)
        # a flag set to what it already is (its value, or the engine's default when unset)
        # changes nothing: left out, and an action left with no flag to set is not offered
        moved = tuple(c for c in changes if not is_no_op(ctx, c))
        if changes and any(c.kind == "set_arg" for c in changes) and not any(c.kind == "set_arg" for c in moved):
            return
        changes = moved
        # flags spelled for the deployed version; a flag it rejects is left out, and an
        # action whose every flag it rejects is not recommended (`runbooks.triage.spelling`)
        spelled, refused = respell(ctx, engine_of(ctx), changes)
        if refused and not any(c.kind == "set_arg" for c in spelled):
            return
        if refused:
            params["withheld"] = refused
        if isinstance(params.get("flag"), str):
            params["flag"] = choose(ctx, engine_of(ctx), params["flag"]).flag or params["flag"]
        if engine_of(ctx) == "tgi":
            held = tgi_limits_held(ctx, spelled, params)
            if held is None:
                return  # TGI would refuse to start with these limits: not offered
            spelled = held
        acts.setdefault(action_id, Action(action_id, params, tier, spelled))

    if cause_id == "kv_cache_pressure":
        if plan is not None and cfg.max_num_seqs and plan.max_num_seqs < cfg.max_num_seqs:
            add("lower_max_num_seqs", current=cfg.max_num_seqs, target=plan.max_num_seqs, flag=plan.flags[1],
                changes=(SetArg(container, plan.flags[1], cfg.max_num_seqs, plan.max_num_seqs),))
        if plan is not None and cfg.max_model_len and plan.max_model_len < cfg.max_model_len:
            # without measured request lengths the target is the runbook's template, not a p99
            add("cap_max_model_len", current=cfg.max_model_len, target=plan.max_model_len, flag=plan.flags[0],
                **({"variant": "template"} if plan.length_basis == "template" else {}),
                changes=(SetArg(container, plan.flags[0], cfg.max_model_len, plan.max_model_len),))
        replicas = wl.replicas if wl else None
        if replicas:
            target = replicas + max(1, replicas // 2)
            add("scale_out", current=replicas, target=target, changes=(Scale(replicas, target),))
        long_share = ctx.evidence.requests.share("L", "XL") if ctx.evidence.requests else None
        if long_share and long_share >= T.MIXED_LONG_SHARE:
            # the same split, and the same tier, as under a mixed pool
            add("split_pools", "now", long_pct=round(long_share * 100, 1),
                changes=(SplitPools(container, "threshold", None, default_threshold()),))
        if not acts:
            _concurrency_from_log(ctx, add, container)
        if not acts:
            # nothing gives a number to cap at (no running count, no flags): say so, and what sizes it
            add("lower_concurrency_unsized", flag=ENGINE_FLAGS[engine_of(ctx)][1])
    elif cause_id == "params_near_edge":
        if "startup_capacity_error" in ids:
            # the engine refused to start for lack of cache: give the cache room (or ask for
            # less of it); the stop-the-bleeding template's lower fraction would make it worse
            refusal_actions(ctx, add, container)
        else:
            if ids & _OOM_FINDINGS:
                oom_actions(ctx, add, container)
            # an OOM while starting has its own fix (graphs off, fewer warm-up sequences); the
            # stop-the-bleeding template is for a server that was serving
            startup_fix = "startup_cuda_oom" in ids and bool(
                acts.keys() & {"limit_cuda_graphs", "lower_max_num_seqs", "raise_process_fraction",
                               "lower_batch_prefill_tokens", "lower_input_with_prefill"})
            if plan is not None and not startup_fix:
                changes = _plan_changes(ctx, plan, container)
                # the title names the flags the action moves, not those already at their value
                moving = {c.flag for c in changes if not is_no_op(ctx, c)}
                if moving:
                    add("set_safe_flags", changes=changes, args=" ".join(plan.args(moving)), **safe_flags(ctx))
            current = _current_fraction(ctx, plan) if plan is not None else None
            if plan is not None and plan.engine == "vllm" and current is not None and current >= T.VLLM_UTIL_EDGE:
                target = plan.memory_fraction if plan.memory_fraction is not None else T.SAFE_VLLM_UTIL
                flag = plan.flags[2]
                add("lower_memory_fraction", flag=flag, current=current, target=target,
                    changes=(SetArg(container, flag, current, target),))
            if not startup_fix and _engine(ctx) == "tgi" and ids & _OOM_FINDINGS:
                # the batch flags bound what a batch asks for; the margin beside TGI's cache is
                # its wiggle room, whatever else is offered (`failure_actions.wiggle_action`)
                wiggle_action(ctx, add)
            elif not startup_fix and not acts.keys() & {"set_safe_flags", "lower_memory_fraction"}:
                margin_action(ctx, add, container)
    elif cause_id == "weights_too_large":
        _weights_actions(ctx, add)
    elif cause_id == "mixed_pool":
        prof = ctx.evidence.requests
        # the split is planned in two phases (`runbooks.remediation.split`); its typed change names
        # the server container and the routing threshold, the runbook's long-request boundary
        add("split_pools", "now", long_pct=round(prof.share("L", "XL") * 100, 1) if prof else None,
            changes=(SplitPools(container, "threshold", None, default_threshold()),))
    elif cause_id == "parallelism_misconfig":
        parallel_actions(ctx, add, container)
        if ("parallelism_exceeds_gpus" in ids or "gpus_idle" in ids) and "fit_layout_to_gpus" not in acts:
            add("fix_parallel_layout", gpus=ctx.gpus_requested, tp=(cfg.tensor_parallel_size if cfg else None) or 1)
        add("review_tp", "escalate")
    elif cause_id == "platform_amplifier":
        platform_actions(ctx, ids, add, container)
        if "probe_path_not_found" in ids:
            add("fix_probe_path", answer=next(f for f in findings if f.id == "probe_path_not_found")
                .facts[0].params["answer"])
        elif "liveness_kills_slow_start" in ids or "probe_kills" in ids:
            add("add_startup_probe", budget_s=600, changes=(AddStartupProbe(container, None, None, 600),))
        if "container_oomkilled" in ids:
            # the new limit is read at plan time: the current one raised by half (a whole GiB)
            add("raise_memory_limit", changes=(RaiseMemoryLimit(container, "limits.memory", None, None),))
        if "gpu_shared" in ids:
            if in_kubernetes(ctx):
                add("isolate_gpu")
            else:
                shared = next(f for f in findings if f.id == "gpu_shared").facts[0].params
                add("one_engine_per_gpu", gpus=shared["gpu"], launches=shared["processes"])
        if "engines_share_gpu" in ids:
            shared = next(f for f in findings if f.id == "engines_share_gpu").facts[0].params
            add("one_engine_per_gpu", gpus=shared["gpus"], launches=shared["launches"])
        if "gpu_sharing_layer_error" in ids:
            add("check_sharing_layer", example=next(f for f in findings if f.id == "gpu_sharing_layer_error")
                .facts[0].params["example"][:160])
        if "host_memory_killed" in ids:
            add("raise_host_memory")
        if "hpa_cpu_only" in ids:
            add("hpa_on_queue_depth", target=6, changes=(HpaOnQueueDepth(None, None, 6),))
        if "mig_slice_small" in ids:
            add("bigger_mig_profile", "escalate",
                profile=wl.gpu.mig_profile if wl and wl.gpu else None)
        if "rollout_step_large" in ids:
            add("lower_max_surge", current=wl.max_surge if wl else None,
                changes=(LowerMaxSurge("maxSurge", wl.max_surge if wl else None, 0),))
        if "launch_problem" in ids:
            add("fix_launch")
        if not acts:
            restart_action(ctx, add)
    return tuple(sorted(acts.values(), key=lambda a: _ORDER.index(a.id)))


def tier_of(action_id: str) -> str:
    """The tier of an action, the same in every verdict: "escalate" for what needs owners and a
    load test (ESCALATE_ONLY), "now" for everything on-call may do."""
    return "escalate" if action_id in ESCALATE_ONLY else "now"


def engine_default(ctx: TriageContext, flag: str) -> float | int | None:
    """The value the engine runs with when `flag` is not set: what its start-up printout says,
    else the default the catalogs know for its version; None when neither is known."""
    engine = engine_of(ctx)
    startup = ctx.evidence.logs.startup if ctx.evidence.logs else None
    ran = _printed_launch_value(ctx, engine, flag)
    if ran is not None:
        return ran
    role = next((r for r, f in ROLES.get(engine, {}).items() if f == flag), None)
    if engine == "vllm" and role == "memory_fraction":
        printed = startup.gpu_memory_utilization if startup else None
        return printed if printed is not None else DEFAULT_FRACTION["vllm"]
    if engine == "vllm" and role == "concurrency":
        if startup is not None and startup.max_num_seqs:
            return startup.max_num_seqs
        return default_max_num_seqs(ctx) if engine_version(ctx) else None  # the default moved in V1
    if engine == "tgi" and role == "memory_fraction":
        return 1.0
    return None


def _printed_launch_value(ctx: TriageContext, engine: str, flag: str) -> float | int | None:
    """What the engine's own launch printout in the log says it ran `flag` with (TGI's
    ``Default `max_total_tokens` to 4096``, its `Args { ... }`, SGLang's `server_args`), where
    the log is this engine's; None where it does not say (or says no number)."""
    logs = ctx.evidence.logs
    printed = logs.server_config if logs else None
    if printed is None or printed.engine != engine:
        return None
    return number_of(printed.flags.get(flag), integer=False)


def is_no_op(ctx: TriageContext, change: Change) -> bool:
    """A set_arg change to the value the flag already has: its current value, or, unset, the
    engine's default."""
    if change.kind != "set_arg" or change.new is None:
        return False
    if change.old is not None:
        return change.old == change.new
    default = engine_default(ctx, change.flag) if change.flag else None
    return default is not None and default == change.new


def _weights_actions(ctx: TriageContext, add) -> None:
    """Weights too large is named only with the card's size known; the actions say by how much."""
    total = ctx.gpu_total_gib.value if ctx.gpu_total_gib else None
    startup = ctx.evidence.logs.startup if ctx.evidence.logs else None
    weights = (startup.weights_gib if startup else None) or (ctx.budget.weights_gib if ctx.budget else None)
    oom = ctx.evidence.logs.oom if ctx.evidence.logs else None
    if weights is None and oom is not None and oom.phase == "loading" and oom.allocated_bytes:
        weights = (oom.allocated_bytes + (oom.tried_bytes or 0)) / 2**30  # at least what loading held
    if ctx.model is not None:
        add("quantize_weights", "escalate", model=ctx.model.name)
    elif weights is not None and total:
        add("quantize_weights_unnamed", "escalate", weights_gib=round(weights, 1), total_gib=round(total, 1))
    if ctx.gpu_name:
        add("bigger_gpu_or_tp", "escalate", gpu=ctx.gpu_name)
    elif total:
        add("bigger_card_or_tp", "escalate", total_gib=round(total, 1))


def _concurrency_from_log(ctx: TriageContext, add, container: str | None) -> None:
    """KV pressure seen in a log with no flags known: cap concurrency at what the cache held
    when it filled (the peak running requests scaled to the runbook's 90% target), else at
    half the engine's default."""
    engine = engine_of(ctx)
    flag = ENGINE_FLAGS[engine][1]
    cfg = ctx.config
    peak = ctx.evidence.logs.stats_peak if ctx.evidence.logs else None
    current = (cfg.max_num_seqs if cfg else None) or (default_max_num_seqs(ctx) if engine == "vllm" else None)
    target = None
    if peak is not None and peak.running and peak.kv_cache_usage_ratio:
        target = max(1, int(peak.running * T.SAFE_KV_TARGET_RATIO / peak.kv_cache_usage_ratio))
    elif current:
        target = max(1, current // 2)
    if target is None or (current is not None and target >= current):
        return
    if current is None:
        add("set_max_running", flag=flag, target=target, running=int(peak.running),
            usage_pct=round(peak.kv_cache_usage_ratio * 100, 1),
            changes=(SetArg(container, flag, None, target),))
    else:
        add("lower_max_num_seqs", current=current, target=target, flag=flag,
            changes=(SetArg(container, flag, cfg.max_num_seqs if cfg else None, target),))
