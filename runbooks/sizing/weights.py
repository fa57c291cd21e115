"""Parameter counts from the architecture, and weight bytes per GPU after quantization and sharding.

Engines keep embeddings, the LM head, MoE routers and norms in 16 bits whatever the
quantization; AWQ/GPTQ store 4-bit weights plus one fp16 scale and one packed zero per
group of 128; MXFP4 (gpt-oss) quantizes only the MoE experts; Meta's fbgemm_fp8 checkpoints
quantize only the MLPs, and not those of the first and last layer (`FBGEMM_DENSE_LAYERS`). Everything except routers and
MLA's compressed-KV projection is split by tensor parallelism; pipeline stages split layers,
the first stage holding the embedding and the last the LM head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from runbooks.model.evidence import ModelSpec
from runbooks.model.units import MIB
from runbooks.sizing.kv import dtype_bytes, serving_dtype

#: Meta's fbgemm_fp8 checkpoints list every attention projection and the MLP of the first and
#: the last layer in modules_to_not_convert (the Llama 3 paper's FP8 recipe: feed-forward layers
#: only, not the first and last transformer layer); vLLM loads those in 16 bits
#: (quantization/fbgemm_fp8.py:65-77@0.5.3, `_is_layer_skipped`)
FBGEMM_DENSE_LAYERS = 2
#: vLLM pads the vocabulary of embeddings and LM heads to a multiple of this
VOCAB_PADDING = 64
_GROUP = 128

_NON_GATED_MLP = ("PhiForCausalLM", "GPT2", "GPTNeoX", "GPTBigCode", "Falcon", "OPT", "Bloom", "Starcoder2")
_MULTIMODAL_MARKS = ("VL", "Vision", "ConditionalGeneration", "Llava", "Mllama", "Multimodal")


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameters by role, whole model. `other` is the rest of a stated total (vision tower,
    shared experts, norms, biases) and is negative when the architecture over-counts."""

    embed: float = 0.0
    lm_head: float = 0.0
    attention: float = 0.0
    mlp: float = 0.0
    experts: float = 0.0
    router: float = 0.0
    replicated: float = 0.0
    other: float = 0.0

    @property
    def total(self) -> float:
        return (self.embed + self.lm_head + self.attention + self.mlp + self.experts
                + self.router + self.replicated + self.other)


def is_multimodal(model: ModelSpec) -> bool:
    arch = model.architecture or ""
    return any(mark in arch for mark in _MULTIMODAL_MARKS)


def estimate_params(model: ModelSpec, *, shared_experts: int = 0, shared_intermediate: int | None = None,
                    first_dense_layers: int = 0, qk_nope_head_dim: int | None = None,
                    v_head_dim: int | None = None, vision_params: float = 0.0,
                    gated_mlp: bool | None = None) -> ParamBreakdown:
    """Parameters implied by the architecture alone (norms and biases left out).

    >>> from runbooks.catalogs.models import find_model
    >>> round(estimate_params(find_model("Qwen/Qwen2.5-7B")).total / 1e9, 2)
    7.62
    """
    layers = model.num_layers or 0
    hidden = model.hidden_size or 0
    vocab = model.vocab_size or 0
    embed = float(vocab * hidden)
    lm_head = 0.0 if model.tie_word_embeddings else embed
    attention, replicated = _attention_params(model, qk_nope_head_dim, v_head_dim)
    gated = gated_mlp if gated_mlp is not None else has_gated_mlp(model)
    mats = 3 if gated else 2
    experts = router = mlp = 0.0
    if model.num_experts:
        moe_layers = max(0, layers - first_dense_layers)
        moe_inter = model.moe_intermediate_size or model.intermediate_size or 0
        experts = float(moe_layers * model.num_experts * mats * hidden * moe_inter)
        router = float(moe_layers * model.num_experts * hidden)
        shared = shared_experts * mats * hidden * (shared_intermediate or moe_inter)
        mlp = float(first_dense_layers * mats * hidden * (model.intermediate_size or 0) + moe_layers * shared)
    else:
        mlp = float(layers * mats * hidden * (model.intermediate_size or 0))
    return ParamBreakdown(embed=embed, lm_head=lm_head, attention=attention * layers, mlp=mlp,
                          experts=experts, router=router, replicated=replicated * layers,
                          other=float(vision_params))


def param_breakdown(model: ModelSpec) -> ParamBreakdown:
    """`estimate_params`, with `other` set so the total matches `model.num_params` when stated."""
    est = estimate_params(model)
    if not model.num_params:
        return est
    return ParamBreakdown(embed=est.embed, lm_head=est.lm_head, attention=est.attention, mlp=est.mlp,
                          experts=est.experts, router=est.router, replicated=est.replicated,
                          other=model.num_params - (est.total - est.other))


def quantized_bytes_per_param(quantization: str | None, bits: int | None) -> float | None:
    """Bytes one quantized weight takes, scales included; None when not quantized.

    >>> round(quantized_bytes_per_param("awq", 4), 4)
    0.5195
    """
    if not quantization:
        return None
    q = quantization.lower().replace("-", "_")
    if q in ("none", "auto"):
        return None
    if q in ("fp8", "fbgemm_fp8", "fp8_e4m3", "ptpc_fp8", "modelopt", "experts_int8", "int8", "w8a8",
             "smoothquant", "sq"):
        return 1.0
    if q in ("mxfp4",):
        return (4 + 8 / 32) / 8
    if q in ("nvfp4", "modelopt_fp4", "fp4"):
        return (4 + 8 / 16) / 8
    if q in ("bitsandbytes", "bnb", "bnb_4bit", "bnb_8bit", "bitsandbytes_4bit", "bitsandbytes_8bit"):
        return bnb_bytes_per_param(bits)
    if q in ("gguf",):
        return ((bits or 4) + 0.5) / 8
    group_bits = (16 + (bits or 4)) / _GROUP  # one fp16 scale and one packed zero per group
    if q in ("awq", "awq_marlin", "gptq", "gptq_marlin", "marlin", "gptq_marlin_24", "auto_round",
             "autoround", "int4", "w4a16", "exl2", "hqq", "aqlm", "compressed_tensors"):
        return ((bits or 4) + group_bits) / 8
    return ((bits or 8) + group_bits) / 8


#: bitsandbytes 4-bit keeps one absmax per block of 64 weights; vLLM dequantizes a
#: double-quantized checkpoint's absmax (uint8 + an fp32 per 256 blocks) to fp32 at load
#: ("_dequantize_dq") and quantizes 16-bit checkpoints in flight with fp32 absmax: 4.5 bits
BNB_BLOCK = 64
BNB_ABSMAX_BITS = 32


def bnb_bytes_per_param(bits: int | None) -> float:
    """Bytes one bitsandbytes weight takes on the GPU, its quant state included.

    >>> bnb_bytes_per_param(4), bnb_bytes_per_param(8)
    (0.5625, 1.0)
    """
    if (bits or 4) <= 4:
        return (4 + BNB_ABSMAX_BITS / BNB_BLOCK) / 8
    return 1.0  # LLM.int8: int8 weights; the per-row fp32 scale is below 0.1% of a row


def quant_bits_default(quantization: str | None) -> int | None:
    """Bits of a quantization method when a checkpoint does not say."""
    if not quantization:
        return None
    q = quantization.lower().replace("-", "_")
    if q in ("fp8", "fbgemm_fp8", "int8", "w8a8", "smoothquant", "experts_int8", "ptpc_fp8", "bnb_8bit",
             "bitsandbytes_8bit"):
        return 8
    return 4


def weights_bytes(model: ModelSpec, dtype: str | None = None, quantization: str | None = None,
                  tp: int = 1, pp: int = 1) -> float:
    """Weight bytes on the most loaded GPU (pipeline stage 0 or the last; TP rank 0).

    `quantization` None means the checkpoint's own (`model.quantization`).

    >>> from runbooks.catalogs.models import find_model
    >>> from runbooks.model.units import GIB
    >>> round(weights_bytes(find_model("Qwen/Qwen2.5-7B-Instruct")) / GIB, 2)
    14.19
    """
    tp, pp = max(1, tp), max(1, pp)
    parts = param_breakdown(model)
    quant = quantization or model.quantization
    bits = model.quant_bits if (model.quantization and quant == model.quantization) else quant_bits_default(quant)
    q_bytes = quantized_bytes_per_param(quant, bits)
    w_bytes = dtype_bytes(serving_dtype(model, dtype))
    linear_bytes = q_bytes if q_bytes is not None else w_bytes
    experts_only = bool(quant) and quant.lower() == "mxfp4"
    dense_bytes = w_bytes if experts_only else linear_bytes
    other_bytes = w_bytes if (is_multimodal(model) or experts_only) else linear_bytes
    attention_bytes = mlp_bytes = dense_bytes
    if quant and quant.lower() == "fbgemm_fp8":
        layers = max(1, model.num_layers or 1)
        dense_share = min(1.0, FBGEMM_DENSE_LAYERS / layers)
        attention_bytes = w_bytes
        mlp_bytes = dense_share * w_bytes + (1 - dense_share) * linear_bytes

    pad = _padded_vocab(model) / model.vocab_size if model.vocab_size else 1.0
    embed = parts.embed * pad * w_bytes / tp
    lm_head = parts.lm_head * pad * w_bytes / tp
    sharded = (parts.attention * attention_bytes + parts.mlp * mlp_bytes + parts.experts * linear_bytes
               + parts.other * other_bytes) / tp
    whole = (parts.router + parts.replicated) * w_bytes
    stage_share = math.ceil((model.num_layers or 1) / pp) / max(1, model.num_layers or 1)
    layers_bytes = (sharded + whole) * stage_share
    if pp == 1:
        return max(0.0, layers_bytes + embed + lm_head)
    # pipeline stages: the first holds the embedding, the last the LM head (tied: both)
    return max(0.0, layers_bytes + max(embed, lm_head if not model.tie_word_embeddings else embed))


#: How vLLM pads MXFP4 expert weights for the kernel that runs them, as (intermediate, hidden)
#: multiples. Marlin needs n % 256 and k % 128 in both expert matrices: the intermediate size to
#: 128 and the hidden size to 256 (`quantization/mxfp4.py:189-200@0.11.0`,
#: `fused_moe/oracle/mxfp4.py:380-385@0.19.0`); the Triton kernels pad the intermediate size to 64
#: and leave the hidden size (`quantization/mxfp4.py:224-226@0.11.0`).
MXFP4_PAD = {"marlin": (128, 256), "triton": (64, 1)}
#: the first vLLM release that ships OpenAI's `triton_kernels` inside its wheel
#: (`vllm.third_party.triton_kernels`, `utils/import_utils.py:431-438@0.12.0`); before it the
#: package was a separate, optional install (`has_triton_kernels`, `utils/__init__.py:3431@0.11.0`)
VLLM_BUNDLES_TRITON_KERNELS = (0, 12, 0)


def mxfp4_experts(model: ModelSpec, quantization: str | None) -> bool:
    """True when the model's experts are MXFP4 (gpt-oss's checkpoints, or `--quantization mxfp4`)."""
    return (quantization or model.quantization or "").lower() == "mxfp4" and bool(model.num_experts)


def mxfp4_moe_kernel(capability: tuple[int, int] | None, version: tuple[int, int, int]) -> tuple[str | None, str | None]:
    """The kernel vLLM runs MXFP4 experts with on a card of this compute capability, and why
    it is an assumption (a `budget_why` id) or None where the release decides it alone.

    "triton" from 0.12 on 9.0 <= capability < 11.0 (`quantization/mxfp4.py:91-104@0.12.0`);
    "marlin" otherwise: below 9.0 in every release, from 11.0 from 0.12, and from 9.0 up before
    0.12, where `triton_kernels` does not come with vLLM (`quantization/mxfp4.py:95-102@0.11.0`;
    vllm#23278 shows an H100 on 0.10.1 using Marlin). That last case is an assumption: an image
    with `triton_kernels` installed by hand runs Triton. None when the capability is not known.
    The FlashInfer paths that an environment variable selects on 9.0 and 10.0 are not modelled.

    >>> mxfp4_moe_kernel((9, 0), (0, 11, 0))
    ('marlin', 'vllm_mxfp4_marlin_no_triton_kernels')
    >>> mxfp4_moe_kernel((9, 0), (0, 12, 0)), mxfp4_moe_kernel((12, 0), (0, 19, 0)), mxfp4_moe_kernel(None, (0, 12, 0))
    (('triton', None), ('marlin', None), (None, None))
    """
    if capability is None:
        return None, None
    if capability < (9, 0):
        return "marlin", None
    if version < VLLM_BUNDLES_TRITON_KERNELS:
        return "marlin", "vllm_mxfp4_marlin_no_triton_kernels"
    return ("triton", None) if capability < (11, 0) else ("marlin", None)


def mxfp4_padding_bytes(model: ModelSpec, quantization: str | None, kernel: str | None, tp: int = 1) -> float:
    """Bytes vLLM adds to MXFP4 expert weights by padding them for `kernel` (`mxfp4_moe_kernel`;
    0 when the kernel is not known or the experts are not MXFP4).

    >>> from runbooks.catalogs.models import find_model
    >>> from runbooks.model.units import GIB
    >>> round(mxfp4_padding_bytes(find_model("openai/gpt-oss-20b"), None, "marlin") / GIB, 2)
    0.85
    >>> round(mxfp4_padding_bytes(find_model("openai/gpt-oss-120b"), None, "marlin") / GIB, 2)
    5.13
    >>> mxfp4_padding_bytes(find_model("openai/gpt-oss-120b"), None, "triton")
    0.0
    """
    if kernel not in MXFP4_PAD or not mxfp4_experts(model, quantization):
        return 0.0
    inter = (model.moe_intermediate_size or model.intermediate_size or 0) / max(1, tp)
    hidden = model.hidden_size or 0
    if inter <= 0 or hidden <= 0:
        return 0.0
    pad_inter, pad_hidden = MXFP4_PAD[kernel]
    factor = (math.ceil(inter / pad_inter) * pad_inter / inter) * (math.ceil(hidden / pad_hidden) * pad_hidden / hidden)
    bits = model.quant_bits if model.quantization and model.quantization.lower() == "mxfp4" else quant_bits_default("mxfp4")
    q_bytes = quantized_bytes_per_param("mxfp4", bits) or 0.0
    return param_breakdown(model).experts * q_bytes / max(1, tp) * (factor - 1)


def _padded_vocab(model: ModelSpec) -> int:
    vocab = model.vocab_size or 0
    return -(-vocab // VOCAB_PADDING) * VOCAB_PADDING


def has_gated_mlp(model: ModelSpec) -> bool:
    """True for gate/up/down MLPs (Llama, Qwen, Mistral...), False for two-matrix ones (GPT-2, Phi-1/2)."""
    arch = model.architecture or ""
    return not any(arch.startswith(prefix) for prefix in _NON_GATED_MLP)


def _attention_params(model: ModelSpec, nope: int | None, v_dim: int | None) -> tuple[float, float]:
    """(TP-sharded, replicated) attention parameters of one layer."""
    hidden = model.hidden_size or 0
    heads = model.num_attention_heads or 0
    if model.is_mla:
        rope = model.qk_rope_head_dim or 0
        nope = nope or model.head_dim or 128
        v_dim = v_dim or model.head_dim or 128
        kv_lora = model.kv_lora_rank or 0
        if model.q_lora_rank:
            q = hidden * model.q_lora_rank + model.q_lora_rank * heads * (nope + rope)
            replicated = float(hidden * model.q_lora_rank)
            q -= hidden * model.q_lora_rank
        else:
            q = hidden * heads * (nope + rope)
            replicated = 0.0
        kv_a = hidden * (kv_lora + rope)
        kv_b = kv_lora * heads * (nope + v_dim)
        o = heads * v_dim * hidden
        return float(q + kv_b + o), replicated + float(kv_a)
    head_dim = model.head_dim or (hidden // heads if heads else 0)
    kv_heads = model.num_kv_heads or heads
    qkv = hidden * (heads + 2 * kv_heads) * head_dim
    o = heads * head_dim * hidden
    return float(qkv + o), 0.0


#: PyTorch's caching allocator rounds allocations of 10 MiB and more up to 2 MiB
_ROUND_LARGE = 2.0 * MIB
_LARGE_FROM = 10.0 * MIB


def allocator_slack_bytes(model: ModelSpec, dtype: str | None = None, quantization: str | None = None,
                          tp: int = 1, pp: int = 1) -> float:
    """Bytes the caching allocator reserves beyond the weights themselves (each large tensor
    rounded up to 2 MiB); engines that measure weights as a drop in free memory see it."""
    tp, pp = max(1, tp), max(1, pp)
    quant = quantization or model.quantization
    bits = model.quant_bits if (model.quantization and quant == model.quantization) else quant_bits_default(quant)
    elem = quantized_bytes_per_param(quant, bits) or dtype_bytes(serving_dtype(model, dtype))
    w_elem = dtype_bytes(serving_dtype(model, dtype))
    slack = sum(_round_slack(n * elem) for n in _layer_tensors(model, tp)) * math.ceil((model.num_layers or 0) / pp)
    rows = _padded_vocab(model) / tp * (model.hidden_size or 0)
    slack += _round_slack(rows * w_elem) * (1 if model.tie_word_embeddings else 2)
    return slack


#: vLLM pads the LoRA LM head's vocabulary to a multiple of this (lora_vocab_padding_size)
LORA_VOCAB_PADDING = 256
#: vLLM's default --max-lora-rank and the ranks it accepts
LORA_DEFAULT_RANK = 16
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_bytes(model: ModelSpec, max_lora_rank: int, max_loras: int = 1, tp: int = 1, dtype: str | None = None,
               extra_vocab: int = 256) -> float:
    """vLLM's preallocated LoRA slots on one GPU, `max_loras` of each.

    Per decoder layer, A (rank x in) and B (out x rank) for q/k/v, o, gate/up and down: a
    column-parallel layer keeps A whole and splits B by TP, a row-parallel one the reverse.
    The embedding keeps A over the vocabulary plus `extra_vocab` adapter tokens, B and the
    extra-token embeddings; the LM head keeps A, B over the vocabulary padded to 256, and its
    extra-token rows.

    >>> from runbooks.catalogs.models import find_model
    >>> round(lora_bytes(find_model("meta-llama/Llama-3.1-8B-Instruct"), 16) / 2**20, 1)
    92.1
    """
    if max_lora_rank <= 0:
        return 0.0
    tp = max(1, tp)
    hidden = model.hidden_size or 0
    heads = model.num_attention_heads or 0
    head_dim = model.head_dim or (hidden // heads if heads else 0)
    kv_heads = model.num_kv_heads or heads
    inter = model.intermediate_size or 0
    q_out, kv_out = heads * head_dim / tp, max(1, kv_heads // tp) * head_dim
    per_layer = (3 * hidden + q_out + 2 * kv_out  # qkv: A whole per slice, B split
                 + heads * head_dim / tp + hidden  # o_proj: A split, B whole
                 + 2 * hidden + 2 * inter / tp  # gate_up
                 + inter / tp + hidden)  # down
    vocab = (model.vocab_size or 0) + extra_vocab
    embedding = vocab * max_lora_rank + hidden * max_lora_rank + extra_vocab * hidden
    padded = -(-vocab // LORA_VOCAB_PADDING) * LORA_VOCAB_PADDING
    lm_head = hidden * max_lora_rank + padded * max_lora_rank + extra_vocab * hidden
    total = per_layer * (model.num_layers or 0) * max_lora_rank + embedding + lm_head
    return total * max(1, max_loras) * dtype_bytes(serving_dtype(model, dtype))


def _round_slack(size: float) -> float:
    if size < _LARGE_FROM:
        return 0.0
    return math.ceil(size / _ROUND_LARGE) * _ROUND_LARGE - size


def _layer_tensors(model: ModelSpec, tp: int) -> list[float]:
    """Element counts of one layer's large weight tensors on one TP rank."""
    hidden = model.hidden_size or 0
    heads = model.num_attention_heads or 0
    head_dim = model.head_dim or (hidden // heads if heads else 0)
    kv_heads = model.num_kv_heads or heads
    tensors: list[float] = []
    if not model.is_mla:
        tensors.append((heads / tp + 2 * max(1, kv_heads // tp)) * head_dim * hidden)
        tensors.append(heads / tp * head_dim * hidden)
    mats = 2 if has_gated_mlp(model) else 1
    if model.num_experts:
        inter = (model.moe_intermediate_size or model.intermediate_size or 0) / tp
        tensors += [model.num_experts * mats * inter * hidden, model.num_experts * inter * hidden]
    else:
        inter = (model.intermediate_size or 0) / tp
        tensors += [mats * inter * hidden, inter * hidden]
    return tensors
