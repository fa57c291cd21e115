"""KV-cache bytes per token, per layer and per request, as the engines lay the cache out.

Per layer and token on one GPU: `2 (K,V) x max(1, kv_heads // tp) x head_dim x dtype bytes`;
MLA models keep one latent of `kv_lora_rank + qk_rope_head_dim` values instead, not divided
by TP. Sliding-window layers hold at most the window per request where an engine exploits
it (see `request_kv_bytes`).
"""

from __future__ import annotations

import math

from runbooks.model.evidence import ModelSpec

_DTYPE_BYTES = {
    "float32": 4.0, "fp32": 4.0, "float": 4.0,
    "bfloat16": 2.0, "bf16": 2.0,
    "float16": 2.0, "fp16": 2.0, "half": 2.0,
    "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8_inc": 1.0, "int8": 1.0,
    "float8_e4m3fn": 1.0, "float8_e5m2": 1.0,
}


def dtype_bytes(dtype: str | None, default: float = 2.0) -> float:
    """Bytes per element of a dtype name; `default` for None, "auto" or an unknown name.

    >>> dtype_bytes("bfloat16"), dtype_bytes("fp8"), dtype_bytes("auto")
    (2.0, 1.0, 2.0)
    """
    if not dtype:
        return default
    return _DTYPE_BYTES.get(dtype.strip().lower().replace("torch.", ""), default)


def serving_dtype(model: ModelSpec, dtype: str | None) -> str:
    """The activation dtype an engine runs: `dtype` unless None/"auto", else the checkpoint's.

    Engines serve float32 checkpoints in float16 under "auto", and quantized checkpoints in
    their 16-bit activation dtype.
    """
    if dtype and dtype.lower() != "auto":
        return dtype.lower()
    native = (model.native_dtype or "bfloat16").lower()
    if dtype_bytes(native) != 2.0:
        return "float16" if native in ("float32", "fp32", "float") else "bfloat16"
    return native


def kv_dtype_bytes(kv_cache_dtype: str | None, dtype: str | None) -> float:
    """KV element size: `kv_cache_dtype` unless "auto"/None, then the serving dtype."""
    if kv_cache_dtype and kv_cache_dtype.lower() != "auto":
        return dtype_bytes(kv_cache_dtype)
    return dtype_bytes(dtype)


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """KV heads one GPU keeps: heads are split by TP and replicated when TP exceeds them."""
    kv_heads = model.num_kv_heads or model.num_attention_heads or 1
    return max(1, kv_heads // max(1, tp))


def kv_bytes_per_layer_token(model: ModelSpec, tp: int, kv_cache_dtype: str | None, dtype: str | None) -> float:
    """Bytes one layer stores for one token on one GPU."""
    elem = kv_dtype_bytes(kv_cache_dtype, serving_dtype(model, dtype))
    if model.is_mla:
        return (model.kv_lora_rank or 0) * elem + (model.qk_rope_head_dim or 0) * elem
    head_dim = model.head_dim or _derived_head_dim(model)
    return 2 * kv_heads_per_rank(model, tp) * head_dim * elem


def kv_bytes_per_token(model: ModelSpec, tp: int = 1, kv_cache_dtype: str | None = None,
                       dtype: str | None = None) -> int:
    """KV bytes per token on one GPU, all layers, every layer treated as full attention.

    >>> from runbooks.catalogs.models import find_model
    >>> kv_bytes_per_token(find_model("Qwen/Qwen2.5-7B-Instruct"))
    57344
    """
    return int(round((model.num_layers or 0) * kv_bytes_per_layer_token(model, tp, kv_cache_dtype, dtype)))


def layers_per_stage(model: ModelSpec, pp: int) -> int:
    """Layers on the most loaded pipeline stage."""
    return math.ceil((model.num_layers or 0) / max(1, pp))


def window_layers(model: ModelSpec) -> tuple[int, int]:
    """(full-attention layers, sliding-window layers); all full when the model has no window."""
    layers = model.num_layers or 0
    if not model.sliding_window:
        return layers, 0
    full = model.full_attention_layers
    if full is None:
        return layers, 0
    full = max(0, min(layers, full))
    return full, layers - full


def request_kv_bytes(model: ModelSpec, length_tokens: int, *, tp: int = 1, pp: int = 1,
                     kv_cache_dtype: str | None = None, dtype: str | None = None,
                     block_size: int = 16, exploit_window: bool = False) -> float:
    """Bytes one request of `length_tokens` holds on one GPU, rounded up to whole blocks.

    With `exploit_window` (vLLM V1 hybrid allocator, SGLang SWA pools) sliding-window
    layers keep only the last `window` tokens (plus one block being filled).
    """
    per_layer = kv_bytes_per_layer_token(model, tp, kv_cache_dtype, dtype)
    block_size = max(1, block_size)
    blocks_full = math.ceil(max(0, length_tokens) / block_size)
    full, windowed = window_layers(model) if exploit_window else (model.num_layers or 0, 0)
    share = layers_per_stage(model, pp) / max(1, model.num_layers or 1)
    total = full * blocks_full * block_size * per_layer
    if windowed:
        window_blocks = min(blocks_full, math.ceil((model.sliding_window or 0) / block_size) + 1)
        total += windowed * window_blocks * block_size * per_layer
    return total * share


def _derived_head_dim(model: ModelSpec) -> int:
    if model.hidden_size and model.num_attention_heads:
        return model.hidden_size // model.num_attention_heads
    return 128
