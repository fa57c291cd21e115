"""SGLang's start-up memory arithmetic (model_runner.py, 0.4 and 0.5 lines).

`mem_fraction_static` is a share of the memory FREE after distributed init (the minimum
over TP ranks): weights + KV pool may take that share, the rest (1 - mfs) is left for
activations and CUDA graphs. KV pool = free - weights - free x (1 - mfs); tokens = pool //
cell size. A pool of zero or less stops start-up.
"""

from __future__ import annotations

from runbooks.catalogs.engine_defaults import (
    LATEST,
    parse_version,
    sglang_chunked_prefill,
    sglang_exploits_windows,
    sglang_graph_max_bs,
    sglang_mem_fraction_static,
    version_text,
)
from runbooks.model.budget import Budget, BudgetInputs
from runbooks.model.evidence import ModelSpec
from runbooks.model.units import GIB
from runbooks.sizing.activation import comm_buffers_gib, cuda_context_gib, cudagraph_gib, forward_peak_bytes
from runbooks.sizing.common import Notes, heads_failure, resolve, rotary_cache_gib
from runbooks.sizing.kv import kv_bytes_per_layer_token, kv_bytes_per_token, layers_per_stage, window_layers
from runbooks.sizing.weights import allocator_slack_bytes, weights_bytes

#: memory init_torch_distributed takes at TP > 1 on PCIe cards (0.13 GiB on 4 x L4), fitted
DIST_INIT_GIB = 0.13
#: SGLang 0.5 sizes the sliding-window pool at this share of the full-attention pool
SWA_FULL_TOKENS_RATIO = 0.8
#: graph memory per captured batch size and layer, fitted (0.11 GiB for 4 sizes x 32 layers)
GRAPH_GIB_PER_SIZE_LAYER = 8.6e-4


def compute_sglang(model: ModelSpec, inp: BudgetInputs) -> Budget:
    notes = Notes()
    version = parse_version(inp.engine_version)
    if version is None:
        version = LATEST["sglang"]
        notes.assume("engine_version", version_text(version), "newest_known")
    setup = resolve(model, inp, notes)
    total = inp.gpu_total_gib
    other = max(0.0, inp.other_process_gib)
    ctx = cuda_context_gib(total)
    dist = max(DIST_INIT_GIB, comm_buffers_gib(setup.tp, setup.nvlink)) if setup.tp > 1 else 0.0
    free = inp.free_gib if inp.free_gib is not None else total - ctx - other - dist
    mfs = inp.mem_fraction_static
    if mfs is None:
        mfs, why = sglang_mem_fraction_static(version, total, setup.tp, setup.pp)
        notes.assume("mem_fraction_static", mfs, why[0], **why[1])
    if not inp.kv_cache_dtype:
        notes.assume("kv_cache_dtype", "auto", "kv_follows_dtype", dtype=setup.dtype)

    # SGLang measures weights as the drop in free memory: allocator rounding and its fp32
    # rotary cache count too
    weights = (weights_bytes(model, setup.dtype, setup.quantization, setup.tp, setup.pp)
               + allocator_slack_bytes(model, setup.dtype, setup.quantization, setup.tp, setup.pp)) / GIB
    weights += rotary_cache_gib(model, 4.0)
    pool = free - weights - free * (1 - mfs)
    stage_share = layers_per_stage(model, setup.pp) / max(1, model.num_layers or 1)
    per_token = kv_bytes_per_token(model, setup.tp, inp.kv_cache_dtype, setup.dtype) * stage_share
    full, windowed = window_layers(model)
    cell = per_token
    if windowed and sglang_exploits_windows(version):
        per_layer = kv_bytes_per_layer_token(model, setup.tp, inp.kv_cache_dtype, setup.dtype) * stage_share
        cell = per_layer * (full + windowed * SWA_FULL_TOKENS_RATIO)
        notes.assume("swa_full_tokens_ratio", SWA_FULL_TOKENS_RATIO, "engine_default", engine="SGLang")
    tokens = int(max(0.0, pool) * GIB // cell) if cell > 0 else 0
    kv = tokens * cell / GIB
    max_len = setup.max_model_len
    pool_requests = min(max(int(tokens / max(1, max_len) * 512), 2048), 4096)
    seqs = inp.max_num_seqs or max(1, min(pool_requests, tokens // 2))
    if inp.max_num_seqs is None:
        notes.assume("max_running_requests", seqs, "sglang_request_pool")

    chunk = inp.max_num_batched_tokens or sglang_chunked_prefill(version, total)
    if inp.max_num_batched_tokens is None:
        notes.assume("chunked_prefill_size", chunk, "sglang_gpu_size_default")
    activation = forward_peak_bytes(model, chunk, setup.tp, setup.dtype) / GIB
    graphs = 0.0
    if not inp.enforce_eager:
        max_bs = sglang_graph_max_bs(version, total, setup.tp)
        sizes = len([1, 2, 4, 8, *range(16, max_bs + 1, 8)])
        graphs = cudagraph_gib(model, sizes, setup.tp, GRAPH_GIB_PER_SIZE_LAYER)
    non_torch = ctx + dist

    failure, failure_id = None, None
    heads = heads_failure(model, setup.tp)
    if heads:
        failure, failure_id = heads, "heads_not_divisible_by_tp"
    elif weights > free:
        failure, failure_id = (f"CUDA out of memory. Tried to allocate {weights:.2f} GiB of weights. GPU 0 has a "
                               f"total capacity of {total:.2f} GiB of which {max(0.0, free):.2f} GiB is free."), \
            "weights_exceed_gpu"
    elif tokens <= 0:
        failure, failure_id = "Not enough memory. Please try to increase --mem-fraction-static.", \
            "sglang_not_enough_memory"
    if failure is None and tokens < max_len:
        notes.warn("context_exceeds_kv_pool")
    reserve = free * (1 - mfs)
    if failure is None and activation + graphs > reserve:
        notes.warn("sglang_reserve_below_activation")

    headroom = total - other - (non_torch + weights + kv + activation + graphs)
    if headroom < 0 and failure is None:
        notes.warn("headroom_negative")
    return Budget(
        engine="sglang", weights_gib=weights, activation_gib=activation, non_torch_gib=non_torch,
        cudagraph_gib=graphs, kv_cache_gib=kv, kv_bytes_per_token=int(round(per_token)), kv_cache_tokens=tokens,
        max_concurrency=tokens / max_len if max_len else 0.0, max_model_len=max_len, budget_gib=free * mfs,
        static_gib=weights + activation + non_torch + graphs, gpu_total_gib=total, headroom_gib=headroom,
        fits=failure is None and headroom >= 0, failure=failure, failure_id=failure_id,
        assumptions=tuple(notes.assumptions), warnings=tuple(notes.warnings),
        regime=f"sglang-{version[0]}.{version[1]}", gpu_blocks=tokens, block_size=1, max_num_seqs=seqs,
        max_num_batched_tokens=chunk, free_gib=free)
