"""The budget use case (`gpumem budget`, `/gpumem budget`): where one GPU's memory goes under an
engine's own start-up arithmetic.

Flags come from the command line, or from a Deployment (`--from-deployment FILE`) with the
command line overriding it. `--what-if` shows a change side by side; `--profile ACCESS_LOG`
adds per-bucket capacity for the measured traffic and the safest flags that still serve it.

Exit codes: 0 the engine starts and fits; 1 it would not start (or the plan cannot serve the
profile); 2 bad usage, unknown names, or a flag combination the engine cannot run at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from bot.grammar.requests import BudgetRequest
from bot.service.deps import Deps
from bot.service.exits import EXIT_CAUSE, EXIT_OK, EXIT_USAGE
from bot.service.outcomes import BudgetOutcome, BudgetPage, BudgetSide
from collectors.errors import ParseError, os_error
from collectors.parsers.kube_objects import parse_deployment
from collectors.parsers.model_config import load_model_config
from runbooks.catalogs.gpus import GPUS, UnknownGpu, find_gpu
from runbooks.catalogs.models import UnknownModel, find_model
from runbooks.model.budget import BudgetInputs
from runbooks.model.errors import UsageError
from runbooks.model.units import GIB
from runbooks.remediation.solver import ENGINE_FLAGS, current_fraction, solve_safe_flags
from runbooks.sizing.budget import compute_budget, inputs_from_config
from runbooks.sizing.capacity import MeasuredPool, bucket_capacity
from runbooks.sizing.conflicts import find_conflicts
from runbooks.sizing.whatif import PlanError, apply_what_if, before_value, parse_what_if

__all__ = ["BudgetOutcome", "BudgetPage", "BudgetSide", "Setup", "changes", "read_profile", "resolve",
           "resolve_model", "resolve_workload", "run_budget", "setup_for"]

_ENGINES = ("vllm", "sglang", "tgi")
#: Deployment node labels that name the GPU model
_GPU_LABELS = ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")


@dataclass(frozen=True)
class Setup:
    """Everything resolved from the command line and the Deployment."""

    model: Any
    inputs: Any
    gpu: Any
    gpu_label: str
    gpus_requested: int | None
    notes: tuple[tuple[str, dict[str, Any]], ...] = ()


def run_budget(request: BudgetRequest, deps: Deps) -> BudgetOutcome:
    """Budget one launch from parsed `budget` arguments (`bot.grammar.commands`): the page
    (`bot.render.budget` words it) and its exit code. Reads files only, no settings.

    Bad input raises UsageError(code, **params), worded from `budget_cli.error.<code>` (a
    what-if's `expected` kind of value by `bot.render.budget.worded_error`).
    """
    if request.target_headroom is not None and not request.profile:
        raise UsageError("headroom_needs_profile")
    if request.reported_kv_tokens is not None and not request.profile:
        raise UsageError("reported_kv_needs_profile")
    setup = resolve(request)
    conflicts = find_conflicts(setup.model, setup.inputs, setup.gpu, setup.gpus_requested)
    budget = compute_budget(setup.model, setup.inputs)
    profile = detail = None
    if request.profile:
        profile, detail = _read_profile(request.profile)
    side = BudgetSide(setup.inputs, budget, conflicts, bucket_capacity(budget, profile, detail))
    plan = None
    if profile is not None:
        try:
            reported = (MeasuredPool(request.reported_kv_tokens, "--reported-kv-tokens")
                        if request.reported_kv_tokens else None)
            plan = solve_safe_flags(setup.model, setup.inputs, profile, detail,
                                    0.1 if request.target_headroom is None else request.target_headroom,
                                    measured=reported)
        except PlanError as e:
            raise UsageError(f"plan_{e.code}", **e.params) from None
    after = changed = None
    if request.what_if:
        try:
            after_inputs, applied = apply_what_if(setup.inputs, parse_what_if(request.what_if))
        except PlanError as e:  # what_if_bad_value names the kind of value expected by its code
            raise UsageError(e.code, **e.params) from None
        after_budget = compute_budget(setup.model, after_inputs)
        after = BudgetSide(after_inputs, after_budget, find_conflicts(setup.model, after_inputs, setup.gpu,
                                                                      setup.gpus_requested),
                           bucket_capacity(after_budget, profile, detail))
        changed = changes(side, after, applied)
    page = BudgetPage(setup.model, setup.gpu_label, side, after, changed, plan, profile, setup.notes)
    final = after or side
    if any(c.fatal for c in final.conflicts):
        return BudgetOutcome(page, EXIT_USAGE)
    if not final.budget.fits or (plan is not None and not plan.feasible):
        return BudgetOutcome(page, EXIT_CAUSE)
    return BudgetOutcome(page, EXIT_OK)


def _effective(side: BudgetSide, key: str) -> Any:
    """A what-if key's value in effect for `side` (engine defaults filled in where known)."""
    b, inp = side.budget, side.inputs
    known = {"max-model-len": b.max_model_len, "max-num-seqs": b.max_num_seqs,
             "max-num-batched-tokens": b.max_num_batched_tokens, "block-size": b.block_size,
             "gpu-mem-gib": inp.gpu_total_gib, "tensor-parallel-size": inp.tp, "pipeline-parallel-size": inp.pp}
    if key in known and known[key] is not None:
        return known[key]
    if key == ENGINE_FLAGS[inp.engine][2]:
        return current_fraction(inp)
    return before_value(inp, key)


def changes(before: BudgetSide, after: BudgetSide, applied: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{what-if key: {"before": value in effect, "after": value in effect}}."""
    return {key: {"before": _effective(before, key), "after": _effective(after, key)} for key in applied}


def _read_profile(path: str):
    # lazy: the access-log scanner (numpy and its process pool, ~290 ms with -X importtime) is
    # paid only by `budget --profile`
    from collectors.access_logs.fast import scan_access_log

    try:
        scan = scan_access_log(path, os.path.basename(path), detail=True)
    except FileNotFoundError:
        raise UsageError("file_not_found", path=path) from None
    except ParseError as e:
        raise UsageError("profile_unreadable", path=path, message=e.reason) from None
    except OSError as e:
        raise UsageError("profile_unreadable", path=path, message=os_error(e)) from None
    return scan.profile, scan.detail


# ---------------------------------------------------------------------- resolution


def resolve(request: BudgetRequest) -> Setup:
    """Model, GPU and BudgetInputs from the flags and the Deployment (flags win)."""
    workload = config = None
    if request.from_deployment:
        workload, config = _read_deployment(request.from_deployment)
    return resolve_workload(request, workload, config)


def resolve_workload(request: BudgetRequest, workload, config) -> Setup:
    """`resolve` for a Deployment already parsed (`workload_from_object`): a plan's preview
    budgets the live object, and the object as its patch leaves it, exactly this way."""
    engine = request.engine or (config.engine if config else None)
    if not engine:
        raise UsageError("no_engine")
    if config is not None and config.engine != engine:
        config = replace(config, engine=engine)
    if request.model:
        model = resolve_model(request.model)
    else:
        names = [n for n in ((config.model, config.served_model_name) if config else ()) if n]
        if not names:
            raise UsageError("no_model")
        model = _first_model(names)
    gpu, total, label, notes = _resolve_gpu(request, workload)
    if config is not None:
        inputs = inputs_from_config(config, total, gpu.name if gpu else None)
    else:
        inputs = BudgetInputs(engine=engine, gpu_total_gib=total, gpu_name=gpu.name if gpu else None)
    inputs = _apply_flags(inputs, request)
    gpus = _gpus_for_ranks(workload, config)
    return Setup(model, inputs, gpu, label, gpus, notes)


def setup_for(workload, config, gpu: str | None = None) -> Setup:
    """Model, GPU and BudgetInputs for a Deployment read from the cluster (a plan's what-if), as
    `resolve` finds them for --from-deployment; `gpu` names the card when the Deployment pins none."""
    names = [n for n in (config.model, config.served_model_name) if n]
    if not names:
        raise UsageError("no_model")
    model = _first_model(names)
    found, total, label, notes = _resolve_gpu(BudgetRequest(gpu=gpu), workload)
    inputs = inputs_from_config(config, total, found.name if found else None)
    return Setup(model, inputs, found, label, _gpus_for_ranks(workload, config), notes)


def read_profile(path: str):
    """(RequestProfile, ProfileDetail) of an access log; UsageError file_not_found or profile_unreadable."""
    return _read_profile(path)


def _gpus_for_ranks(workload, config) -> int | None:
    """GPUs the engine's ranks can use: the pod's request, times the pods of a LeaderWorkerSet's
    group (its leader and workers each bring their own) or the nodes of a multi-node launch
    (SGLang --nnodes); None when ranks may live in other pods (vLLM on Ray) or a group's size
    is not known."""
    if workload is None or workload.gpu is None:
        return None
    if workload.kind == "LeaderWorkerSet":
        return workload.gpu.count * workload.group_size if workload.group_size else None
    flags = config.flags if config is not None else {}
    if (flags.get("distributed-executor-backend") or "").lower() == "ray":
        return None
    try:
        nodes = max(1, int(flags.get("nnodes") or 1))
    except ValueError:
        return None
    return workload.gpu.count * nodes


def _apply_flags(inputs, request: BudgetRequest):
    names = ("tp", "pp", "dtype", "quantization", "kv_cache_dtype", "max_num_seqs", "max_num_batched_tokens",
             "gpu_memory_utilization", "mem_fraction_static", "cuda_memory_fraction", "engine_version",
             "enforce_eager")
    fields = {n: getattr(request, n) for n in names if getattr(request, n) is not None}
    if request.other_process_gib is not None:
        fields["other_process_gib"] = request.other_process_gib
    if request.max_model_len is not None:
        fields["max_total_tokens" if inputs.engine == "tgi" else "max_model_len"] = request.max_model_len
    if getattr(request, "vllm_engine", None) is not None:
        fields["use_v1"] = request.vllm_engine == "v1"
    for name in ("max_input_tokens", "max_batch_prefill_tokens", "max_batch_total_tokens", "max_lora_rank",
                 "max_loras", "max_cpu_loras"):
        if getattr(request, name, None) is not None:
            fields[name] = getattr(request, name)
    lora_sizes = [f"--{n.replace('_', '-')}" for n in ("max_lora_rank", "max_loras", "max_cpu_loras")
                  if getattr(request, n, None) is not None]
    if getattr(request, "enable_lora", None):
        fields["enable_lora"] = True
    elif lora_sizes and not inputs.enable_lora:
        raise UsageError("lora_needs_enable_lora", flags=", ".join(lora_sizes))
    return replace(inputs, **fields)


def resolve_model(name: str):
    """A catalog model by name, or a config.json (file or folder holding one)."""
    path = os.path.join(name, "config.json") if os.path.isdir(name) else name
    if os.path.isfile(path):
        try:
            return load_model_config(path)
        except ParseError as e:
            raise UsageError("config_unreadable", path=path, message=e.reason) from None
    try:
        return find_model(name)
    except UnknownModel as e:
        raise UsageError("unknown_model", name=name, nearest=", ".join(e.nearest) or "-") from None


def _first_model(names: list[str]):
    """The first of a Deployment's model names (model, then served name) that resolves."""
    first_error = None
    for name in names:
        try:
            return resolve_model(name)
        except UsageError as e:
            first_error = first_error or e
    raise first_error  # type: ignore[misc]


def _read_deployment(path: str):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise UsageError("file_not_found", path=path) from None
    except OSError as e:
        raise UsageError("deployment_unreadable", path=path, message=os_error(e)) from None
    try:
        workload, config = parse_deployment(text, os.path.basename(path))
    except ParseError as e:
        raise UsageError("deployment_unreadable", path=path, message=e.reason) from None
    if config is None:
        raise UsageError("no_server_in_deployment", path=path)
    return workload, config


def _resolve_gpu(request: BudgetRequest, workload) -> tuple[Any, float, str, tuple]:
    """(GpuSpec or None, memory per GPU in GiB, label, notes)."""
    notes: list[tuple[str, dict[str, Any]]] = []
    name = request.gpu
    pod_gpu = workload.gpu if workload is not None else None
    if name is None and workload is not None:
        name = _gpu_from_workload(workload, notes)
    gpu = None
    if name is not None:
        try:
            gpu = find_gpu(name)
        except UnknownGpu as e:
            raise UsageError("unknown_gpu", name=name, nearest=", ".join(e.nearest) or "-") from None
    if request.gpu_mem_gib is not None:
        if request.gpu_mem_gib <= 0:
            raise UsageError("not_positive", flag="gpu-mem-gib", value=request.gpu_mem_gib)
        total = request.gpu_mem_gib
        label = f"{gpu.name} ({total:g} GiB)" if gpu else f"{total:g} GiB"
        return gpu, total, label, tuple(notes)
    if gpu is None:
        raise UsageError("no_gpu")
    total = gpu.total_gib
    if pod_gpu is not None and pod_gpu.memory_bytes:
        capped = min(total, pod_gpu.memory_bytes / GIB)
        if capped < total:
            notes.append(("gpu_memory_limited", {"resource": pod_gpu.resource, "gib": round(capped, 2)}))
            total = capped
    return gpu, total, gpu.name, tuple(notes)


def _gpu_from_workload(workload, notes: list) -> str | None:
    """The GPU a Deployment pins: node label, plus the MIG profile it requests."""
    product = next((workload.node_selector[k] for k in _GPU_LABELS if workload.node_selector.get(k)), None)
    if product and "," in product:
        product = product.split(",")[0]
        notes.append(("gpu_first_of_several", {"gpu": product}))
    profile = workload.gpu.mig_profile if workload.gpu is not None else None
    if product:
        notes.append(("gpu_from_deployment", {"gpu": product + (f" MIG {profile}" if profile else "")}))
        return f"{product} MIG {profile}" if profile else product
    if profile:
        owners = [g.name for g in GPUS if profile in g.mig_profiles]
        if len(owners) == 1:
            notes.append(("gpu_from_mig", {"profile": profile, "gpu": owners[0]}))
            return f"{owners[0]} MIG {profile}"
        raise UsageError("mig_ambiguous", profile=profile, gpus=", ".join(owners) or "-")
    return None
