"""Engine versions and the defaults each one applies when a flag is not given.

Facts from the engines' own source (reference/memory-model.md); boundaries between
versions are the releases where the behaviour was read, so a version between two read
releases takes the older behaviour.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

#: the newest version of each engine whose arithmetic this package models
LATEST = {"vllm": (0, 33, 0), "sglang": (0, 5, 23), "tgi": (3, 3, 0)}

_VERSION_RE = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """The first dotted number in `text` as (major, minor, patch); None when there is none.

    >>> parse_version("v0.8.5.post1"), parse_version("~2.2-2.3"), parse_version("latest")
    ((0, 8, 5), (2, 2, 0), None)
    """
    if not text:
        return None
    match = _VERSION_RE.search(text)
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2) or 0), int(match.group(3) or 0))


def version_text(version: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in version)


# ------------------------------------------------------------------------- vLLM

#: how vLLM turns gpu_memory_utilization into a KV budget (memory-model.md 1.2)
VLLM_REGIMES = {
    "v0-legacy": "V0 <= 0.6.3: util x total minus what profiling consumed",
    "v0-064": "V0 0.6.4: util x total minus torch peak and all non-torch memory, other processes included",
    "v0": "V0 0.6.5-0.10: util x total minus weights, activation peak and non-torch growth since start",
    "v1-08": "V1 0.7 (opt-in) and 0.8: util x total minus torch peak and non-torch memory, other processes included",
    "v1": "V1 0.9-0.20: start fails below util x total free; CUDA graphs outside the budget",
    "v1-graphs": "V1 >= 0.21: as 0.9, CUDA-graph memory estimated and taken from the KV budget",
}


#: vLLM made V1 the default engine in 0.8.0 (VLLM_USE_V1=1); V1 ran opt-in from 0.7.0
VLLM_V1_DEFAULT_FROM = (0, 8, 0)
VLLM_V1_OPT_IN_FROM = (0, 7, 0)
#: from 0.8.0 until 0.10.2 V1 needed compute capability 8.0 (FlashAttention): on older GPUs
#: vLLM fell back to V0, or refused VLLM_USE_V1=1 ("VLLM_USE_V1=1 is not supported with
#: Compute Capability < 8.0."); 0.10.2 runs V1 there too (FlexAttention, vllm#23614)
VLLM_V1_ANY_GPU_FROM = (0, 10, 2)
VLLM_V1_MIN_CAPABILITY = (8, 0)
#: the V0 engine was removed in 0.11.0: VLLM_USE_V1=0 no longer selects anything
VLLM_V0_REMOVED_IN = (0, 11, 0)


def vllm_engine(version: tuple[int, int, int], use_v1: bool | None,
                compute_capability: tuple[int, int] | None = None) -> tuple[str, str]:
    """("v0" | "v1", why): the engine a vLLM version runs for VLLM_USE_V1 (None: unset) on a
    GPU of `compute_capability` (None: unknown, taken as able to run V1); `why` a reason id
    (catalog `budget_why.<why>`).

    >>> vllm_engine((0, 8, 5), None, (7, 5))
    ('v0', 'vllm_v0_below_cc80')
    >>> vllm_engine((0, 8, 5), None, (8, 0))[0], vllm_engine((0, 10, 2), None, (7, 5))[0]
    ('v1', 'v1')
    """
    if version >= VLLM_V0_REMOVED_IN:
        return "v1", "vllm_v1_only"
    if version < VLLM_V1_DEFAULT_FROM:
        if use_v1 and version >= VLLM_V1_OPT_IN_FROM:
            return "v1", "vllm_v1_opt_in"
        return "v0", "vllm_v0_before_08"
    if use_v1 is False:
        return "v0", "vllm_use_v1_off"
    if vllm_v1_needs_ampere(version) and compute_capability is not None \
            and compute_capability < VLLM_V1_MIN_CAPABILITY:
        if use_v1:
            return "v1", "vllm_v1_refused_below_cc80"
        return "v0", "vllm_v0_below_cc80"
    return "v1", "vllm_v1_from_08"


#: what V1's profile run holds past the forward pass, by release: 0.7.0-0.7.2 compute logits
#: over every one of the max_num_batched_tokens dummy tokens and stop there ("TODO(woosuk):
#: Consider the memory usage of the sampler", v1/worker/gpu_model_runner.py:986-988@0.7.0,
#: 1010-1012@0.7.2); 0.7.3 keeps only the last token of each of max_num_seqs dummy requests
#: (`hidden_states[logit_indices]`, gpu_model_runner.py:1296-1306@0.7.3), still without the
#: sampler; 0.8.0 runs the sampler on them (`_dummy_sampler_run`, gpu_model_runner.py:1276,
#: 1403@0.8.0)
VLLM_V1_LOGITS_PER_REQUEST_FROM = (0, 7, 3)
VLLM_V1_SAMPLER_PROFILED_FROM = (0, 8, 0)


def vllm_v1_needs_ampere(version: tuple[int, int, int]) -> bool:
    """V1 of this version refuses GPUs below compute capability 8.0 (0.8.0 - 0.10.1)."""
    return VLLM_V1_DEFAULT_FROM <= version < VLLM_V1_ANY_GPU_FROM


def vllm_regime(version: tuple[int, int, int], use_v1: bool | None,
                compute_capability: tuple[int, int] | None = None) -> str:
    """The VLLM_REGIMES key of a version, VLLM_USE_V1 setting and GPU compute capability."""
    if version < (0, 6, 4):
        return "v0-legacy"
    if version < (0, 6, 5):
        return "v0-064"
    engine, _ = vllm_engine(version, use_v1, compute_capability)
    if engine == "v0":
        return "v0"
    if version < (0, 9, 0):
        return "v1-08"  # V1 0.7 (opt-in) and 0.8 count other processes as non-torch memory
    if version < (0, 21, 0):
        return "v1"
    return "v1-graphs"


def vllm_v0_batched_tokens(version: tuple[int, int, int], max_model_len: int, chunked: bool,
                           multimodal: bool) -> int:
    """V0 max_num_batched_tokens default: 2048 (512 before 0.6.4) with chunked prefill, else
    max(max_model_len, 2048), or 5120 for multimodal models."""
    if chunked:
        return 2048 if version >= (0, 6, 4) else 512
    floor = 5120 if multimodal else 2048
    return max(max_model_len, floor)


def vllm_v0_chunked_default(max_model_len: int, multimodal: bool, mla: bool) -> bool:
    """V0 turns chunked prefill on by itself above 32K context, except for multimodal and MLA models."""
    return max_model_len > 32768 and not multimodal and not mla


#: the V1 API server's batch defaults by card (vllm/engine/arg_utils.py of each release): 1024
#: sequences / 8192 batched tokens from 70 GiB (:1596@0.8.5), A100s excepted from 0.9.0
#: (:1495@0.9.0, vllm#17885), a >= 160 GiB tier of 1024 / 16384 from 0.28.0 (:2582@0.28.0; absent
#: in 0.27.0), GB10 (compute capability 12.1) excepted from 0.33.0 (:2963@0.33.0)
VLLM_A100_EXCEPTION_FROM = (0, 9, 0)
#: before 0.8.5 the card's name decided, not its memory: 8192 batched tokens on an H100 or H200
#: ('"h100" in device_name or "h200" in device_name'), 2048 on any other (arg_utils.py:1281@0.7.0,
#: :1368@0.7.3, :1693@0.8.0, :1669@0.8.4); max_num_seqs 1024 on every card until 0.8.3
#: (arg_utils.py:213@0.7.0, :1715@0.8.0, :1669@0.8.3), 256 off H100/H200 in 0.8.4 (:1682@0.8.4)
VLLM_V1_LIMITS_BY_MEMORY_FROM = (0, 8, 5)
VLLM_V1_SEQS_BY_CARD_FROM = (0, 8, 4)
VLLM_160_GIB_TIER_FROM = (0, 28, 0)
VLLM_GB10_EXCEPTION_FROM = (0, 33, 0)


def vllm_v1_limits(version: tuple[int, int, int], gpu_total_gib: float,
                   gpu_name: str | None) -> tuple[int, int, tuple[str, dict[str, Any]]]:
    """(max_num_seqs, max_num_batched_tokens, why) defaults of the V1 OpenAI API server; `why`
    a reason id (catalog `budget_why.<why>`) and its values.

    >>> vllm_v1_limits((0, 8, 5), 79.15, "A100 80GB")[:2], vllm_v1_limits((0, 9, 0), 79.15, "A100 80GB")[:2]
    ((1024, 8192), (256, 2048))
    >>> vllm_v1_limits((0, 21, 0), 178.0, "B200")[:2], vllm_v1_limits((0, 28, 0), 178.0, "B200")[:2]
    ((1024, 8192), (1024, 16384))
    >>> vllm_v1_limits((0, 7, 1), 79.15, "A100 80GB")[:2], vllm_v1_limits((0, 8, 4), 44.4, "L40S")[:2]
    ((1024, 2048), (256, 2048))
    """
    name = (gpu_name or "").lower()
    if version < VLLM_V1_LIMITS_BY_MEMORY_FROM:
        return _vllm_v1_limits_by_name(version, gpu_total_gib, name)
    excepted = ("a100" in name and version >= VLLM_A100_EXCEPTION_FROM) or \
        ("gb10" in name and version >= VLLM_GB10_EXCEPTION_FROM)
    if version >= VLLM_160_GIB_TIER_FROM and gpu_total_gib >= 160:
        return 1024, 16384, ("vllm_v1_160_gib", {})
    if gpu_total_gib >= 70 and not excepted:
        if version < VLLM_A100_EXCEPTION_FROM:
            return 1024, 8192, ("vllm_08_70_gib", {})
        return 1024, 8192, ("vllm_v1_70_gib", {})
    if gpu_total_gib >= 70:
        return 256, 2048, ("vllm_v1_excepted_gpu", {"gpu": "A100" if "a100" in name else "GB10"})
    return 256, 2048, ("vllm_v1_below_70_gib", {})


def _vllm_v1_limits_by_name(version: tuple[int, int, int], gpu_total_gib: float,
                            name: str) -> tuple[int, int, tuple[str, dict[str, Any]]]:
    """V1 0.7.0-0.8.4: 8192 batched tokens on an H100/H200 by name, else 2048; 1024 sequences
    (0.8.4: 256 off H100/H200). An unnamed card is taken as an H100/H200 from 70 GiB."""
    big = ("h100" in name or "h200" in name) if name else gpu_total_gib >= 70
    seqs = 1024 if big or version < VLLM_V1_SEQS_BY_CARD_FROM else 256
    why = (f"vllm_07_{'h100' if big else 'other'}_{'by_name' if name else 'assumed'}", {})
    return seqs, 8192 if big else 2048, why


def vllm_mla_absorbs_matrices(version: tuple[int, int, int], regime: str) -> bool:
    """V0 0.7.1-0.7.x precomputed W_Q_UK and W_UV_O for MLA decode (VLLM_MLA_PERFORM_MATRIX_ABSORPTION=1)."""
    return regime == "v0" and (0, 7, 1) <= version < (0, 8, 0)


def vllm_has_mla(version: tuple[int, int, int]) -> bool:
    """vLLM caches the MLA latent from 0.7.1; before, DeepSeek V2/V3 ran with full per-head K and V."""
    return version >= (0, 7, 1)


def vllm_exploits_windows(version: tuple[int, int, int], regime: str) -> bool:
    """V1's hybrid KV-cache manager (0.10+) gives sliding-window layers only the window."""
    return regime.startswith("v1") and version >= (0, 10, 0)


def vllm_v1_error_wording(version: tuple[int, int, int]) -> str:
    """"old" (0.8-0.10: "models's", "Based on the available memory") or "new"."""
    return "old" if version < (0, 11, 0) else "new"


# ----------------------------------------------------------------------- SGLang


#: SGLang sizes its default --mem-fraction-static from an activation and graph reserve from
#: 0.5.3 (server_args.py of 0.5.2 still has the card tiers; 0.5.3, 0.5.5 and 0.5.23 the reserve)
SGLANG_ACTIVATION_RESERVE_FROM = (0, 5, 3)


def sglang_mem_fraction_static(version: tuple[int, int, int], gpu_total_gib: float, tp: int,
                               pp: int = 1) -> tuple[float, tuple[str, dict[str, Any]]]:
    """SGLang's default --mem-fraction-static and why (a reason id, catalog `budget_why.<why>`,
    and its values).

    <= 0.4.9: by TP (0.88 single GPU ... 0.79 at TP >= 16), raised on > 96 GB cards;
    0.4.10-0.5.2: keep a reserve sized by the card; from 0.5.3: a reserve for one prefill
    chunk's activations, the decode CUDA graphs and the parallel size, at least 10 GB on > 60 GB
    cards.

    >>> sglang_mem_fraction_static((0, 5, 23), 79.19, 1)
    (0.834, ('sglang_activation_reserve', {'reserve_gb': 13.1, 'chunk': 8192, 'graphs': 256}))
    """
    gpu_mb = gpu_total_gib * 1024
    if version < (0, 4, 10):
        mfs = 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88
        why = "sglang_tp_default"
        if gpu_mb > 96 * 1024:
            mfs = min(mfs + 48 * 1024 * (1 - mfs) / gpu_mb, (gpu_mb - 18 * 1024) / gpu_mb)
            why = "sglang_tp_default_raised"
        return round(mfs, 3), (why, {"tp": tp})
    parallel = tp * pp
    if version >= SGLANG_ACTIVATION_RESERVE_FROM:
        # server_args.py:785-823@0.5.5 (the same terms in arg_groups/memory_hook.py:280-330 and
        # reserve_for_graph_mb :357@0.5.23): metadata, activations of one chunk, decode graphs,
        # parallel slack; at least 10 GB on cards over 60 GB
        chunk = sglang_chunked_prefill(version, gpu_total_gib)
        graphs = sglang_graph_max_bs(version, gpu_total_gib, tp)
        reserved = 512 + max(chunk, 2048) * 1.5 + graphs * 2 + parallel / 8 * 1024
        if gpu_mb > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        mfs = round((gpu_mb - reserved) / gpu_mb, 3)
        return mfs, ("sglang_activation_reserve", {"reserve_gb": round(reserved / 1024, 1), "chunk": chunk,
                                                   "graphs": graphs})
    if gpu_mb < 35 * 1024:
        reserved = (2.8 + parallel / 10) * 1024
    elif gpu_mb < 90 * 1024:
        reserved = (9.5 + parallel / 2) * 1024
    elif gpu_mb < 160 * 1024:
        reserved = (12 + parallel / 2) * 1024
    else:
        reserved = 32 * 1024
    mfs = round((gpu_mb - reserved) / gpu_mb, 3) if gpu_mb > reserved else 0.5
    return mfs, ("sglang_card_reserve", {"reserve_gb": round(reserved / 1024, 1)})


def sglang_chunked_prefill(version: tuple[int, int, int], gpu_total_gib: float) -> int:
    if version < (0, 4, 10):
        return 2048 if gpu_total_gib < 25 else 8192
    if version >= SGLANG_ACTIVATION_RESERVE_FROM:
        # server_args.py:690-750@0.5.5 (CUDA cards)
        return 2048 if gpu_total_gib < 35 else 4096 if gpu_total_gib < 60 else 8192 if gpu_total_gib < 160 else 16384
    return 2048 if gpu_total_gib < 35 else 8192 if gpu_total_gib < 160 else 16384


def sglang_graph_max_bs(version: tuple[int, int, int], gpu_total_gib: float, tp: int) -> int:
    if version >= SGLANG_ACTIVATION_RESERVE_FROM:
        # server_args.py:690-750@0.5.5 (CUDA cards)
        if gpu_total_gib < 20:
            return 8
        if gpu_total_gib < 35:
            return 24 if tp < 4 else 80
        if gpu_total_gib < 60:
            return 32 if tp < 4 else 160
        if gpu_total_gib < 160:
            return 256 if tp < 4 else 512
        return 512
    small = gpu_total_gib < (25 if version < (0, 4, 10) else 35)
    if small:
        return 8 if tp < 4 else 80
    if version < (0, 4, 10) or gpu_total_gib < 90:
        return 160
    return 256 if gpu_total_gib < 160 else 512


def sglang_exploits_windows(version: tuple[int, int, int]) -> bool:
    """SGLang 0.5 sizes separate pools for sliding-window layers."""
    return version >= (0, 5, 0)


# -------------------------------------------------------------------------- TGI


#: TGI versions whose router infers max-batch-total-tokens from the memory warm-up leaves
#: (flash-attention models): 0.9.4 (flash_causal_lm.py warmup reads torch.cuda.mem_get_info
#: from v0.9.4, not in v0.9.3); before, --max-batch-total-tokens (default 16000) was allocated
#: up front and warm-up failed with "Not enough memory to handle N total tokens"
TGI_INFERS_TOTAL_TOKENS_FROM = (0, 9, 4)
#: the launcher default of --max-batch-total-tokens before the router inferred it
TGI_LEGACY_BATCH_TOTAL_TOKENS = 16000
#: the share of memory TGI gives the KV cache after warm-up, per release tag read
#: (server/text_generation_server/models/flash_causal_lm.py and models/globals.py):
#: none (1.0) 0.9.4-1.4.0; `free_memory * 0.95` from 1.4.1 (flash_causal_lm.py:778@v1.4.1);
#: TGI_WIGGLE_ROOM default "0.95" in 2.3.x (globals.py:21@v2.3.0), "0.90" in 2.4.x
#: (globals.py:26@v2.4.0), "0.95" in 3.0.x (globals.py:27@v3.0.0), "0.93" in 3.1.0-3.2.3 and
#: "0.90" from 3.3.0 (globals.py:32@v3.3.7)
TGI_WIGGLE_ROOM_BY_VERSION = (((0, 0, 0), 1.0), ((1, 4, 1), 0.95), ((2, 4, 0), 0.90), ((3, 0, 0), 0.95),
                              ((3, 1, 0), 0.93), ((3, 3, 0), 0.90))
#: from 3.0 the share multiplies the memory fraction, not the free memory: the KV cache gets
#: free - (1 - cuda_memory_fraction x wiggle) x total (flash_causal_lm.py:1556@v3.3.7,
#: get_free_memory(device, MEMORY_FRACTION * TGI_WIGGLE_ROOM)); before, wiggle x (free - (1 -
#: cuda_memory_fraction) x total) (flash_causal_lm.py:1553@v2.4.1)
TGI_WIGGLE_ON_FRACTION_FROM = (3, 0, 0)
#: the share is read from the environment (TGI_WIGGLE_ROOM) from 2.3.0 (globals.py:21@v2.3.0);
#: before it is a constant in flash_causal_lm.py (`free_memory * 0.95`, :985@v2.1.0)
TGI_WIGGLE_ROOM_ENV_FROM = (2, 3, 0)


#: from 1.2.0 the router's warm-up requests ask for max-total-tokens minus their prompt as new
#: tokens (router/client/src/client.rs:130@v1.2.0, :135@v1.4.5; 2 before: client.rs:129@v1.1.0),
#: so each holds KV blocks for input + max_new_tokens - 1 = max-total-tokens - 1 tokens
#: (flash_causal_lm.py:196-197@v1.4.5)
TGI_WARMUP_ASKS_MAX_TOTAL_FROM = (1, 2, 0)
#: from 2.4.0 the warm-up's prefill log-softmax is written into the logits tensor itself,
#: `torch.log_softmax(out, -1, out=out)` (flash_causal_lm.py:2046@v2.4.0, :2116@v3.3.7;
#: `prefill_logprobs_tensor = torch.log_softmax(out, -1)`, a second tensor, at :1730@v2.3.1).
#: Only a contiguous `out` is written in place: at TP > 1 `out` is the gathered logits'
#: transposed view, and torch's log_softmax_out then computes into a temporary and copies back
#: (aten/src/ATen/native/SoftMax.cpp, `if (!output_.is_contiguous())`) after the CUDA kernel has
#: made its own contiguous copy of the input (native/cuda/SoftMax.cu host_softmax,
#: `input_.contiguous()`)
TGI_INPLACE_LOG_SOFTMAX_FROM = (2, 4, 0)
#: from 3.0.0 a shard drops every request's prefill log-probabilities unless REQUEST_LOGPROBS is
#: set (`if not REQUEST_LOGPROBS: r.prefill_logprobs = False`, flash_causal_lm.py:298@v3.0.0,
#: :286@v3.3.4; globals.py REQUEST_LOGPROBS defaults to "0"; the launcher sets it for
#: --enable-prefill-logprobs, launcher/src/main.rs:1101@v3.3.4). The warm-up's LM head then
#: runs on the last token of each request only (`prefill_head_indices = cu_seqlen_prefill[1:] -
#: 1`, flash_causal_lm.py:1144-1146@v3.3.4), not on the whole prefill
TGI_PREFILL_LOGPROBS_OPT_IN_FROM = (3, 0, 0)
#: TGI releases whose AWQ layers run llm-awq's GEMM with split_k_iters 8
#: (utils/awq/quantize/qmodule.py:46-47@v1.1.0..v2.1.x): the kernel writes split_k partial
#: outputs, `torch::empty({split_k_iters, num_in_feats, OC})`, then returns their `.sum(0)`
#: (awq/kernels/csrc/quantization/gemm_cuda_gen.cu, llm-awq at bd1dc2d, the commit
#: server/Makefile-awq builds from 1.4.1 to 2.1.x: a fork of the f084f40 that 1.1-1.4.0 build
#: "that adds only the correct stream to this kernel", Makefile-awq:1-3@v1.4.1); from 2.2.0
#: AWQ loads through Marlin where the GPU allows (layers/marlin.py:171-183@v2.2.0)
TGI_AWQ_SPLIT_K = 8
TGI_AWQ_SPLIT_K_RANGE = ((1, 1, 0), (2, 2, 0))


# ------------------------------------------------- TGI 3's default max-batch-prefill-tokens

#: from 3.0.0 the launcher sizes the default --max-batch-prefill-tokens from the cards' f16
#: throughput over the model's FLOPs a token, capped by the model's length and by the tokens
#: its memory estimate allows (launcher/src/main.rs `compute_optimal`, `vram_maximum` and the
#: `max_batch_prefill_tokens` block, :2110-2148@v3.3.4); 2.x defaulted it to max-input + 50
TGI_COMPUTED_PREFILL_FROM = (3, 0, 0)
#: the default where the launcher cannot compute one (an unknown card, a VLM): 4096, and from
#: 3.2.0 10,000 for qwen2_vl / qwen2_5_vl and 8000 for gemma3 (main.rs:2116-2124@v3.3.4)
TGI_PREFILL_FALLBACK = 4096
TGI_VLM_PREFILL_FROM = (3, 2, 0)
TGI_VLM_PREFILL = {"qwen2_vl": 10_000, "qwen2_5_vl": 10_000, "gemma3": 8000}
#: the cards the launcher knows, by the name it makes of nvidia-smi's `gpu_name` (lowercased,
#: spaces to dashes: `compute_type`, main.rs:1815-1826@v3.3.4), with their f16 FLOP/s
#: (`ComputeType::f16_flop`) and the first release that knows the name (`impl From<&str> for
#: Gpu`: nine names in 3.0.0-3.0.1; A40, H100 NVL, "nvidia-h100", A100 40GB and A100 80GB PCIe
#: from 3.0.2; H200 from 3.1.0). A name it does not know logs "Unkown compute for card ..."
#: and gets the fallback. nvidia-smi calls the T4 "Tesla T4" and the 4090 "NVIDIA GeForce RTX
#: 4090", so their entries never match a real card.
TGI_CARD_FLOPS: dict[str, tuple[float, tuple[int, int, int]]] = {
    "nvidia-4090": (82e12, (3, 0, 0)), "nvidia-t4": (65e12, (3, 0, 0)), "nvidia-l4": (121e12, (3, 0, 0)),
    "nvidia-l40": (181e12, (3, 0, 0)), "nvidia-l40s": (363e12, (3, 0, 0)), "nvidia-a10g": (125e12, (3, 0, 0)),
    "nvidia-h100-80gb-hbm3": (900e12, (3, 0, 0)), "nvidia-a100-sxm4-80gb": (312e12, (3, 0, 0)),
    "nvidia-a100": (312e12, (3, 0, 0)),
    "nvidia-a40": (149e12, (3, 0, 2)), "nvidia-h100-nvl": (900e12, (3, 0, 2)), "nvidia-h100": (900e12, (3, 0, 2)),
    "nvidia-a100-sxm4-40gb": (312e12, (3, 0, 2)), "nvidia-a100-80gb-pcie": (312e12, (3, 0, 2)),
    "nvidia-h200": (989e12, (3, 1, 0)),
}
#: `vram_maximum`'s share of the cards' memory where TGI_WIGGLE_ROOM is not set: 0.95 in every
#: 3.x launcher (ComputeType::vram), whatever the shard's own default
TGI_LAUNCHER_WIGGLE = 0.95
#: from 3.3.0 a VLM is served with prefill chunking except these (models/__init__.py,
#: `support_chunking=False` for GEMMA3, MLLAMA, QWEN2_VL and QWEN2_5_VL@v3.3.0..v3.3.7);
#: 3.0-3.2 served every VLM without it (vlm_causal_lm.py:295@v3.0.0, "VLM do not work with
#: context chunking yet"). Without chunking TGI 3 sets an unset --max-total-tokens to the
#: warm-up's prefill tokens (`sum(batch.cache_lengths)`, flash_causal_lm.py:1576@v3.3.4), not
#: to what the KV cache holds; chunking is also off under speculation, on paged attention
#: (compute capability < 8.0, or ATTENTION=paged) and with PREFILL_CHUNKING=0 (models/model.py
#: :73-90@v3.3.4)
TGI_CHUNKED_VLMS_FROM = (3, 3, 0)
#: --speculate N, from 1.3.0 (launcher/src/main.rs:163@v1.3.0): each request's KV blocks hold
#: input + max_new_tokens - 1 + N tokens (flash_causal_lm.py:192@v1.3.0, :346@v3.3.4)
TGI_SPECULATE_FROM = (1, 3, 0)
#: FlashInfer's buffers a TGI shard holds from the model's start when its attention is
#: FlashInfer (the default from 3.0, the only backend with 1-token pages,
#: server/text_generation_server/models/globals.py): one shared 128 MiB float workspace
#: (layers/attention/flashinfer.py:27@v3.0.0, :42@v3.3.7) and the 8 MiB int workspace that each
#: of the three wrappers TGI makes at start-up, prefill, paged prefill and decode
#: (flash_causal_lm.py:1343-1351@v3.0.0, :1319-1327@v3.3.7), allocates in its constructor
#: (flashinfer python/flashinfer/prefill.py:600, :1268 and decode.py:328@v0.1.6, the release
#: TGI 3.0.0 installs, server/Makefile-flashinfer; the same 8 MiB in 0.2.2-0.2.8). All of it is
#: in use when the warm-up reads free memory, so the cache is that much smaller.
TGI_FLASHINFER_BUFFERS_BYTES = (128 + 3 * 8) * 1024 * 1024
#: TGI 2.1.0-2.4.0 count back into the cache the warm-up blocks of the batch that generate_token
#: returns (flash_causal_lm.py:1117@v2.2.0, read after :1101), which is None when every warm-up
#: request stopped after its first token (:349-353), as each does whose prompt is
#: max-total-tokens - 1 (the router asks for max_total - prompt new tokens,
#: router/client/src/v3/client.rs:174@v2.2.0): its blocks, allocated and in use when free memory
#: is read, are then not counted back. Before 2.1 the cache manager's blocks are counted back
#: (flash_causal_lm.py `cache_manager.num_blocks`@v2.0.4); from 2.4.1 the batch's blocks are read
#: before generate_token (batch_num_blocks, :1561@v3.0.0)
TGI_WARMUP_SURVIVORS_COUNTED = ((2, 1, 0), (2, 4, 1))
#: from this release on, no printed start-up holds the budget's KV figure within 10%: the three
#: there are print less (tests/data/calibration: TGI 2.2.0 on an A10G, TGI's own published L4
#: figure for 3.0, Gemma 3 on 3.3.4), so every budget of these releases says so
#: (`tgi_kv_optimistic`); 2.0.x has start-ups within 5% (Mistral 7B on 2.0.0)
TGI_KV_UNMATCHED_FROM = (2, 1, 0)
#: Gemma 3 with an image in the batch (the router's first warm-up request carries one,
#: backends/v3/src/client/grpc_client.rs:114-131@v3.2.0) builds a dense additive mask of
#: [batch, 1, T, T + 1] in the model's dtype for its global layers and one more for its
#: sliding-window layers (get_attention_mask, flash_gemma3_modeling.py:744-794@v3.2.0; the
#: local one :866-884@v3.3.4). From 3.2.0 to 3.2.x a masked prefill runs its attention through
#: torch's scaled_dot_product_attention with `enable_gqa` (:296-303@v3.2.0), and the torch these
#: images ship (2.6, Dockerfile PYTORCH_VERSION@v3.2.0) takes the math path for it, which works
#: in float32 and holds the [batch, heads, T, T + 1] scores and their softmax at once: #3105's
#: warm-up (32,000 tokens, 8 heads a shard) fails on "Tried to allocate 30.52 GiB", 8 x 32,000 x
#: 32,001 x 4 bytes. From 3.3.0 FlashInfer attention takes the masked prefill too
#: (flash_gemma3_modeling.py:252@v3.3.0, #3167); under paged attention (ATTENTION=paged, or a
#: card below compute capability 8.0) 3.3 still calls SDPA, on a torch whose choice of
#: kernel there has not been read (`tgi_gemma3_sdpa_unpriced`).
_V = tuple[int, int, int]

#: the HTTP status each engine answers a request longer than its limit with: TGI's validation
#: errors are 422 Unprocessable Entity (router/src/server.rs:1953@v2.2.0, :2409@v3.3.7,
#: `InferError::ValidationError(_) => StatusCode::UNPROCESSABLE_ENTITY`); vLLM and SGLang answer
#: their OpenAI-compatible 400 Bad Request
LENGTH_REFUSAL_STATUS = {"vllm": 400, "sglang": 400, "tgi": 422}

#: TGI's start-up checks between its batch limits, which stop the launcher or the router
#: before the model serves: (rule, first version, first version without it, sources). The
#: prefill rule does not hold from 3.0 where the shard prefills in chunks (the router's
#: `!support_chunking`); the prefill/batch-total rule checks the flag only before 2.4.0 (the
#: router checks the warm-up's own figure after).
TGI_LIMIT_RULES: tuple[tuple[str, _V, _V | None, str], ...] = (
    ("input_below_total", (0, 9, 2), None,
     "launcher/src/main.rs:1019@v0.9.4, :1364@v2.0.0, :2160@v3.3.7; backends/v3/src/main.rs:176-180@v3.2.1"),
    ("prefill_covers_input", (0, 9, 0), None,
     "router/src/main.rs:102@v0.9.0; launcher/src/main.rs:1510-1515@v2.2.0; backends/v3/src/main.rs:164@v2.4.0, "
     ":182-184@v3.2.1"),
    ("prefill_within_batch_total", (0, 9, 0), (2, 4, 0),
     "router/src/main.rs:105@v0.9.0; launcher/src/main.rs:1560-1566@v2.2.0"),
    ("total_within_batch_total", (0, 9, 0), None,
     "router/src/main.rs:108@v0.9.0; launcher/src/main.rs:1567-1572@v2.2.0, :2203@v3.3.7"),
)


#: the ServerConfig fields each rule ties
TGI_LIMIT_FIELDS: dict[str, frozenset[str]] = {
    "input_below_total": frozenset({"max_input_tokens", "max_model_len"}),
    "prefill_covers_input": frozenset({"max_batch_prefill_tokens", "max_input_tokens"}),
    "prefill_within_batch_total": frozenset({"max_batch_prefill_tokens", "max_batch_total_tokens"}),
    "total_within_batch_total": frozenset({"max_model_len", "max_batch_total_tokens"}),
}


def tgi_limit_conflicts(version: _V | None, max_input: int | None, max_total: int | None,
                        prefill: int | None, batch_total: int | None, chunking: bool | None) -> tuple[str, ...]:
    """The TGI_LIMIT_RULES these limits break (a limit left unset is TGI's default, which
    passes). A version not known is held to every rule, and chunking not known counts as off:
    a refusal is said where TGI might start, never the other way round.

    >>> tgi_limit_conflicts((3, 2, 1), 30000, 19456, None, None, None)
    ('input_below_total',)
    >>> tgi_limit_conflicts((2, 2, 0), 30000, 32000, 15500, None, None)
    ('prefill_covers_input',)
    >>> tgi_limit_conflicts((3, 3, 4), 30000, 32000, 15500, None, True), tgi_limit_conflicts(None, 30000, 32000, 15500, None, True)
    ((), ())
    """
    broken = {
        "input_below_total": max_input is not None and max_total is not None and max_input >= max_total,
        "prefill_covers_input": prefill is not None and max_input is not None and prefill < max_input
        and not (chunking is True and (version is None or version >= (3, 0, 0))),
        "prefill_within_batch_total": prefill is not None and batch_total is not None and prefill > batch_total,
        "total_within_batch_total": max_total is not None and batch_total is not None and max_total > batch_total,
    }
    return tuple(rule for rule, since, until, _ in TGI_LIMIT_RULES
                 if broken[rule] and (version is None or (version >= since and (until is None or version < until))))


#: vLLM's scheduler checks between its batch limits, which stop the engine before it serves
#: ("must be greater than or equal to max_num_seqs", "is smaller than max_model_len"):
#: SchedulerConfig `_verify_args` in vllm/config.py of a 0.2 release (the second check then
#: unconditional) and `verify_max_model_len` in vllm/config/scheduler.py of the 0.11 series
#: (the second only without chunked prefill), read in the code index; the releases between and
#: after are held to them as well. Rule -> the ServerConfig fields it ties.
VLLM_LIMIT_FIELDS: dict[str, frozenset[str]] = {
    "batched_covers_seqs": frozenset({"max_num_batched_tokens", "max_num_seqs"}),
    "batched_covers_length": frozenset({"max_num_batched_tokens", "max_model_len"}),
}


def vllm_limit_conflicts(max_model_len: int | None, max_num_seqs: int | None, max_num_batched_tokens: int | None,
                         chunked_prefill: bool | None) -> tuple[str, ...]:
    """The VLLM_LIMIT_FIELDS rules these limits break; a limit not set is vLLM's own default,
    which passes, and the length rule holds only where chunked prefill is off by the launch.

    >>> vllm_limit_conflicts(8192, 512, 256, None), vllm_limit_conflicts(32768, 64, 8192, False)
    (('batched_covers_seqs',), ('batched_covers_length',))
    >>> vllm_limit_conflicts(32768, 64, 8192, None)
    ()
    """
    broken = {
        "batched_covers_seqs": max_num_batched_tokens is not None and max_num_seqs is not None
        and max_num_batched_tokens < max_num_seqs,
        "batched_covers_length": chunked_prefill is False and max_num_batched_tokens is not None
        and max_model_len is not None and max_num_batched_tokens < max_model_len,
    }
    return tuple(rule for rule in VLLM_LIMIT_FIELDS if broken[rule])


TGI_GEMMA3_VLM = "Gemma3ForConditionalGeneration"
TGI_GEMMA3_MASKS_FROM = (3, 2, 0)
TGI_GEMMA3_SDPA_MATH = ((3, 2, 0), (3, 3, 0))
TGI_UNCHUNKED_VLMS = ("Gemma3ForConditionalGeneration", "MllamaForConditionalGeneration",
                      "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration")


@dataclass(frozen=True)
class TgiLauncherConfig:
    """What TGI's launcher reads of config.json to size the prefill batch (its `Config`)."""

    num_heads: int | None
    num_kv_heads: int | None
    head_dim: int | None
    hidden_size: int | None
    intermediate_size: int | None
    num_layers: int | None
    vocab_size: int | None
    max_position_embeddings: int | None
    #: `num_experts_per_tok` (1 when absent), `n_shared_experts` (0), `num_local_experts` (1)
    experts_per_token: int = 1
    shared_experts: int = 0
    local_experts: int = 1
    #: a vision_config: the launcher computes no FLOPs for a VLM
    vision: bool = False
    model_type: str | None = None
    #: a quantization_config: the launcher estimates no memory for a quantized checkpoint
    quantized: bool = False

    def flop(self) -> int | None:
        """FLOPs a token (main.rs `Config::flop`)."""
        need = (self.num_heads, self.num_kv_heads, self.head_dim, self.hidden_size, self.intermediate_size,
                self.num_layers)
        if self.vision or any(v is None for v in need):
            return None
        heads, kv, hd, hidden, inter, layers = need  # type: ignore[misc]
        inter = inter * (self.experts_per_token + self.shared_experts)
        attn = 2 * heads * hd * hidden * 3 + 2 * kv * hd * hidden * 2  # q, attention, o; k, v
        return (attn + 2 * 3 * hidden * inter) * layers

    def model_vram(self) -> int | None:
        """Bytes of weights as the launcher estimates them (`Config::model_vram`, which counts the
        q/k/v projection without its hidden dimension)."""
        need = (self.num_heads, self.num_kv_heads, self.head_dim, self.hidden_size, self.intermediate_size,
                self.num_layers, self.vocab_size)
        if self.quantized or any(v is None for v in need):
            return None
        heads, kv, hd, hidden, inter, layers, vocab = need  # type: ignore[misc]
        layer = 3 * inter * self.local_experts * hidden + (heads + 2 * kv) * hd + heads * hd * hidden
        return (layer * layers + 2 * hidden * vocab) * 2

    def token_vram(self) -> int | None:
        """Bytes a token (`Config::token_vram`: fp16 KV plus an MLP intermediate)."""
        if self.quantized or None in (self.num_kv_heads, self.head_dim, self.num_layers, self.intermediate_size):
            return None
        kv = self.num_kv_heads * 2 * self.head_dim * 2 * self.num_layers  # type: ignore[operator]
        inter = self.intermediate_size  # type: ignore[assignment]
        return kv + (inter + inter // 2) * self.local_experts * 2 * 3


def _f32(x: float) -> float:
    """`x` rounded to the nearest f32, as Rust's `as f32` and f32 products round."""
    return struct.unpack("f", struct.pack("f", x))[0]


def tgi_card(gpu_name: str | None) -> str | None:
    """The card name TGI's launcher makes of nvidia-smi's `gpu_name`, where `gpu_name` is one.

    >>> tgi_card("NVIDIA H100 80GB HBM3"), tgi_card("Tesla T4"), tgi_card("H100")
    ('nvidia-h100-80gb-hbm3', 'tesla-t4', None)
    """
    name = (gpu_name or "").strip()
    if not re.match(r"(NVIDIA|Tesla|Quadro)\b", name):
        return None
    return name.replace(" ", "-").lower()


def tgi_default_prefill(version: tuple[int, int, int], config: TgiLauncherConfig, card: str | None,
                        shards: int, vram_mib: float | None, fraction: float,
                        wiggle: float | None = None) -> tuple[int, str, dict[str, Any]]:
    """TGI 3's default --max-batch-prefill-tokens, with the reason id and its figures.

    `card` is the launcher's card name (`tgi_card`), `vram_mib` nvidia-smi's memory.total of
    one card, `fraction` --cuda-memory-fraction, `wiggle` TGI_WIGGLE_ROOM where the container
    sets it. The launcher takes the cards' f16 FLOP/s over the model's FLOPs a token when that
    exceeds 100, else the fallback; then at most max_position_embeddings, and at most the
    tokens the memory left after its weight estimate holds at its bytes a token.

    >>> cfg = TgiLauncherConfig(32, 8, 128, 4096, 14336, 32, 128256, 131072)
    >>> tgi_default_prefill((3, 3, 4), cfg, "nvidia-h100-80gb-hbm3", 1, 81559, 1.0)[0]
    59870
    >>> tgi_default_prefill((3, 3, 4), cfg, "nvidia-rtx-a6000", 1, 49140, 1.0)[:2]
    (4096, 'tgi_prefill_unknown_card')
    """
    fallback = TGI_PREFILL_FALLBACK
    if version >= TGI_VLM_PREFILL_FROM:
        fallback = TGI_VLM_PREFILL.get(config.model_type or "", fallback)
    known = TGI_CARD_FLOPS.get(card or "")
    flop = config.flop()
    value, why, params = fallback, "tgi_prefill_fallback", {"card": card or ""}
    if card is None:  # gpumem does not know the card's name, so not whether TGI knows it
        why, params = "tgi_prefill_card_unnamed", {}
    elif known is None or version < known[1]:
        why = "tgi_prefill_unknown_card"
    elif flop is None:
        why = "tgi_prefill_vlm" if config.vision else "tgi_prefill_no_flops"
    else:
        optimal = int(known[0] * shards // flop)
        if optimal > 100:
            value, why = optimal, "tgi_prefill_compute"
            params.update(card_tflops=round(known[0] * shards / 1e12), model_gflop=round(flop / 1e9, 2))
    if config.max_position_embeddings:
        value = min(value, config.max_position_embeddings)
    # the memory cap reads nvidia-smi's memory.total whatever the card's name
    model, per_token = config.model_vram(), config.token_vram()
    if vram_mib and model is not None and per_token:
        share = TGI_LAUNCHER_WIGGLE if wiggle is None else wiggle
        # Rust's f32 arithmetic: `((total as f32) * memory_fraction * wiggle_room) as usize`
        available = int(_f32(_f32(_f32(int(vram_mib) * 2**20 * shards) * _f32(fraction)) * _f32(share)))
        if available > model:
            allowed = (available - model) // per_token
            if allowed < value:
                value, why = allowed, "tgi_prefill_vram"
                params.update(available_gib=round(available / 2**30, 2), weights_gib=round(model / 2**30, 2))
    return int(value), why, params


def tgi_regime(version: tuple[int, int, int]) -> str:
    """TGI's warm-up semantics: "tgi-0" (a fixed --max-batch-total-tokens allocated up front),
    "tgi-1" (budget inferred, warm-up requests of input + 2 tokens), "tgi-2" (warm-up
    requests of max-total-tokens, 4096-token default cap), "tgi-3" (defaults from the model's
    length, capped by the KV cache the warm-up leaves)."""
    if version < TGI_INFERS_TOTAL_TOKENS_FROM:
        return "tgi-0"
    if version < (2, 0, 0):
        return "tgi-1"
    return "tgi-2" if version < (3, 0, 0) else "tgi-3"


def tgi_wiggle_room(version: tuple[int, int, int]) -> float:
    room = 1.0
    for since, value in TGI_WIGGLE_ROOM_BY_VERSION:
        if version >= since:
            room = value
    return room


def tgi_limits(version: tuple[int, int, int], max_position: int | None, max_input: int | None,
               max_total: int | None, max_prefill: int | None) -> tuple[int, int | None, int, list[tuple[str, int, str]]]:
    """(max_input_tokens, max_total_tokens, max_batch_prefill_tokens, assumptions as (name,
    value, reason id)).

    TGI 0.9-1.x defaults to 1024 input / 2048 total tokens and a 4096-token prefill batch;
    TGI 2.x takes the model's length capped at 4096 total tokens (prefill = input + 50);
    TGI 3 takes the model's length and the launcher's prefill batch (`tgi_default_prefill`,
    which the caller passes; 4096 here without one). max_total_tokens is None where TGI 3 sets
    it after warm-up (the KV cache it leaves at most the model's length, or without prefill
    chunking the warm-up's tokens).
    """
    notes: list[tuple[str, int, str]] = []
    model_max = max_position or 4096
    regime = tgi_regime(version)
    total: int | None
    if regime in ("tgi-0", "tgi-1"):
        total = max_total or 2048
        inp = max_input or min(1024, total - 1)
        prefill = max_prefill or 4096
        why = "tgi_1_default"
    elif regime == "tgi-2":
        total = max_total or min(model_max, 4096)
        inp = max_input or min(model_max - 1, total - 1)
        prefill = max_prefill or inp + 50
        why = "tgi_2_default"
    else:
        total = max_total
        inp = max_input or (total - 1 if total else model_max - 1)
        prefill = max_prefill or min(TGI_PREFILL_FALLBACK, model_max)
        why = "tgi_3_default"
    if max_total is None and total is not None:
        notes.append(("max_total_tokens", total, why))
    if max_input is None:
        notes.append(("max_input_tokens", inp, why))
    if max_prefill is None:
        notes.append(("max_batch_prefill_tokens", prefill, why))
    return inp, total, prefill, notes
