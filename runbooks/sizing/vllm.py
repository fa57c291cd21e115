"""vLLM's start-up memory arithmetic, version by version (see `engine_defaults.VLLM_REGIMES`).

KV budget = gpu_memory_utilization x total - (weights + activation peak + non-torch memory),
with what counts as non-torch, where CUDA graphs sit and which checks run depending on the
version. Blocks are `kv bytes // (block_size x per-token bytes)`; start-up fails when none
fit or one request of max_model_len does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from runbooks.catalogs.engine_defaults import (
    LATEST,
    VLLM_V1_LOGITS_PER_REQUEST_FROM,
    VLLM_V1_SAMPLER_PROFILED_FROM,
    parse_version,
    version_text,
    vllm_engine,
    vllm_exploits_windows,
    vllm_has_mla,
    vllm_mla_absorbs_matrices,
    vllm_regime,
    vllm_v0_batched_tokens,
    vllm_v0_chunked_default,
    vllm_v1_error_wording,
    vllm_v1_limits,
    vllm_v1_needs_ampere,
)
from runbooks.model.budget import Budget, BudgetInputs
from runbooks.model.evidence import ModelSpec
from runbooks.model.units import GIB
from runbooks.sizing.activation import (
    NON_TORCH_BASE_GIB,
    SAMPLER_UNITS_V0,
    SAMPLER_UNITS_V0_CHUNKED,
    SAMPLER_UNITS_V1,
    comm_buffers_gib,
    cuda_context_gib,
    cudagraph_gib,
    forward_peak_bytes,
    logits_bytes,
    sampler_peak_bytes,
    vllm_v0_capture_sizes,
    vllm_v1_capture_sizes,
)
from runbooks.sizing.common import Notes, Setup, heads_failure, resolve, rotary_cache_gib
from runbooks.sizing.kv import (
    dtype_bytes,
    kv_bytes_per_token,
    layers_per_stage,
    request_kv_bytes,
    window_layers,
)
from runbooks.sizing.weights import (
    LORA_DEFAULT_RANK,
    is_multimodal,
    lora_bytes,
    mxfp4_experts,
    mxfp4_moe_kernel,
    mxfp4_padding_bytes,
    weights_bytes,
)

_TRY_V0 = "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."


def compute_vllm(model: ModelSpec, inp: BudgetInputs) -> Budget:
    notes = Notes()
    version = parse_version(inp.engine_version)
    if version is None:
        version = LATEST["vllm"]
        notes.assume("engine_version", version_text(version), "newest_known")
    setup = resolve(model, inp, notes)
    capability = setup.gpu.compute_capability if setup.gpu is not None else None
    regime = vllm_regime(version, inp.use_v1, capability)
    _note_engine(version, inp.use_v1, capability, setup.gpu is not None, notes)
    total = inp.gpu_total_gib
    elem = dtype_bytes(setup.dtype)
    max_len = setup.max_model_len
    kv_model = model if (not model.is_mla or vllm_has_mla(version)) else _per_head_view(model)
    if model.is_mla and kv_model is not model:
        notes.warn("mla_cached_per_head")
    block_size = inp.block_size or 16
    if inp.block_size is None:
        notes.assume("block_size", 16, "vllm_cuda_default")
    if not inp.kv_cache_dtype:
        notes.assume("kv_cache_dtype", "auto", "kv_follows_dtype", dtype=setup.dtype)

    seqs, mnbt, chunked = _limits(model, inp, version, regime, setup, notes)
    weights = _weights_gib(model, setup, version, regime, elem, notes) - max(0.0, inp.cpu_offload_gib)
    lora = _lora_gib(model, inp, setup, notes)
    weights += lora
    activation = _activation_gib(model, regime, version, setup, seqs, mnbt, chunked)
    ctx = cuda_context_gib(total)
    comm = comm_buffers_gib(setup.tp, setup.nvlink)
    other = max(0.0, inp.other_process_gib)
    counts_outside = regime in ("v0-064", "v1-08")  # these versions count context and other processes
    non_torch = ctx + other + comm if counts_outside else NON_TORCH_BASE_GIB + comm
    graphs = 0.0 if inp.enforce_eager else _graphs_gib(model, regime, version, setup, seqs, mnbt)
    graphs_inside = regime == "v1-graphs"
    free = inp.free_gib if inp.free_gib is not None else total - ctx - other
    util = inp.gpu_memory_utilization
    if util is None:
        util = 0.9
        notes.assume("gpu_memory_utilization", 0.9, "engine_default", engine="vLLM")
    requested = total * util

    if inp.kv_cache_memory_gib is not None:
        kv = inp.kv_cache_memory_gib
        budget = weights + activation + non_torch + kv + (graphs if graphs_inside else 0.0)
    else:
        budget = requested
        kv = requested - (weights + activation + non_torch) - (graphs if graphs_inside else 0.0)

    per_token = kv_bytes_per_token(kv_model, setup.tp, inp.kv_cache_dtype, setup.dtype)
    stage_share = layers_per_stage(model, setup.pp) / max(1, model.num_layers or 1)
    block_bytes = per_token * stage_share * block_size
    kv_bytes = max(0.0, kv) * GIB
    blocks = int(kv_bytes // block_bytes) if block_bytes > 0 and kv > 0 else 0
    hybrid = vllm_exploits_windows(version, regime) and window_layers(model)[1] > 0

    def needed(length: int) -> float:
        return request_kv_bytes(kv_model, length, tp=setup.tp, pp=setup.pp, kv_cache_dtype=inp.kv_cache_dtype,
                                dtype=setup.dtype, block_size=block_size, exploit_window=hybrid)

    per_request = needed(max_len)
    if hybrid:
        concurrency = kv_bytes / per_request if per_request > 0 else 0.0
        tokens = int(concurrency * max_len)
    else:
        tokens = blocks * block_size
        concurrency = tokens / max_len if max_len else 0.0

    failure, failure_id = _first_failure(
        model=model, setup=setup, inp=inp, regime=regime, version=version, free=free, total=total,
        util=util, requested=requested, weights=weights, kv=kv, blocks=blocks, tokens=tokens,
        per_request=per_request, kv_bytes=kv_bytes, needed=needed, held=weights + activation + non_torch + kv,
        ctx=ctx, other=other)

    outside = 0.0 if counts_outside else ctx + other
    held = weights + activation + non_torch + max(0.0, kv) + graphs
    headroom = total - outside - held
    if headroom < 0 and failure is None:
        notes.warn("headroom_negative")
    return Budget(
        engine="vllm", weights_gib=weights, activation_gib=activation, non_torch_gib=non_torch,
        cudagraph_gib=graphs, kv_cache_gib=max(0.0, kv), kv_bytes_per_token=int(round(per_token * stage_share)),
        kv_cache_tokens=tokens, max_concurrency=concurrency, max_model_len=max_len, budget_gib=budget,
        static_gib=weights + activation + non_torch + graphs, gpu_total_gib=total, headroom_gib=headroom,
        fits=failure is None and headroom >= 0, failure=failure, failure_id=failure_id,
        assumptions=tuple(notes.assumptions), warnings=tuple(notes.warnings), regime=f"vllm-{regime}",
        gpu_blocks=blocks, block_size=block_size, max_num_seqs=seqs, max_num_batched_tokens=mnbt, free_gib=free,
        lora_gib=lora)


def _note_engine(version: tuple[int, int, int], use_v1: bool | None, capability: tuple[int, int] | None,
                 gpu_known: bool, notes: Notes) -> None:
    """Say which engine (V0 or V1) runs and why, where the version or the GPU decides it."""
    engine, why = vllm_engine(version, use_v1, capability)
    if use_v1 is False and engine == "v1":
        notes.warn("vllm_v0_removed")
    if vllm_v1_needs_ampere(version) or (use_v1 is not None and version < (0, 11, 0)):
        notes.assume("vllm_engine", engine.upper(), why)
    if vllm_v1_needs_ampere(version) and use_v1 is not False and not gpu_known:
        notes.assume("vllm_engine", engine.upper(), "vllm_gpu_unknown_cc80")


def _lora_gib(model: ModelSpec, inp: BudgetInputs, setup: Setup, notes: Notes) -> float:
    """GiB of the LoRA slots vLLM reserves at load (--enable-lora): every layer's A and B
    for --max-loras adapters of --max-lora-rank (default 16)."""
    if not (inp.enable_lora or inp.max_lora_rank):
        return 0.0
    rank = inp.max_lora_rank or LORA_DEFAULT_RANK
    if inp.max_lora_rank is None:
        notes.assume("max_lora_rank", LORA_DEFAULT_RANK, "vllm_lora_default")
    if inp.max_loras <= 1:
        notes.assume("max_loras", 1, "vllm_lora_default")
    return lora_bytes(model, rank, max(1, inp.max_loras), setup.tp, setup.dtype) / GIB


def _limits(model: ModelSpec, inp: BudgetInputs, version: tuple[int, int, int], regime: str, setup: Setup,
            notes: Notes) -> tuple[int, int, bool]:
    multimodal = is_multimodal(model)
    if regime.startswith("v0"):
        chunked = inp.enable_chunked_prefill
        if chunked is None:
            chunked = vllm_v0_chunked_default(setup.max_model_len, multimodal, model.is_mla)
            notes.assume("enable_chunked_prefill", chunked, "vllm_v0_chunked_above_32k")
        seqs = inp.max_num_seqs or 256
        if inp.max_num_seqs is None:
            notes.assume("max_num_seqs", 256, "vllm_v0_default")
        mnbt = inp.max_num_batched_tokens or vllm_v0_batched_tokens(version, setup.max_model_len, chunked, multimodal)
        if inp.max_num_batched_tokens is None:
            notes.assume("max_num_batched_tokens", mnbt, "vllm_v0_batched_chunked" if chunked else "vllm_v0_batched")
        return seqs, mnbt, chunked
    # the name as given first: vLLM 0.7-0.8.4 match "h100"/"h200" in the device's own name,
    # which the catalog's entry may not carry (an H800 is priced as an H100)
    gpu_name = inp.gpu_name or (setup.gpu.name if setup.gpu else None)
    d_seqs, d_mnbt, why = vllm_v1_limits(version, inp.gpu_total_gib, gpu_name)
    if inp.max_num_seqs is None:
        notes.assume("max_num_seqs", d_seqs, why[0], **why[1])
    if inp.max_num_batched_tokens is None:
        notes.assume("max_num_batched_tokens", d_mnbt, why[0], **why[1])
    return inp.max_num_seqs or d_seqs, inp.max_num_batched_tokens or d_mnbt, True


def _weights_gib(model: ModelSpec, setup: Setup, version: tuple[int, int, int], regime: str, elem: float,
                 notes: Notes) -> float:
    weights = weights_bytes(model, setup.dtype, setup.quantization, setup.tp, setup.pp) / GIB
    weights += rotary_cache_gib(model, elem)
    capability = setup.gpu.compute_capability if setup.gpu is not None else None
    if mxfp4_experts(model, setup.quantization):
        kernel, why = mxfp4_moe_kernel(capability, version)
        if why is not None:
            notes.assume("mxfp4_moe_kernel", kernel, why)
        weights += mxfp4_padding_bytes(model, setup.quantization, kernel, setup.tp) / GIB
    if model.is_mla and vllm_has_mla(version):
        layers = layers_per_stage(model, setup.pp)
        heads = (model.num_attention_heads or 0) / setup.tp
        rank = model.kv_lora_rank or 0
        if vllm_mla_absorbs_matrices(version, regime):
            q_in = model.q_lora_rank or model.hidden_size or 0
            extra = layers * (q_in * heads * rank + heads * rank * (model.hidden_size or 0)) * elem
            notes.assume("mla_matrix_absorption", "on", "vllm_mla_absorption")
        else:
            head_dim = model.head_dim or 128
            extra = layers * rank * heads * 2 * head_dim * elem  # W_UK_T and W_UV copies for decode
        weights += extra / GIB
    return weights


def _activation_gib(model: ModelSpec, regime: str, version: tuple[int, int, int], setup: Setup, seqs: int,
                    mnbt: int, chunked: bool) -> float:
    forward = forward_peak_bytes(model, mnbt, setup.tp, setup.dtype)
    rows = min(seqs, mnbt)
    hidden_states = mnbt * (model.hidden_size or 0) * dtype_bytes(setup.dtype)
    if regime.startswith("v0"):
        # V0 profiles multimodal models with as few sequences as fit one encoder input
        rows = 1 if is_multimodal(model) else rows
        units = SAMPLER_UNITS_V0_CHUNKED if chunked else SAMPLER_UNITS_V0
    elif version < VLLM_V1_SAMPLER_PROFILED_FROM:
        # V1 0.7.x profiles the logits (in the model's dtype) and not the sampler: of every
        # dummy token before 0.7.3, of each request's last from it
        rows = rows if version >= VLLM_V1_LOGITS_PER_REQUEST_FROM else mnbt
        logits = logits_bytes(model, rows, dtype_bytes(setup.dtype))
        return max(forward, logits + hidden_states) / GIB
    else:
        units = SAMPLER_UNITS_V1
    sampler = sampler_peak_bytes(model, rows, units) + hidden_states
    return max(forward, sampler) / GIB


def _graphs_gib(model: ModelSpec, regime: str, version: tuple[int, int, int], setup: Setup, seqs: int,
                mnbt: int) -> float:
    if regime.startswith("v0"):
        sizes = vllm_v0_capture_sizes(seqs)
    else:
        sizes = vllm_v1_capture_sizes(seqs, mnbt, newer=version >= (0, 11, 0))
    return cudagraph_gib(model, sizes, setup.tp)


def _first_failure(*, model: ModelSpec, setup: Setup, inp: BudgetInputs, regime: str,
                   version: tuple[int, int, int], free: float, total: float, util: float, requested: float,
                   weights: float, kv: float, blocks: int, tokens: int, per_request: float, kv_bytes: float,
                   needed: Callable[[int], float], held: float, ctx: float, other: float) -> tuple[str | None, str | None]:
    """The first check vLLM fails at start-up, in the order it runs them."""
    text = heads_failure(model, setup.tp)
    if text:
        return text, "heads_not_divisible_by_tp"
    if inp.max_model_len and setup.model_max_len and inp.max_model_len > setup.model_max_len:
        return (f"User-specified max_model_len ({inp.max_model_len}) is greater than the derived max_model_len "
                f"(max_position_embeddings={setup.model_max_len} or model_max_length=None in model's "
                "config.json). This may lead to incorrect model outputs or CUDA errors. To allow overriding "
                "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"), "max_model_len_exceeds_model"
    if regime in ("v1", "v1-graphs") and inp.kv_cache_memory_gib is None and free < requested:
        return (f"Free memory on device ({free:.2f}/{total:.2f} GiB) on startup is less than desired GPU memory "
                f"utilization ({util}, {requested:.2f} GiB). Decrease GPU memory utilization or reduce GPU "
                "memory used by other processes."), "free_below_target"
    if weights > free:
        return (f"CUDA out of memory. Tried to allocate {weights:.2f} GiB of weights. GPU 0 has a total "
                f"capacity of {total:.2f} GiB of which {max(0.0, free):.2f} GiB is free."), "weights_exceed_gpu"
    if kv <= 0 or blocks <= 0:
        return ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                "initializing the engine."), "no_cache_blocks"
    if regime.startswith("v0"):
        if setup.max_model_len > tokens:
            return (f"The model's max seq len ({setup.max_model_len}) is larger than the maximum number of "
                    f"tokens that can be stored in KV cache ({tokens}). {_TRY_V0}"), "kv_below_one_sequence"
        if regime in ("v0", "v0-legacy") and held > total - ctx - other + 1e-9:
            return (f"CUDA out of memory. Tried to allocate {kv:.2f} GiB. GPU 0 has a total capacity of "
                    f"{total:.2f} GiB of which {max(0.0, total - ctx - other - (held - kv)):.2f} GiB is free."),\
                "kv_allocation_oom"
        return None, None
    if per_request > kv_bytes:
        estimate = _estimate_max_len(needed, setup.max_model_len, kv_bytes)
        model_word = "models's" if vllm_v1_error_wording(version) == "old" else "model's"
        estimated = (f"Based on the available memory, the estimated maximum model length is {estimate}."
                     if estimate > 0 else "")
        return (f"To serve at least one request with the {model_word} max seq len ({setup.max_model_len}), "
                f"({per_request / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({kv_bytes / GIB:.2f} GiB). {estimated} {_TRY_V0}"), "kv_below_one_sequence"
    return None, None


def _estimate_max_len(needed: Callable[[int], float], max_len: int, available: float) -> int:
    """Largest length whose KV fits `available` bytes (vLLM's binary search)."""
    low, high, best = 1, max_len, 0
    while low <= high:
        mid = (low + high) // 2
        if needed(mid) <= available:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def _per_head_view(model: ModelSpec) -> ModelSpec:
    """DeepSeek MLA models as vLLM < 0.7.1 cached them: full K and V per head (head dim nope + rope)."""
    heads = model.num_attention_heads or 1
    return replace(model, kv_lora_rank=None, qk_rope_head_dim=None, num_kv_heads=heads,
                   head_dim=(model.head_dim or 128) + (model.qk_rope_head_dim or 0))
