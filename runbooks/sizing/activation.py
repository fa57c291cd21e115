"""Transient memory an engine measures or reserves next to weights and KV: activation peaks,
sampler buffers, non-torch memory (CUDA context, NCCL and all-reduce buffers) and CUDA graphs.

These are estimates of what the engines' own profilers measure. Constants marked "fitted"
were read off real start-up logs (the shared calibration cases and public vLLM logs) and are
the same for every model; the structure (what scales with what) follows the engines' code.
"""

from __future__ import annotations

from runbooks.model.evidence import ModelSpec
from runbooks.sizing.kv import dtype_bytes
from runbooks.sizing.weights import has_gated_mlp

#: fused-MoE kernels process at most this many tokens at once (vLLM VLLM_FUSED_MOE_CHUNK_SIZE)
MOE_CHUNK_TOKENS = 32768

#: sampler working set in units of (rows x vocab x 4 bytes), fitted:
#: vLLM V0 sorts the whole vocabulary for top-k/top-p (logits, sorted values, int64 indices,
#: softmax, cumsum, scatter back: ~10 copies; Phi-4 0.94 GiB, Llama-3 1.26 GiB, Qwen 1.40 GiB);
#: V0 with chunked prefill showed about one copy (0.19-0.22 GiB in 0.7 logs);
#: V1 `_dummy_sampler_run` ~8.5 copies (1.04-1.40 GiB on 256 x 152k).
SAMPLER_UNITS_V0 = 10.0
SAMPLER_UNITS_V0_CHUNKED = 1.2
SAMPLER_UNITS_V1 = 8.5

#: non-torch memory an engine counts on one GPU beyond its baseline (cuBLAS workspaces,
#: attention scratch): 0.01-0.26 GiB in the corpus, fitted
NON_TORCH_BASE_GIB = 0.1

#: CUDA-graph memory per captured batch size and layer, fitted on V0 and V1 logs
#: (Phi-4 0.27 GiB over 35 sizes x 40 layers; Qwen2.5-7B 0.48 GiB over 67 x 28)
GRAPH_GIB_PER_SIZE_LAYER = 2.2e-4


def cuda_context_gib(gpu_total_gib: float) -> float:
    """CUDA context and library handles a process holds before any tensor, fitted:
    0.35 GiB on 24 GiB cards, 0.73 GiB on an H200 (vLLM 0.6.4 counted it as non-torch)."""
    return 0.3 + 0.003 * max(0.0, gpu_total_gib)


def comm_buffers_gib(tp: int, nvlink: bool) -> float:
    """NCCL and custom all-reduce buffers per GPU at tensor parallel `tp`, fitted:
    1.39 GiB at TP4 and 2.1 GiB at TP8 on NVLink parts; 0.1-0.25 GiB on PCIe cards,
    where custom all-reduce is off."""
    if tp <= 1:
        return 0.0
    return 0.5 + 0.2 * tp if nvlink else 0.02 * tp


def forward_peak_bytes(model: ModelSpec, tokens: int, tp: int = 1, dtype: str | None = None,
                       unfused_act: bool = False) -> float:
    """Peak bytes of one forward pass over `tokens` tokens on one GPU (the MLP stage dominates).

    Counts the residual, the normed input and the layer's largest intermediates; logits are
    left to the sampler. A gated MLP holds its fused gate/up output and one intermediate-sized
    tensor where the activation and the product are one kernel (vLLM's and SGLang's
    `SiluAndMul`). `unfused_act` is for an engine that writes `act(gate) * up` in torch, as TGI's
    CUDA models do (`flash_llama_modeling.py:319@v0.9.3`, `:402-404@v3.3.7`): the activation's
    output and the product are two tensors alive at once beside the gate/up output.
    """
    if tokens <= 0:
        return 0.0
    b = dtype_bytes(dtype)
    tp = max(1, tp)
    hidden = model.hidden_size or 0
    heads = model.num_attention_heads or 0
    kv_heads = model.num_kv_heads or heads
    head_dim = model.head_dim or (hidden // heads if heads else 0)
    q_and_out = 2 * heads / tp  # query and attention output, heads split by TP
    k_and_v = 2 * max(1, kv_heads // tp)
    attn = tokens * b * (3 * hidden + (q_and_out + k_and_v) * head_dim)
    gated = has_gated_mlp(model)
    mats = 3 if gated else 2
    if model.num_experts:  # the fused MoE kernels apply the activation in one pass, TGI's too
        inter = (model.moe_intermediate_size or model.intermediate_size or 0) / tp
        top_k = model.experts_per_token or 1
        chunk = min(tokens, MOE_CHUNK_TOKENS)
        mlp = tokens * b * 3 * hidden + chunk * top_k * b * (mats * inter + hidden)
        mlp += tokens * (model.num_experts * 4)  # router logits in fp32
    else:
        dense = mats + (1 if unfused_act and gated else 0)  # act(gate) and the product, both alive
        mlp = tokens * b * (3 * hidden + dense * (model.intermediate_size or 0) / tp)
    return max(attn, mlp)


def sampler_peak_bytes(model: ModelSpec, rows: int, units: float) -> float:
    """Sampler working set over `rows` rows of fp32 logits."""
    return max(0, rows) * (model.vocab_size or 0) * 4.0 * units


def logits_bytes(model: ModelSpec, rows: int, elem_bytes: float) -> float:
    return max(0, rows) * (model.vocab_size or 0) * elem_bytes


def vllm_v0_capture_sizes(max_num_seqs: int) -> int:
    """Batch sizes vLLM V0 captures: [1, 2, 4] + 8..512 step 8, up to max_num_seqs rounded up."""
    sizes = [1, 2, 4, *range(8, 513, 8)]
    limit = next((s for s in sizes if s >= max_num_seqs), sizes[-1])
    return sum(1 for s in sizes if s <= limit)


def vllm_v1_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, newer: bool) -> int:
    """Batch sizes vLLM V1 captures: up to 512 (0.8-0.10), or up to 2 x max_num_seqs (newer)."""
    if newer:
        sizes = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
        limit = min(512, 2 * max(1, max_num_seqs), max(1, max_num_batched_tokens))
    else:
        sizes = [1, 2, 4, *range(8, 513, 8)]
        limit = min(512, max(1, max_num_batched_tokens))
    return sum(1 for s in sizes if s <= limit)


def cudagraph_gib(model: ModelSpec, n_sizes: int, tp: int, per_size_layer: float = GRAPH_GIB_PER_SIZE_LAYER) -> float:
    """Memory of captured CUDA graphs: per size and layer, plus all-reduce outputs at TP > 1."""
    layers = model.num_layers or 0
    base = n_sizes * layers * per_size_layer
    if tp > 1:
        base += 0.25 + 0.02 * n_sizes
    return base
