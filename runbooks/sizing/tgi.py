"""TGI's start-up memory arithmetic (flash_causal_lm.py `warmup`, the router's warm-up batch).

The router warms up with its largest prefill batch: requests of `--max-input-tokens` (the
last one truncated) until `--max-batch-prefill-tokens` are used, asking for prefill
log-probabilities over the whole batch (from 3.0 a shard computes them only with
`--enable-prefill-logprobs`; otherwise its LM head reads one row a request). What happens
around it depends on the version (`engine_defaults.tgi_regime`):

- TGI < 0.9.4 ("tgi-0"): `--max-batch-total-tokens` (default 16000) is allocated up front as
  KV blocks (plus 10) and the warm-up batch runs in it; any failure is reported as
  "Not enough memory to handle N total tokens with P prefill tokens".
- TGI 0.9.4 - 3.x: the KV blocks of the warm-up batch are allocated, the batch runs, and free
  memory is read from CUDA (what torch keeps cached from the warm-up counts as used):
  `blocks = int(max(0, free - (1 - cuda_memory_fraction) x total) x wiggle // block bytes) + warm-up blocks`
  before 3.0, `blocks = int(max(0, free - (1 - cuda_memory_fraction x wiggle) x total) // block bytes)
  + warm-up blocks` from 3.0 (wiggle by version: `engine_defaults.TGI_WIGGLE_ROOM_BY_VERSION`, or the container's
  TGI_WIGGLE_ROOM from 2.3.0).
  The router takes `blocks x block_size` as max-batch-total-tokens (a given
  `--max-batch-total-tokens` is ignored, "Inferred max batch total tokens") and refuses to start
  when one request of `--max-total-tokens` does not fit: "Not enough memory to handle
  max_total_tokens=N". Warm-up requests ask for 2 new tokens (0.9.4-1.1), for
  max-total-tokens minus their prompt (1.2-2.x, and 3.x when it is given) or for 1 (3.x
  without it), and hold KV blocks for them; TGI 3 sets max-total-tokens, when not given, to
  what the KV cache holds (at most the model's length), or without prefill chunking to the
  warm-up's tokens. TGI 3's launcher computes the default prefill batch from the card and the
  model (`engine_defaults.tgi_default_prefill`).

AWQ layers of TGI 1.1-2.1 run a split-k GEMM whose 8 partial outputs make the warm-up's
forward peak (`awq_split_k_peak_bytes`).
"""

from __future__ import annotations

import math

from runbooks.catalogs.engine_defaults import (
    LATEST,
    TGI_AWQ_SPLIT_K,
    TGI_AWQ_SPLIT_K_RANGE,
    TGI_CHUNKED_VLMS_FROM,
    TGI_COMPUTED_PREFILL_FROM,
    TGI_FLASHINFER_BUFFERS_BYTES,
    TGI_GEMMA3_MASKS_FROM,
    TGI_GEMMA3_SDPA_MATH,
    TGI_GEMMA3_VLM,
    TGI_INPLACE_LOG_SOFTMAX_FROM,
    TGI_KV_UNMATCHED_FROM,
    TGI_LEGACY_BATCH_TOTAL_TOKENS,
    TGI_PREFILL_LOGPROBS_OPT_IN_FROM,
    TGI_SPECULATE_FROM,
    TGI_UNCHUNKED_VLMS,
    TGI_WARMUP_ASKS_MAX_TOTAL_FROM,
    TGI_WARMUP_SURVIVORS_COUNTED,
    TGI_WIGGLE_ON_FRACTION_FROM,
    TgiLauncherConfig,
    parse_version,
    tgi_card,
    tgi_default_prefill,
    tgi_limits,
    tgi_regime,
    tgi_wiggle_room,
    version_text,
)
from runbooks.catalogs.gpus import SMI_NAMES, GpuSpec
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
from runbooks.sizing.weights import has_gated_mlp, is_multimodal, weights_bytes

#: TGI_WIGGLE_ROOM of the newest TGI (the share of free memory given to the KV cache)
TGI_WIGGLE_ROOM = 0.90
#: CUDA graph batch sizes TGI captures by default, from 2.0 (launcher/src/main.rs:1389@v2.0.0,
#: "Using default cuda graphs"); 1.4.1-1.4.5 captured them only with --enable-cuda-graphs (off
#: by default, launcher/src/main.rs:289@v1.4.1) and earlier releases had none
TGI_GRAPH_SIZES = (1, 2, 4, 8, 16, 32)
TGI_GRAPHS_FROM = (2, 0, 0)
#: blocks TGI < 0.9.4 added to the --max-batch-total-tokens it allocated
TGI_LEGACY_EXTRA_BLOCKS = 10
#: new tokens each warm-up request asks for, by regime (tgi-2: up to max-total-tokens)
_WARMUP_NEW_TOKENS = {"tgi-0": 2, "tgi-1": 2, "tgi-3": 1}


def warmup_requests(max_input: int, prefill: int) -> list[int]:
    """Prompt lengths of the router's warm-up batch: max_input each, the last one truncated,
    until the prefill budget is used.

    >>> warmup_requests(3072, 4096), warmup_requests(1024, 4096)
    ([3072, 1024], [1024, 1024, 1024, 1024])
    """
    out: list[int] = []
    used = 0
    max_input = max(1, max_input)
    while used < prefill:
        out.append(min(max_input, prefill - used))
        used += max_input
    return out or [1]


def compute_tgi(model: ModelSpec, inp: BudgetInputs) -> Budget:
    notes = Notes()
    version = parse_version(inp.engine_version)
    if version is None:
        version = LATEST["tgi"]
        notes.assume("engine_version", version_text(version), "newest_known")
    regime = tgi_regime(version)
    setup = resolve(model, inp, notes)
    total = inp.gpu_total_gib
    other = max(0.0, inp.other_process_gib)
    fraction = inp.cuda_memory_fraction
    if fraction is None:
        fraction = 1.0
        notes.assume("cuda_memory_fraction", 1.0, "engine_default", engine="TGI")
    block_size = inp.block_size or (16 if version < (3, 0, 0) else 1)
    if inp.block_size is None:
        notes.assume("block_size", block_size, "tgi_paged_attention" if block_size == 16 else "tgi_flashinfer_attention")
    prefill_given = inp.max_batch_prefill_tokens
    if prefill_given is None and version >= TGI_COMPUTED_PREFILL_FROM:
        prefill_given, why, params = tgi_default_prefill(
            version, launcher_config(model), _card(inp.gpu_name, setup.gpu), setup.tp,
            # nvidia-smi's memory.total, taken as what CUDA reports (a few hundred MiB less)
            inp.gpu_total_gib * 1024 if setup.gpu is None or setup.gpu.vendor == "nvidia" else None,
            fraction, inp.tgi_wiggle_room)
        notes.assume("max_batch_prefill_tokens", prefill_given, why, **params)
    max_input, max_total, prefill, limit_notes = tgi_limits(
        version, model.max_position_embeddings, inp.max_input_tokens, inp.max_total_tokens or inp.max_model_len,
        prefill_given)
    for name, value, why in limit_notes:
        notes.assume(name, value, why)

    ctx = cuda_context_gib(total)
    comm = comm_buffers_gib(setup.tp, setup.nvlink)
    weights = weights_bytes(model, setup.dtype, setup.quantization, setup.tp, setup.pp) / GIB
    stage_share = layers_per_stage(model, setup.pp) / max(1, model.num_layers or 1)
    per_token = kv_bytes_per_token(model, setup.tp, inp.kv_cache_dtype, setup.dtype) * stage_share
    block_bytes = per_token * block_size

    # TGI 3's router caps a warm-up request at max-input-tokens only when it is given
    # (backends/v3/src/client/grpc_client.rs:118-123@v3.3.4): one request of the whole prefill
    prompts = [prefill] if regime == "tgi-3" and inp.max_input_tokens is None else warmup_requests(max_input, prefill)
    if regime == "tgi-3" and max_total is not None and max(prompts) > max_total:
        # max_total - prompt in the router's u32 wraps; what the shard then does is not priced
        notes.warn("tgi_warmup_prompt_over_total")
    prefill_tokens = sum(prompts)
    # --speculate N: each request's blocks hold N more (flash_causal_lm.py:192@v1.3.0, :346@v3.3.4)
    speculate = inp.tgi_speculate if version >= TGI_SPECULATE_FROM else 0
    warm_blocks = sum(math.ceil((_warmup_request_tokens(regime, version, prompt, max_total) + speculate) / block_size)
                      for prompt in prompts)
    elem = dtype_bytes(setup.dtype)
    forward = forward_peak_bytes(model, prefill_tokens, setup.tp, setup.dtype, unfused_act=True)
    if _awq_split_k(version, setup.quantization or model.quantization):
        forward = max(forward, awq_split_k_peak_bytes(model, prefill_tokens, setup.tp, elem))
    # the warm-up's logits and their log-softmax, on top of the forward pass's cached blocks: over
    # the whole prefill, whose log-probabilities the router asks for (router/client/src/client.rs
    # :134@v0.9.3 to backends/client/src/v3/client.rs:181@v2.3.1 and on), except from 3.0 without
    # --enable-prefill-logprobs, where the LM head reads one row a request
    # (TGI_PREFILL_LOGPROBS_OPT_IN_FROM)
    all_rows = version < TGI_PREFILL_LOGPROBS_OPT_IN_FROM or bool(inp.tgi_prefill_logprobs)
    logit_rows = prefill_tokens if all_rows else len(prompts)
    masks, scores = gemma3_warmup_attention_bytes(model, version, prompts, setup.tp, elem, block_size, notes)
    forward = max(forward, scores) + masks
    activation = (forward + tgi_logit_copies(setup.tp, version) * logits_bytes(model, logit_rows, elem)) / GIB
    if block_size == 1:  # FlashInfer attention: its workspaces are held through the warm-up
        activation += TGI_FLASHINFER_BUFFERS_BYTES / GIB
    graphs = 0.0 if inp.enforce_eager or version < TGI_GRAPHS_FROM else \
        cudagraph_gib(model, len(TGI_GRAPH_SIZES), setup.tp)
    non_torch = ctx + comm
    torch_limit = min(total * fraction, total - non_torch - other)  # set_per_process_memory_fraction

    if regime == "tgi-0":
        batch_total = inp.max_batch_total_tokens or TGI_LEGACY_BATCH_TOTAL_TOKENS
        if inp.max_batch_total_tokens is None:
            notes.assume("max_batch_total_tokens", batch_total, "tgi_legacy_batch_total")
        blocks = math.ceil(batch_total / block_size) + TGI_LEGACY_EXTRA_BLOCKS
        tokens = batch_total
        kv = blocks * block_bytes / GIB
        free_now = total - non_torch - other - weights - kv - activation
        short = weights + kv + activation > torch_limit
    else:
        batch_total = None
        if inp.max_batch_total_tokens is not None:
            notes.warn("tgi_batch_total_tokens_ignored")
        warm_kv = warm_blocks * block_bytes / GIB
        free_now = total - non_torch - other - weights - warm_kv - activation
        wiggle = inp.tgi_wiggle_room if inp.tgi_wiggle_room is not None else tgi_wiggle_room(version)
        if version >= TGI_WIGGLE_ON_FRACTION_FROM:
            # TGI 3: free - (1 - fraction x wiggle) x total
            kv_free = max(0.0, free_now - (1 - fraction * wiggle) * total)
        else:
            # TGI 0.9.4 - 2.x: wiggle x (free - (1 - fraction) x total)
            kv_free = max(0.0, free_now - (1 - fraction) * total) * wiggle
        counted_back = warm_blocks
        first, after = TGI_WARMUP_SURVIVORS_COUNTED
        if first <= version < after and max_total is not None and all(p >= max_total - 1 for p in prompts):
            counted_back = 0  # every warm-up request stops after one token: no batch, no blocks counted back
            notes.warn("tgi_warmup_blocks_not_counted")
        blocks = int(kv_free * GIB // block_bytes) + counted_back if block_bytes > 0 else 0
        tokens = blocks * block_size
        kv = tokens * per_token / GIB
        short = free_now - (1 - fraction) * total < 0
        if max_total is None:  # TGI 3 sets it after the warm-up (flash_causal_lm.py:1566-1579@v3.3.4)
            chunking, why_not = tgi_prefill_chunking(version, model, setup.gpu, inp.tgi_chunking_off,
                                                     inp.tgi_speculate)
            if chunking:  # what the KV cache holds, at most the model's length
                model_max = model.max_position_embeddings or 4096
                max_total = max(1, min(tokens, model_max))
                notes.assume("max_total_tokens", max_total, "tgi3_warmup_total", model_max=model_max)
            else:  # the warm-up's own tokens
                max_total = max(1, prefill_tokens)
                notes.assume("max_total_tokens", max_total, "tgi3_unchunked_total", reason=why_not)
            if inp.max_input_tokens is None:
                notes.assume("max_input_tokens", max_total - 1, "tgi3_total_minus_one")

    if version >= TGI_KV_UNMATCHED_FROM:  # no start-up of these releases holds the cache figure; each is lower
        notes.warn("tgi_kv_optimistic")
    failure, failure_id = _first_failure(model, setup.tp, regime, weights, torch_limit, short, batch_total,
                                         prefill_tokens, max_total, tokens, total)
    headroom = total - other - (non_torch + weights + kv + activation + graphs)
    if headroom < 0 and failure is None:
        notes.warn("headroom_negative")
    return Budget(
        engine="tgi", weights_gib=weights, activation_gib=activation, non_torch_gib=non_torch,
        cudagraph_gib=graphs, kv_cache_gib=kv, kv_bytes_per_token=int(round(per_token)), kv_cache_tokens=tokens,
        max_concurrency=tokens / max_total if max_total else 0.0, max_model_len=max_total,
        budget_gib=total * fraction, static_gib=weights + activation + non_torch + graphs, gpu_total_gib=total,
        headroom_gib=headroom, fits=failure is None and headroom >= 0, failure=failure, failure_id=failure_id,
        assumptions=tuple(notes.assumptions), warnings=tuple(notes.warnings), regime=regime,
        gpu_blocks=blocks, block_size=block_size, max_num_seqs=inp.max_num_seqs,
        max_num_batched_tokens=prefill, free_gib=total - ctx - other - comm, max_batch_total_tokens=tokens)


#: architectures whose config.json counts its experts as `num_local_experts`, the key TGI's
#: launcher reads for its memory estimate (1 for every other model)
_LOCAL_EXPERTS = ("MixtralForCausalLM", "PhimoeForCausalLM", "GptOssForCausalLM")
#: config.json `model_type` of the VLMs whose fallback prefill the launcher sets apart
_MODEL_TYPES = {"Qwen2VLForConditionalGeneration": "qwen2_vl", "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
                "Gemma3ForConditionalGeneration": "gemma3"}


def launcher_config(model: ModelSpec) -> TgiLauncherConfig:
    """What TGI's launcher reads of the model's config.json. `n_shared_experts` is not among
    the model facts: taken as 0, where DeepSeek's 1 or 2 would add that many experts' MLP to the
    FLOPs a token and so lower the computed prefill."""
    heads, hidden = model.num_attention_heads, model.hidden_size
    head_dim = model.head_dim or (hidden // heads if heads and hidden and hidden % heads == 0 else None)
    arch = model.architecture or ""
    return TgiLauncherConfig(
        num_heads=heads, num_kv_heads=model.num_kv_heads or heads, head_dim=head_dim, hidden_size=hidden,
        intermediate_size=model.intermediate_size, num_layers=model.num_layers, vocab_size=model.vocab_size,
        max_position_embeddings=model.max_position_embeddings, experts_per_token=model.experts_per_token or 1,
        local_experts=(model.num_experts or 1) if arch in _LOCAL_EXPERTS else 1, vision=is_multimodal(model),
        model_type=_MODEL_TYPES.get(arch), quantized=bool(model.quantization))


def _card(gpu_name: str | None, gpu: GpuSpec | None) -> str | None:
    """The launcher's card name: from the evidence's own GPU name where it is nvidia-smi's,
    else from the catalog entry's nvidia-smi name."""
    return tgi_card(gpu_name) or (tgi_card(SMI_NAMES.get(gpu.name)) if gpu is not None else None)


def tgi_prefill_chunking(version: tuple[int, int, int], model: ModelSpec, gpu: GpuSpec | None,
                         container_off: str | None = None, speculate: int = 0) -> tuple[bool, str]:
    """Whether a TGI 3 shard prefills in chunks, and the reason when it does not
    (`engine_defaults.TGI_UNCHUNKED_VLMS`). A speculator the checkpoint brings (Medusa, MLP
    speculator heads) also turns it off and is not read; --speculate is."""
    # the reasons are names, read alike in every language
    if container_off:
        return False, container_off
    if speculate > 0:
        return False, f"--speculate {speculate}"
    if gpu is not None and gpu.compute_capability is not None and gpu.compute_capability < (8, 0):
        major, minor = gpu.compute_capability
        return False, f"ATTENTION=paged, {gpu.name} sm_{major}{minor}"
    if is_multimodal(model) and (version < TGI_CHUNKED_VLMS_FROM or (model.architecture or "") in TGI_UNCHUNKED_VLMS):
        return False, model.architecture or "VLM"
    return True, ""


def gemma3_warmup_attention_bytes(model: ModelSpec, version: tuple[int, int, int], prompts: list[int], tp: int,
                                  elem: float, block_size: int, notes: Notes) -> tuple[float, float]:
    """(masks, scores): bytes a Gemma 3 shard holds for the warm-up's image-masked attention
    (`engine_defaults.TGI_GEMMA3_VLM`): the global and sliding-window masks, [requests, 1, T,
    T + 1] in the model's dtype, beside the whole forward pass; and, where SDPA's math path runs
    the prefill (3.2.x), its float32 scores and their softmax over the shard's heads, the
    forward pass's peak when larger. (0, 0) for any other model or release.

    >>> from runbooks.catalogs.models import find_model
    >>> gemma = find_model("google/gemma-3-27b-it")
    >>> masks, scores = gemma3_warmup_attention_bytes(gemma, (3, 2, 0), [32000], 4, 2, 1, Notes())
    >>> round(scores / 2 / 2**30, 2), round(masks / 2**30, 2)
    (30.52, 3.81)
    """
    if (model.architecture or "") != TGI_GEMMA3_VLM or version < TGI_GEMMA3_MASKS_FROM or not prompts:
        return 0.0, 0.0
    rows, longest = len(prompts), max(prompts)
    cells = rows * longest * (longest + 1)
    masks = 2 * cells * elem
    first, after = TGI_GEMMA3_SDPA_MATH
    if first <= version < after:
        heads = math.ceil((model.num_attention_heads or 0) / max(1, tp))
        return masks, 2 * cells * heads * 4.0
    if block_size != 1:
        notes.warn("tgi_gemma3_sdpa_unpriced")
    return masks, 0.0


def awq_split_k_peak_bytes(model: ModelSpec, tokens: int, tp: int, elem: float) -> float:
    """Forward peak of a layer whose widest projection runs llm-awq's split-k GEMM: the
    residual and normed input, `TGI_AWQ_SPLIT_K` partial outputs and their sum.

    The widest projection is the fused gate/up of a gated MLP (2 x intermediate), else the
    MLP's up projection or the fused QKV, whichever is wider.
    """
    hidden = model.hidden_size or 0
    heads = model.num_attention_heads or 0
    kv_heads = model.num_kv_heads or heads
    head_dim = model.head_dim or (hidden // heads if heads else 0)
    tp = max(1, tp)
    mlp_out = (2 if has_gated_mlp(model) else 1) * (model.intermediate_size or 0) / tp
    qkv_out = (heads + 2 * kv_heads) * head_dim / tp
    widest = max(mlp_out, qkv_out)
    return tokens * elem * (3 * hidden + (TGI_AWQ_SPLIT_K + 1) * widest)


def _awq_split_k(version: tuple[int, int, int], quantization: str | None) -> bool:
    low, high = TGI_AWQ_SPLIT_K_RANGE
    return bool(quantization) and quantization.lower() == "awq" and low <= version < high


def tgi_logit_copies(tp: int, version: tuple[int, int, int]) -> int:
    """Full logits tensors of the warm-up batch alive at once.

    Before 2.4.0: the logits and their log-softmax; at TP > 1 one more, because the LM head
    gathers the shards' logits into a transposed view (`TensorParallelHead.forward`,
    `utils/layers.py@v0.9.0`-`v1.4.5`, `layers/tensor_parallel.py:88-104@v3.3.7`:
    `return world_out.T`) and `torch.log_softmax` over its last dimension first makes it
    contiguous. From 2.4.0 the log-softmax is written into the logits (`out=out`), which saves
    the second tensor at TP 1 only: the transposed view is not contiguous, so torch computes
    into a temporary beside its contiguous copy of the input (`TGI_INPLACE_LOG_SOFTMAX_FROM`).

    >>> tgi_logit_copies(1, (2, 3, 1)), tgi_logit_copies(4, (2, 3, 1))
    (2, 3)
    >>> tgi_logit_copies(1, (3, 3, 7)), tgi_logit_copies(4, (3, 3, 7))
    (1, 3)
    """
    if tp > 1:
        return 3
    return 1 if version >= TGI_INPLACE_LOG_SOFTMAX_FROM else 2


def _warmup_request_tokens(regime: str, version: tuple[int, int, int], prompt: int, max_total: int | None) -> int:
    """KV tokens one warm-up request holds: its prompt and the new tokens it asks for.

    TGI 3's router asks for max-total-tokens minus the prompt when max-total-tokens is given, 1
    otherwise (backends/v3/src/client/grpc_client.rs:151-155@v3.3.4), and the shard holds blocks
    for prompt + new - 1 (flash_causal_lm.py:346@v3.3.4)."""
    if regime == "tgi-3" and max_total is not None and prompt < max_total:
        return max_total - 1
    if regime == "tgi-2":
        return max(prompt + 1, max_total or prompt + 1)
    if regime == "tgi-1" and version >= TGI_WARMUP_ASKS_MAX_TOTAL_FROM and max_total:
        return max(prompt + 1, max_total - 1)
    return prompt + _WARMUP_NEW_TOKENS[regime]


def _first_failure(model: ModelSpec, tp: int, regime: str, weights: float, torch_limit: float, short: bool,
                   batch_total: int | None, prefill_tokens: int, max_total: int, tokens: int,
                   total: float) -> tuple[str | None, str | None]:
    """The first error TGI stops with at start-up, in the order the shards and router run."""
    heads = heads_failure(model, tp)
    if heads:
        return heads, "heads_not_divisible_by_tp"
    if weights > torch_limit:
        return (f"CUDA out of memory. Tried to allocate {weights:.2f} GiB of weights. GPU 0 has a total "
                f"capacity of {total:.2f} GiB."), "weights_exceed_gpu"
    if short and regime == "tgi-0":
        return (f"Not enough memory to handle {batch_total} total tokens with {prefill_tokens} prefill tokens. "
                "You need to decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`"), \
            "tgi_total_tokens_oom"
    if short:
        return (f"Not enough memory to handle {prefill_tokens} prefill tokens. You need to decrease "
                "`--max-batch-prefill-tokens`"), "tgi_prefill_oom"
    if regime != "tgi-0" and max_total > tokens:
        return f"Not enough memory to handle max_total_tokens={max_total}", "tgi_max_total_tokens_oom"
    return None, None
