"""TGI's start-up memory arithmetic (flash_causal_lm.py `warmup`).

TGI warms up with its largest prefill batch (KV blocks for every warm-up request, prefill
log-probabilities over the whole batch), then reads free memory from CUDA, so what torch
keeps cached from the warm-up counts as used:
`blocks = int(max(0, free - (1 - cuda_memory_fraction) x total) x 0.90 // block bytes) + warm-up blocks`.
"""

from __future__ import annotations

import math

from runbooks.catalogs.engine_defaults import LATEST, parse_version, tgi_limits, version_text
from runbooks.model.budget import Budget, BudgetInputs
from runbooks.model.evidence import ModelSpec
from runbooks.model.units import GIB
from runbooks.sizing.activation import (
    comm_buffers_gib,
    cuda_context_gib,
    cudagraph_gib,
    forward_peak_bytes,
    logits_bytes,
)
from runbooks.sizing.common import Notes, heads_failure, resolve
from runbooks.sizing.kv import dtype_bytes, kv_bytes_per_token, layers_per_stage
from runbooks.sizing.weights import weights_bytes

TGI_WIGGLE_ROOM = 0.90
#: CUDA graph batch sizes TGI captures by default
TGI_GRAPH_SIZES = (1, 2, 4, 8, 16, 32)


def compute_tgi(model: ModelSpec, inp: BudgetInputs) -> Budget:
    notes = Notes()
    version = parse_version(inp.engine_version)
    if version is None:
        version = LATEST["tgi"]
        notes.assume("engine_version", f"{version_text(version)} (newest known; none given)")
    setup = resolve(model, inp, notes)
    total = inp.gpu_total_gib
    other = max(0.0, inp.other_process_gib)
    fraction = inp.cuda_memory_fraction
    if fraction is None:
        fraction = 1.0
        notes.assume("cuda_memory_fraction", "1.0 (TGI default)")
    block_size = inp.block_size or (16 if version < (3, 0, 0) else 1)
    if inp.block_size is None:
        notes.assume("block_size", f"{block_size} (TGI {'paged' if block_size == 16 else 'flashinfer'} attention)")
    max_input, max_total, prefill, limit_notes = tgi_limits(
        version, model.max_position_embeddings, inp.max_input_tokens, inp.max_total_tokens or inp.max_model_len,
        inp.max_batch_prefill_tokens)
    for name, value in limit_notes:
        notes.assume(name, value)

    ctx = cuda_context_gib(total)
    comm = comm_buffers_gib(setup.tp, setup.nvlink)
    weights = weights_bytes(model, setup.dtype, setup.quantization, setup.tp, setup.pp) / GIB
    stage_share = layers_per_stage(model, setup.pp) / max(1, model.num_layers or 1)
    per_token = kv_bytes_per_token(model, setup.tp, inp.kv_cache_dtype, setup.dtype) * stage_share
    block_bytes = per_token * block_size

    # the router's warm-up: requests of max_input tokens until the prefill budget is used,
    # each with blocks for its whole max_total (TGI 3: for its prompt and one new token)
    requests = max(1, math.ceil(prefill / max(1, max_input)))
    per_request_tokens = max_total if version < (3, 0, 0) else min(max_total, max_input + 1)
    warm_blocks = requests * math.ceil(per_request_tokens / block_size)
    warm_kv = warm_blocks * block_bytes / GIB
    elem = dtype_bytes(setup.dtype)
    # prefill log-probabilities over the whole warm-up batch: logits and their log-softmax,
    # on top of the forward pass's cached blocks
    activation = (forward_peak_bytes(model, prefill, setup.tp, setup.dtype)
                  + 2 * logits_bytes(model, prefill, elem)) / GIB
    free_now = total - ctx - other - comm - weights - warm_kv - activation
    usable = max(0.0, free_now - (1 - fraction) * total)
    blocks = int(usable * TGI_WIGGLE_ROOM * GIB // block_bytes) + warm_blocks if block_bytes > 0 else 0
    tokens = blocks * block_size
    kv = tokens * per_token / GIB
    graphs = 0.0 if inp.enforce_eager else cudagraph_gib(model, len(TGI_GRAPH_SIZES), setup.tp)
    non_torch = ctx + comm

    failure, failure_id = None, None
    heads = heads_failure(model, setup.tp)
    if heads:
        failure, failure_id = heads, "heads_not_divisible_by_tp"
    elif weights > total * fraction - ctx - other:
        failure, failure_id = (f"CUDA out of memory. Tried to allocate {weights:.2f} GiB of weights. GPU 0 has a "
                               f"total capacity of {total:.2f} GiB."), "weights_exceed_gpu"
    elif free_now - (1 - fraction) * total < 0:
        failure, failure_id = (f"Not enough memory to handle {prefill} prefill tokens. You need to decrease "
                               "`--max-batch-prefill-tokens`"), "tgi_prefill_oom"
    if failure is None and tokens < max_total:
        notes.warn("tgi_total_tokens_exceed_kv")

    headroom = total - other - (non_torch + weights + kv + activation + graphs)
    if headroom < 0 and failure is None:
        notes.warn("headroom_negative")
    return Budget(
        engine="tgi", weights_gib=weights, activation_gib=activation, non_torch_gib=non_torch,
        cudagraph_gib=graphs, kv_cache_gib=kv, kv_bytes_per_token=int(round(per_token)), kv_cache_tokens=tokens,
        max_concurrency=tokens / max_total if max_total else 0.0, max_model_len=max_total,
        budget_gib=total * fraction, static_gib=weights + activation + non_torch + graphs, gpu_total_gib=total,
        headroom_gib=headroom, fits=failure is None and headroom >= 0, failure=failure, failure_id=failure_id,
        assumptions=tuple(notes.assumptions), warnings=tuple(notes.warnings), regime=f"tgi-{version[0]}",
        gpu_blocks=blocks, block_size=block_size, max_num_seqs=inp.max_num_seqs,
        max_num_batched_tokens=prefill, free_gib=total - ctx - other - comm)
