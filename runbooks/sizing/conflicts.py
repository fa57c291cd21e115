"""Flag combinations that contradict the GPU, the checkpoint or the Deployment.

A conflict is `fatal` when the engine cannot run the combination at all (it stops with an
error before it sizes memory); the rest still run, differently from what was asked. The
budget's own start-up failures (heads not divisible by TP, no memory for the cache, ...)
are in `Budget.failure`, not here.

>>> from runbooks.model.budget import BudgetInputs
>>> from runbooks.catalogs.gpus import find_gpu
>>> from runbooks.catalogs.models import find_model
>>> [c.id for c in find_conflicts(find_model("Qwen/Qwen2.5-7B-Instruct"),
...     BudgetInputs(engine="vllm", gpu_total_gib=14.56, quantization="fp8", tp=2), find_gpu("T4"), gpus_requested=1)]
['tp_exceeds_gpus_requested', 'quantization_needs_newer_gpu']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runbooks.catalogs.engine_defaults import (
    LATEST,
    VLLM_V1_MIN_CAPABILITY,
    parse_version,
    tgi_regime,
    vllm_v1_needs_ampere,
)
from runbooks.catalogs.gpus import GpuSpec
from runbooks.model.budget import BudgetInputs
from runbooks.model.evidence import ModelSpec
from runbooks.sizing.weights import LORA_RANKS

#: the lowest compute capability each quantization method's kernels run on (the engines'
#: minimum-capability checks; FP8 below 8.9 runs weight-only through Marlin kernels)
QUANT_MIN_CAPABILITY: dict[str, tuple[int, int]] = {
    "awq": (7, 5),
    "gptq": (6, 0),
    "awq_marlin": (8, 0),
    "gptq_marlin": (8, 0),
    "marlin": (8, 0),
    "fp8": (8, 0),
    "int8": (7, 5),
    "w8a8": (7, 5),
    "bitsandbytes": (7, 0),
    "mxfp4": (8, 0),
}

#: methods the engines accept as another name of the checkpoint's own method
_SAME_METHOD = {"awq_marlin": "awq", "gptq_marlin": "gptq", "marlin": "gptq", "bnb": "bitsandbytes",
                "eetq": "int8", "w8a8": "int8", "fbgemm_fp8": "fp8"}
_BF16 = ("bfloat16", "bf16")


@dataclass(frozen=True)
class FlagClash:
    """One contradiction between engine flags (or a flag and the GPU): a stable id, whether the
    engine cannot run it, and its values. A finding the budget reports, not an error raised."""

    id: str
    fatal: bool
    params: dict[str, Any] = field(default_factory=dict)


def _cc(text: tuple[int, int]) -> str:
    return f"{text[0]}.{text[1]}"


def _method(name: str | None) -> str | None:
    if not name:
        return None
    low = name.lower().replace("-", "_")
    if low in ("none", "auto"):
        return None
    return _SAME_METHOD.get(low, low)


def find_conflicts(model: ModelSpec, inputs: BudgetInputs, gpu: GpuSpec | None,
                   gpus_requested: int | None = None) -> tuple[FlagClash, ...]:
    """Every conflict between the launch, the GPU (None: unknown) and the GPUs the Deployment asks for."""
    out: list[FlagClash] = []
    ranks = max(1, inputs.tp) * max(1, inputs.pp)
    if gpus_requested is not None and ranks > gpus_requested:
        out.append(FlagClash("tp_exceeds_gpus_requested", True,
                            {"tp": inputs.tp, "pp": inputs.pp, "ranks": ranks, "gpus": gpus_requested}))
    if gpu is not None and gpu.mig_profile and ranks > 1:
        # CUDA shows a process one MIG device: ranks cannot reach each other's slices
        out.append(FlagClash("parallel_on_mig", True, {"ranks": ranks, "profile": gpu.mig_profile}))
    asked, stored = _method(inputs.quantization), _method(model.quantization)
    if asked and stored and asked != stored:
        out.append(FlagClash("quantization_mismatch", True,
                            {"asked": inputs.quantization, "checkpoint": model.quantization}))
    method = asked or stored
    have = gpu.compute_capability if gpu is not None else None
    if method and have is not None:
        need = QUANT_MIN_CAPABILITY.get(method)
        if need is not None and have < need:
            out.append(FlagClash("quantization_needs_newer_gpu", True,
                                {"quantization": method, "gpu": gpu.name if gpu else None, "need": _cc(need),
                                 "have": _cc(have)}))
    if gpu is not None and not gpu.supports_bf16 and (inputs.dtype or "").lower() in _BF16:
        out.append(FlagClash("bf16_needs_newer_gpu", True, {"gpu": gpu.name, "have": _cc(have) if have else None}))
    if inputs.kv_cache_memory_gib is not None and inputs.gpu_memory_utilization is not None:
        out.append(FlagClash("kv_cache_memory_overrides_utilization", False,
                            {"utilization": inputs.gpu_memory_utilization}))
    engine = (inputs.engine or "").lower()
    if engine == "vllm":
        out += _vllm_conflicts(inputs, gpu, have)
    elif engine == "tgi":
        out += _tgi_conflicts(inputs)
    return tuple(out)


def _vllm_conflicts(inputs: BudgetInputs, gpu: GpuSpec | None, have: tuple[int, int] | None) -> list[FlagClash]:
    out: list[FlagClash] = []
    version = parse_version(inputs.engine_version) or LATEST["vllm"]
    if inputs.use_v1 and have is not None and have < VLLM_V1_MIN_CAPABILITY and vllm_v1_needs_ampere(version):
        # "VLLM_USE_V1=1 is not supported with Compute Capability < 8.0."
        out.append(FlagClash("vllm_v1_needs_compute_capability_8", True,
                            {"gpu": gpu.name if gpu else None, "have": _cc(have)}))
    if inputs.enable_lora or inputs.max_lora_rank:
        rank = inputs.max_lora_rank
        if rank is not None and rank not in LORA_RANKS:
            out.append(FlagClash("lora_rank_unsupported", True,
                                {"rank": rank, "ranks": ", ".join(str(r) for r in LORA_RANKS)}))
        if inputs.max_cpu_loras is not None and inputs.max_cpu_loras < max(1, inputs.max_loras):
            out.append(FlagClash("max_cpu_loras_below_max_loras", True,
                                {"max_cpu_loras": inputs.max_cpu_loras, "max_loras": inputs.max_loras}))
    return out


def _tgi_conflicts(inputs: BudgetInputs) -> list[FlagClash]:
    """The TGI launcher's own argument checks."""
    out: list[FlagClash] = []
    version = parse_version(inputs.engine_version) or LATEST["tgi"]
    total = inputs.max_total_tokens or inputs.max_model_len
    given = inputs.max_input_tokens
    if given is not None and total is not None and given >= total:
        out.append(FlagClash("tgi_input_not_below_total", True, {"max_input_tokens": given, "max_total_tokens": total}))
    prefill = inputs.max_batch_prefill_tokens
    if prefill is not None and given is not None and prefill < given and version < (3, 0, 0):
        out.append(FlagClash("tgi_prefill_below_input", True,
                            {"max_batch_prefill_tokens": prefill, "max_input_tokens": given}))
    batch_total = inputs.max_batch_total_tokens
    if batch_total is not None and tgi_regime(version) == "tgi-0":
        for name, value in (("max_total_tokens", total), ("max_batch_prefill_tokens", prefill)):
            if value is not None and value > batch_total:
                out.append(FlagClash("tgi_batch_total_below", True,
                                    {"flag": name.replace("_", "-"), "value": value,
                                     "max_batch_total_tokens": batch_total}))
    return out
