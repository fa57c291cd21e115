"""Actions for an engine that failed: start-up refusals, OOMs by phase, layouts the engine
rejected, and platform failures. Each is sized from what the evidence knows (the capacity the
engine printed, the card's size, the weights' share, the heads of the model, the GPUs seen);
an action whose size is unknown is not offered.

Engine flag names per engine come from the safe-flag solver's table, so a printed flag is the
flag a plan would set.
"""

from __future__ import annotations

import math
import re

from runbooks.catalogs import thresholds as T
from runbooks.catalogs.engine_defaults import (
    TGI_WIGGLE_ROOM_ENV_FROM,
    parse_version,
    tgi_wiggle_room,
    vllm_regime,
    vllm_v1_limits,
)
from runbooks.catalogs.engine_flags import FLAGS, role_flag
from runbooks.catalogs.gpus import UnknownGpu, find_gpu
from runbooks.model.changes import AddShm, SetArg
from runbooks.remediation.solver import ENGINE_FLAGS, SAFE_FRACTION
from runbooks.remediation.value_ranges import (
    TGI_LIMIT_FIELD_OF,
    spelled_flag,
    tgi_default_input,
    tgi_limits_broken,
)
from runbooks.sizing.budget import tgi_config_chunks, tgi_wiggle_env
from runbooks.triage.checks.concurrency import oom_phase, under_cap
from runbooks.triage.checks.static import refusal_capacity
from runbooks.triage.context import TriageContext
from runbooks.triage.spelling import engine_version

#: the engines' own defaults for the memory fraction (SGLang's depends on the card; 0.88 is its
#: value on the cards people paste from)
DEFAULT_FRACTION = {"vllm": 0.9, "sglang": 0.88}
#: the most a raised fraction may be: past it there is no margin left for activations
MAX_RAISED_FRACTION = {"vllm": 0.92, "sglang": 0.95}
#: the value that turns CUDA graphs off, by the kind of the engine's no_cuda_graphs flag
#: (a switch: set; TGI's list of batch sizes: 0)
_GRAPHS_OFF = {"bool": True, "int_list": 0}
#: what a raised TGI cap leaves above what torch held plus the allocation it was refused: the
#: refused allocation is one of the warm-up's, not its last
CAP_SLACK = 0.05
#: the step a lowered TGI_WIGGLE_ROOM takes, and the least it is lowered to
WIGGLE_STEP, WIGGLE_FLOOR = 0.05, 0.8


def _engine_known(ctx: TriageContext) -> bool:
    return bool((ctx.config.engine if ctx.config else None) or ctx.engine)


def engine_of(ctx: TriageContext) -> str:
    engine = (ctx.config.engine if ctx.config else None) or ctx.engine or "vllm"
    return engine if engine in ENGINE_FLAGS else "vllm"


def fit_length(capacity: int) -> int:
    """A context length people set that the printed capacity holds: down to a multiple of 1024
    (of 256 below 4096).

    >>> fit_length(3664), fit_length(34736), fit_length(122080)
    (3584, 33792, 121856)
    """
    step = 1024 if capacity >= 4096 else 256
    return max(step, capacity // step * step) if capacity >= step else capacity


def _fraction(ctx: TriageContext, engine: str) -> float | None:
    """The memory fraction the engine ran with: its flag, the engine's printout, or, when a
    launch command is known and does not set it, the engine's default."""
    cfg = ctx.config
    startup = ctx.evidence.logs.startup if ctx.evidence.logs else None
    if cfg is not None and cfg.memory_fraction is not None:
        return cfg.memory_fraction
    if startup is not None and engine == "vllm" and startup.gpu_memory_utilization is not None:
        return startup.gpu_memory_utilization
    if cfg is not None and cfg.launch_form not in (None, "engine-printout") and engine in DEFAULT_FRACTION:
        return DEFAULT_FRACTION[engine]
    return None


def _weights_share(ctx: TriageContext) -> float | None:
    startup = ctx.evidence.logs.startup if ctx.evidence.logs else None
    weights = (startup.weights_gib if startup else None) or (ctx.budget.weights_gib if ctx.budget else None)
    total = ctx.gpu_total_gib.value if ctx.gpu_total_gib else None
    if weights is None or not total:
        return None
    static = weights + ((startup.non_torch_gib or 0) + (startup.activation_gib or 0) if startup else 0)
    return static / total


def refusal_actions(ctx: TriageContext, add, container: str | None) -> None:
    """A start-up capacity refusal: the context down to what the engine said it holds, the
    memory fraction up where the card has room, or TGI's batch token budget down."""
    engine = engine_of(ctx)
    logs = ctx.evidence.logs
    length_flag, _, fraction_flag = ENGINE_FLAGS[engine]
    startup = logs.startup if logs else None
    cfg = ctx.config
    length = (startup.max_model_len if startup else None) or (cfg.max_model_len if cfg else None)
    capacity = refusal_capacity(ctx)
    fitted = bool(capacity and length and capacity < length)
    if fitted:
        target = fit_length(capacity)
        add("fit_max_model_len", flag=length_flag, current=length, target=target, capacity=capacity,
            changes=(SetArg(container, length_flag, cfg.max_model_len if cfg else None, target),))
    if engine == "tgi" and logs is not None:
        _tgi_budget(ctx, add, container)
    if fitted and _fraction(ctx, engine) is None:
        return  # a length that fits is known; raising a fraction whose value is unknown may change nothing
    if not _raise_fraction(ctx, add, container, engine, fraction_flag) and capacity is None:
        # the engine printed no capacity and the fraction is already at its default: the most
        # the card can give the cache without losing the margin
        _raise_fraction(ctx, add, container, engine, fraction_flag, floor=MAX_RAISED_FRACTION.get(engine))


def _tgi_budget(ctx: TriageContext, add, container: str | None) -> None:
    cfg = ctx.config
    logs = ctx.evidence.logs
    total_tokens = cfg.max_batch_total_tokens if cfg else None
    if (logs.count("tgi_total_tokens_oom") or logs.count("tgi_max_total_tokens_oom")) and total_tokens:
        add("unset_batch_total_tokens", current=total_tokens,
            changes=(SetArg(container, role_flag("tgi", "batch_total_tokens"), total_tokens, None),))
    if logs.count("tgi_prefill_oom"):
        _tgi_prefill(ctx, add, container)


#: the number TGI's warm-up refusal names: "Not enough memory to handle N prefill tokens"
_REFUSED_PREFILL = re.compile(r"Not enough memory to handle (\d+) prefill tokens")


def _tgi_prefill(ctx: TriageContext, add, container: str | None) -> None:
    """The warm-up's prefill batch halved. TGI takes no prefill batch below the input limit
    unless the shard prefills in chunks (the launcher refuses it to 2.x,
    launcher/src/main.rs:1510-1515@v2.2.0; the router from 3.0 without chunking,
    backends/v3/src/main.rs:182-184@v3.2.1), so where the halved batch is below
    --max-input-tokens and chunking is not known to be on, the input limit comes down with it.
    The batch the refusal names is the one that ran when the flag is unset (the launcher's
    default)."""
    cfg = ctx.config
    example = next((s.example for s in ctx.evidence.logs.signals if s.key == "tgi_prefill_oom" and s.example), "")
    refused = _REFUSED_PREFILL.search(example)
    given = cfg.max_batch_prefill_tokens if cfg else None
    prefill = given or (int(refused.group(1)) if refused else None)
    if not prefill:
        return
    target = max(256, prefill // 2)
    given_input = cfg.max_input_tokens if cfg else None
    version = parse_version(engine_version(ctx))
    max_input = given_input or (tgi_default_input(version, ctx.model, cfg.max_model_len, given) if cfg else None)
    prefill_flag, input_flag = role_flag("tgi", "batch_prefill_tokens"), role_flag("tgi", "input_length")
    if max_input is None or target >= max_input or tgi_chunks(ctx) is True:
        if given:
            add("lower_batch_prefill_tokens", current=given, target=target,
                changes=(SetArg(container, prefill_flag, given, target),))
        return
    new_input = fit_length(target)
    # 2.x's launcher defaults an unset prefill batch to the input limit + 50, which follows it
    # down; from 3.0 the default is the card's (tgi_default_prefill), so it is written
    follows = given is None and version is not None and version < (3, 0, 0)
    changes = (SetArg(container, input_flag, given_input, new_input),) if follows else (
        SetArg(container, input_flag, given_input, new_input), SetArg(container, prefill_flag, given, target))
    add("lower_input_with_prefill", flag=input_flag, current=max_input, target=new_input,
        prefill=prefill, prefill_target=(new_input + 50) if follows else target,
        changes=changes)


def tgi_limits_held(ctx: TriageContext, changes: tuple, params: dict) -> tuple | None:
    """An action's TGI changes held to the checks TGI runs between its limits at start
    (`runbooks.remediation.value_ranges.tgi_limits_broken`, as plans are): a --max-total-tokens
    lowered to or under a given --max-input-tokens brings the input limit to the total - 1 with
    it (TGI's own default beside a given total), said in the action (`params["input_follows"]`);
    changes TGI would still refuse give None, and the action is not offered."""
    cfg = ctx.config
    if cfg is None:
        return changes
    planned = {TGI_LIMIT_FIELD_OF[c.flag]: c.new for c in changes
               if isinstance(c, SetArg) and c.flag in TGI_LIMIT_FIELD_OF}
    if not planned:
        return changes
    total, given_input = planned.get("max_model_len"), cfg.max_input_tokens
    if total is not None and "max_input_tokens" not in planned and given_input is not None and given_input >= total:
        input_flag = spelled_flag("tgi", cfg, "max_input_tokens")
        container = next(c.container for c in changes if isinstance(c, SetArg))
        changes = (*changes, SetArg(container, input_flag, given_input, total - 1))
        planned["max_input_tokens"] = total - 1
        params["input_follows"] = {"flag": input_flag, "current": given_input, "target": total - 1}
    broken, _ = tgi_limits_broken(cfg, planned, parse_version(engine_version(ctx)), ctx.model, tgi_chunks(ctx))
    return None if broken else changes


def tgi_chunks(ctx: TriageContext) -> bool | None:
    """Whether the deployed TGI prefills in chunks (`runbooks.sizing.budget.tgi_config_chunks`,
    on the card the evidence names); None when the version or the model is not known."""
    try:
        gpu = find_gpu(ctx.gpu_name) if ctx.gpu_name else None
    except UnknownGpu:
        gpu = None  # a card the catalog lacks: chunking then follows the model and the container
    cfg = ctx.config
    if cfg is None:
        return None
    return tgi_config_chunks(cfg, parse_version(engine_version(ctx)), ctx.model, gpu)


def _raise_fraction(ctx: TriageContext, add, container: str | None, engine: str, flag: str,
                    floor: float | None = None) -> bool:
    """The fraction up where the card has room: to what the weights need plus a slice of cache
    (at least the engine's default, or `floor`), never past the edge. Returns False when there
    is nothing to raise (no room, or already there)."""
    if engine == "tgi":
        return False  # TGI's refusals are its batch token budgets; its fraction defaults to the whole card
    current = _fraction(ctx, engine)
    share = _weights_share(ctx)
    target = floor or DEFAULT_FRACTION[engine]
    if current is not None and current < target / 2 and share is None:
        # a fraction set this low usually shares the card with others: step up, do not take it all
        target = round(current * 2, 2)
    if share is not None:
        need = math.ceil((share + 0.02) * 100) / 100
        if need > MAX_RAISED_FRACTION[engine]:
            return False
        target = max(need, target)
    if current is not None and current >= target:
        return False
    if current is None and target <= DEFAULT_FRACTION[engine]:
        # the value running is unknown and may be the default: "raise to the default" could
        # change nothing, so the raise goes to the most the card gives without losing the margin
        target = MAX_RAISED_FRACTION[engine]
    if current is not None:
        add("raise_memory_fraction", flag=flag, current=current, target=target,
            changes=(SetArg(container, flag, current, target),))
    else:
        add("raise_memory_fraction_to", flag=flag, target=target,
            changes=(SetArg(container, flag, None, target),))
    return True


def oom_actions(ctx: TriageContext, add, container: str | None) -> None:
    """A start-up OOM: what the phase says to change (CUDA graphs off, fewer warm-up
    sequences), and fragmentation the OOM's numbers show."""
    engine = engine_of(ctx)
    phase = oom_phase(ctx)
    cfg = ctx.config
    if phase == "cudagraph":
        flag = role_flag(engine, "no_cuda_graphs")
        if flag is not None:
            value = _GRAPHS_OFF[FLAGS[engine][flag].kind]
            add("limit_cuda_graphs", flag=flag, changes=(SetArg(container, flag, None, value),))
    if phase == "sampler_warmup":
        startup = ctx.evidence.logs.startup if ctx.evidence.logs else None
        seqs_flag = ENGINE_FLAGS[engine][1]
        current = (cfg.max_num_seqs if cfg else None) or (startup.max_num_seqs if startup else None) or \
            default_max_num_seqs(ctx)
        target = max(T.SAFE_MAX_NUM_SEQS, current // 4)
        if target < current:
            add("lower_max_num_seqs", current=current, target=target, flag=seqs_flag,
                changes=(SetArg(container, seqs_flag, cfg.max_num_seqs if cfg else None, target),))
    if engine == "tgi" and phase == "warmup" and cfg is not None and cfg.max_batch_prefill_tokens:
        # TGI's warm-up is its largest prefill batch: halve it (with the input limit where TGI
        # would refuse a batch below it), as for its own "Not enough memory to handle N prefill tokens"
        _tgi_prefill(ctx, add, container)
    oom = ctx.evidence.logs.oom if ctx.evidence.logs else None
    # expandable_segments is torch 2.1's: torch 2.0 and older stop at the first allocation with
    # "Unrecognized CachingAllocator option: expandable_segments" (the strings of libc10_cuda.so,
    # 1.13.0 and 2.0.0 lack the option), and an OOM in the wording to 2.0 is that torch
    if (oom is not None and oom.reserved_unallocated_bytes and oom.reserved_unallocated_bytes >= 2**29
            and oom.torch_form != "old"):
        add("set_expandable_segments", reserved_gib=round(oom.reserved_unallocated_bytes / 2**30, 2))
    if oom is not None and under_cap(oom):
        cap_actions(ctx, add, container, phase)


def cap_actions(ctx: TriageContext, add, container: str | None, phase: str | None) -> None:
    """An OOM torch refused under its per-process cap while the card had room.

    TGI sets the cap from --cuda-memory-fraction (utils/dist.py:54@v0.9.4, :56@v3.3.7): where
    it refused the weights or the warm-up batch, the cap goes up to what torch held plus the
    refused allocation and CAP_SLACK of the card, if the card's free memory covers the rise.
    A TGI that was serving sized its KV cache inside the cap at warm-up: raising the cap does
    not give that cache back (the margin is its wiggle room, `wiggle_action`). vLLM and SGLang
    set no cap of their own: the code that did is named, not a flag.
    """
    oom = ctx.evidence.logs.oom
    engine = engine_of(ctx) if _engine_known(ctx) else None
    if engine is None:
        return
    if engine != "tgi":
        add("find_memory_cap", allowed_gib=round(oom.allowed_bytes / 2**30, 2),
            total_gib=round(oom.total_bytes / 2**30, 2))
        return
    if phase is None or phase == "serving":
        return
    cfg = ctx.config
    flag = role_flag("tgi", "memory_fraction")
    set_now = cfg.memory_fraction if cfg is not None and cfg.memory_fraction_kind == "process" else None
    total, allowed = oom.total_bytes, oom.allowed_bytes
    current = set_now if set_now is not None else round(allowed / total, 2)
    held = (oom.allocated_bytes + (oom.reserved_unallocated_bytes or 0)) if oom.allocated_bytes is not None \
        else (oom.in_use_bytes or allowed)
    need = held + (oom.tried_bytes or 0)
    target = min(1.0, math.ceil((need / total + CAP_SLACK) * 100) / 100)
    if target <= current or target * total - allowed > (oom.free_bytes or 0):
        return
    add("raise_process_fraction", flag=flag, current=current, target=target,
        need_gib=round(need / 2**30, 2), allowed_gib=round(allowed / 2**30, 2),
        changes=(SetArg(container, flag, set_now, target),))


def wiggle_action(ctx: TriageContext, add) -> None:
    """TGI's margin for a CUDA OOM while serving: a lower TGI_WIGGLE_ROOM (read from 2.3.0,
    globals.py:21@v2.3.0), so warm-up leaves more of the capped memory out of the KV cache.
    Before 2.3.0 the share is a constant (1.0 to 1.4.0, 0.95 after): only a newer TGI moves it.
    With the version unknown, which of the two holds is what to check first."""
    version = parse_version(engine_version(ctx))
    if version is None:
        add("check_tgi_version_for_wiggle")
        return
    if version < TGI_WIGGLE_ROOM_ENV_FROM:
        add("upgrade_tgi_for_wiggle_room", version=engine_version(ctx), share=tgi_wiggle_room(version))
        return
    cfg = ctx.config
    current = tgi_wiggle_env(cfg.env, engine_version(ctx)) if cfg is not None else None
    current = current if current is not None else tgi_wiggle_room(version)
    target = round(max(WIGGLE_FLOOR, current - WIGGLE_STEP), 2)
    if target >= current:
        return
    fraction = cfg.memory_fraction if cfg is not None and cfg.memory_fraction_kind == "process" else None
    total = ctx.gpu_total_gib.value if ctx.gpu_total_gib else None
    if not total:
        return  # what it frees is not known: the batch flags are the sized fix
    gain = round((current - target) * (fraction if fraction is not None else 1.0) * total, 1)
    add("lower_wiggle_room", current=current, target=target, gain_gib=gain)


def margin_action(ctx: TriageContext, add, container: str | None) -> None:
    """The last resort when nothing else is known: leave the runbook's margin free on the card.
    TGI's fraction is a cap on torch, so its margin is the wiggle room instead (`wiggle_action`)."""
    engine = engine_of(ctx)
    if engine == "tgi" and _engine_known(ctx):
        wiggle_action(ctx, add)
        return
    flag = ENGINE_FLAGS[engine][2]
    target = SAFE_FRACTION[engine]
    current = _fraction(ctx, engine)
    if current is not None and current <= target:
        return
    total = ctx.gpu_total_gib.value if ctx.gpu_total_gib else None
    if not _engine_known(ctx):
        # no flag to name: say how much to leave free, in whichever engine's fraction
        if total:
            add("add_memory_margin_any", margin_gib=round((1 - T.SAFE_VLLM_UTIL) * total, 1),
                total_gib=round(total, 1))
        return
    change = (SetArg(container, flag, current, target),)
    if total:
        add("add_memory_margin", flag=flag, target=target, margin_gib=round((1 - target) * total, 1),
            total_gib=round(total, 1), changes=change)
    else:
        add("lower_memory_fraction_to", flag=flag, target=target, changes=change)


def default_max_num_seqs(ctx: TriageContext) -> int:
    """vLLM's default max-num-seqs for this version and card (256 when the version is unknown)."""
    cfg = ctx.config
    logs = ctx.evidence.logs
    version = parse_version((cfg.engine_version if cfg else None) or (logs.engine_version if logs else None))
    if version is None or vllm_regime(version, None).startswith("v0"):
        return 256
    total = ctx.gpu_total_gib.value if ctx.gpu_total_gib else 80.0
    return vllm_v1_limits(version, total, ctx.gpu_name)[0]


def parallel_actions(ctx: TriageContext, add, container: str | None) -> None:
    """A layout the engine refused: a TP that divides the heads, a PP that divides the layers,
    or a layout that fits the GPUs the server has."""
    err = ctx.evidence.logs.parallel_error if ctx.evidence.logs else None
    if err is None:
        return
    engine = engine_of(ctx)
    cfg = ctx.config
    if err.kind in ("heads_indivisible", "kv_heads_indivisible") and err.heads and err.size:
        target = _power_of_two_divisor(err.heads, err.size)
        flag = role_flag(engine, "tensor_parallel")
        add("fit_tp_to_heads", flag=flag, current=err.size, target=target, heads=err.heads,
            changes=(SetArg(container, flag, err.size, target),))
    elif err.kind == "layers_indivisible" and err.heads and err.size:
        target = _power_of_two_divisor(err.heads, err.size)
        flag = role_flag(engine, "pipeline_parallel")
        if flag is not None:  # TGI has no pipeline parallelism to fit
            add("fit_pp_to_layers", flag=flag, current=err.size, target=target, layers=err.heads,
                changes=(SetArg(container, flag, err.size, target),))
    elif err.kind == "gpus_insufficient":
        size = err.size or (cfg.tensor_parallel_size if cfg else None)
        gpus = err.gpus or ctx.gpus_requested or (len(ctx.evidence.gpus.devices) if ctx.evidence.gpus else None)
        flag = role_flag(engine, "tensor_parallel")
        if size and gpus:
            add("fit_layout_to_gpus", flag=flag, current=size, gpus=gpus,
                changes=(SetArg(container, flag, size, gpus),))
        elif size:
            add("check_visible_gpus", size=size)


def _power_of_two_divisor(count: int, limit: int) -> int:
    """The largest power of two that divides `count` and is at most `limit`.

    >>> _power_of_two_divisor(28, 8), _power_of_two_divisor(12, 8), _power_of_two_divisor(40, 8)
    (4, 4, 8)
    """
    best = 1
    size = 2
    while size <= limit:
        if count % size == 0:
            best = size
        size *= 2
    return best


def platform_actions(ctx: TriageContext, ids: set[str], add, container: str | None) -> None:
    """An engine that cannot start for a platform reason, or a pod that keeps restarting."""
    cfg = ctx.config
    if "nccl_failed" in ids or "no_shm_for_tp" in ids:
        gpus = ((cfg.tensor_parallel_size or 1) * (cfg.pipeline_parallel_size or 1) if cfg else None) or \
            ctx.gpus_requested or 1
        size = min(64, max(2, 2 * gpus))
        add("add_shm", size_gib=size, changes=(AddShm(container, None, f"{size}Gi"),))
    if "gpu_runtime_error" in ids:
        sig = next((s for s in ctx.evidence.logs.signals if s.key == "cuda_driver_error"), None)
        add("fix_gpu_runtime", error=(sig.example or "")[:160] if sig else "")
    held = ctx.memory_held_elsewhere_gib
    if held is not None and ctx.gpu_total_gib is not None:
        add("free_gpu_memory", held_gib=round(held.value, 1), total_gib=round(ctx.gpu_total_gib.value, 1))


def restart_action(ctx: TriageContext, add) -> None:
    """A pod that keeps restarting: its previous container's log says why."""
    pods = [p for p in ctx.evidence.pods if p.restarts]
    if not pods:
        return
    worst = max(pods, key=lambda p: p.restarts)
    add("read_previous_log", pod=worst.name, restarts=worst.restarts)
