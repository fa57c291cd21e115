"""Pieces every engine's budget shares: notes on assumptions, GPU facts, dtype and
configuration checks that engines make before they size memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runbooks.catalogs.gpus import GpuSpec, UnknownGpu, find_gpu
from runbooks.model.budget import Assumed, BudgetInputs
from runbooks.model.evidence import ModelSpec
from runbooks.model.units import GIB
from runbooks.sizing.kv import serving_dtype
from runbooks.sizing.weights import quant_bits_default


@dataclass
class Notes:
    """Assumptions (name -> the value and the id of its reason) and warning keys, in the order made."""

    assumptions: list[tuple[str, Assumed]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def assume(self, name: str, value: Any, why: str, **params: Any) -> None:
        """Record (or correct) the value assumed for `name`, and why (a reason id, catalog
        `budget_why.<why>`, with the values it names)."""
        self.assumptions = [(key, val) for key, val in self.assumptions if key != name]
        self.assumptions.append((name, Assumed(value, why, tuple(sorted(params.items())))))

    def warn(self, key: str) -> None:
        if key not in self.warnings:
            self.warnings.append(key)


@dataclass(frozen=True)
class Setup:
    """Inputs resolved once for any engine."""

    gpu: GpuSpec | None
    dtype: str
    quantization: str | None
    quant_bits: int | None
    tp: int
    pp: int
    nvlink: bool
    max_model_len: int
    model_max_len: int | None


def resolve(model: ModelSpec, inp: BudgetInputs, notes: Notes) -> Setup:
    gpu = _find_gpu(inp.gpu_name, notes)
    tp, pp = max(1, inp.tp), max(1, inp.pp)
    dtype = serving_dtype(model, inp.dtype)
    if not inp.dtype or inp.dtype.lower() == "auto":
        notes.assume("dtype", dtype, "checkpoint_dtype" if model.native_dtype else "checkpoint_dtype_unknown",
                     dtype=model.native_dtype)
    if gpu is not None and not gpu.supports_bf16 and dtype in ("bfloat16", "bf16"):
        notes.warn("bf16_unsupported_on_gpu")
        if not inp.dtype or inp.dtype.lower() == "auto":
            dtype = "float16"
            notes.assume("dtype", "float16", "no_bf16_on_gpu")
    quant = (inp.quantization or model.quantization or None)
    if quant and quant.lower() in ("none", "auto"):
        quant = model.quantization
    bits = model.quant_bits if (quant and quant == model.quantization) else quant_bits_default(quant)
    if quant and "fp8" in quant.lower() and gpu is not None and gpu.compute_capability is not None:
        if gpu.compute_capability < (8, 0):
            notes.warn("fp8_unsupported_on_gpu")
        elif not gpu.supports_fp8:
            notes.warn("fp8_weight_only_on_gpu")
    kv = model.num_kv_heads or model.num_attention_heads or 0
    if not model.is_mla and kv and tp > kv:
        notes.warn("tp_exceeds_kv_heads_replicated")
    if pp > 1 and model.num_layers and model.num_layers % pp:
        notes.warn("pp_uneven_layers")
    model_max = model.max_position_embeddings
    max_len = inp.max_model_len
    if max_len is None:
        max_len = model_max or 4096
        if inp.engine != "tgi":  # TGI has its own length defaults (max_total_tokens)
            notes.assume("max_model_len", max_len, "model_max_position" if model_max else "model_length_unknown")
    nvlink = gpu.nvlink if gpu is not None else inp.gpu_total_gib >= 70
    if gpu is None and tp > 1:
        notes.assume("interconnect", "NVLink" if nvlink else "PCIe", "interconnect_by_memory")
    return Setup(gpu=gpu, dtype=dtype, quantization=quant, quant_bits=bits, tp=tp, pp=pp, nvlink=nvlink,
                 max_model_len=max_len, model_max_len=model_max)


def heads_failure(model: ModelSpec, tp: int) -> str | None:
    """vLLM and SGLang refuse a TP that does not divide the attention heads."""
    heads = model.num_attention_heads or 0
    if heads and tp > 1 and heads % tp:
        return (f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp}).")
    return None


def rotary_cache_gib(model: ModelSpec, dtype_bytes_: float) -> float:
    """vLLM keeps one cos/sin cache of max_position x rotary_dim in the model dtype."""
    rotary_dim = model.qk_rope_head_dim if model.is_mla else (model.head_dim or 0)
    return (model.max_position_embeddings or 0) * (rotary_dim or 0) * dtype_bytes_ / GIB


def _find_gpu(name: str | None, notes: Notes) -> GpuSpec | None:
    if not name:
        return None
    try:
        return find_gpu(name)
    except UnknownGpu:
        notes.warn("gpu_unknown")
        return None
