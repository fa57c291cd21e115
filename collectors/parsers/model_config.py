"""Read a Hugging Face config.json into a ModelSpec.

Handles the shapes seen across Llama, Qwen 2/2.5/3 (dense and MoE), Mistral/Mixtral, Gemma 2
and 3 (`text_config` nesting), Phi, DeepSeek V2/V3 (MLA, shared experts), gpt-oss
(`layer_types`, MXFP4) and multimodal wrappers. The parameter count is estimated from the
architecture (`runbooks.sizing.weights.estimate_params`) with the extra facts only the config has.

>>> spec = parse_model_config('{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}')
>>> spec.num_layers, spec.head_dim
(2, 16)
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from collectors.errors import ParseError, field, noun, os_error, quoted, said
from runbooks.model.evidence import ModelSpec
from runbooks.model.phrases import Phrase
from runbooks.sizing.weights import estimate_params

#: counts above this are not a model config (and would overflow float arithmetic)
_MAX_COUNT = 1 << 40
_NESTED = ("text_config", "llm_config", "language_config")
_ALL_WINDOW_TYPES = ("mistral", "mixtral", "starcoder2")


class _Config:
    """Typed lookups over the text config with the top level as fallback."""

    def __init__(self, top: dict[str, Any], text: dict[str, Any], source: str, prefix: str = ""):
        self.top, self.text, self.source, self.prefix = top, text, source, prefix

    def raw(self, *keys: str) -> tuple[str, Any]:
        for key in keys:
            for layer in (self.text, self.top):
                if key in layer and layer[key] is not None:
                    return key, layer[key]
        return keys[0], None

    def fail(self, key: str, message: Phrase) -> ParseError:
        return ParseError(self.source, field(f"{self.prefix}{key}", message))

    def integer(self, *keys: str, minimum: int = 1) -> int | None:
        key, value = self.raw(*keys)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, _expected("integer", value))
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")) or not value.is_integer():
                raise self.fail(key, _expected("integer", value))
            value = int(value)
        if value < minimum or value > _MAX_COUNT:
            raise self.fail(key, said("out_of_range", value=quoted(_show(value))))
        return value

    def number(self, *keys: str) -> float | None:
        key, value = self.raw(*keys)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise self.fail(key, _expected("number", value))
        if not 0 < value < _MAX_COUNT:
            raise self.fail(key, said("out_of_range", value=quoted(_show(value))))
        return float(value)

    def flag(self, *keys: str) -> bool | None:
        key, value = self.raw(*keys)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.fail(key, _expected("true_or_false", value))
        return value

    def string(self, *keys: str) -> str | None:
        key, value = self.raw(*keys)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, _expected("string", value))
        return value

    def obj(self, key: str) -> dict[str, Any] | None:
        _, value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(key, _expected("object", value))
        return value

    def items(self, key: str) -> list[Any] | None:
        _, value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.fail(key, _expected("list", value))
        return value


def parse_model_config(text: str, source: str = "config.json", name: str | None = None) -> ModelSpec:
    """The ModelSpec a config.json describes; ParseError(source, ...) for anything malformed."""
    top = _load(text, source)
    nested: dict[str, Any] = {}
    for key in _NESTED:
        value = top.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ParseError(source, field(key, _expected("object", value)))
        nested = value
        break
    cfg = _Config(top, nested, source)

    layers = cfg.integer("num_hidden_layers", "n_layer", "num_layers", "n_layers")
    hidden = cfg.integer("hidden_size", "n_embd", "d_model", "dim")
    if layers is None or hidden is None:
        missing = "num_hidden_layers" if layers is None else "hidden_size"
        raise ParseError(source, field(missing, said("missing_not_model")))
    heads = cfg.integer("num_attention_heads", "n_head", "num_heads", "n_heads")
    kv_heads = cfg.integer("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")
    if kv_heads is None and cfg.flag("multi_query"):
        kv_heads = 1
    kv_heads = kv_heads or heads
    kv_lora = cfg.integer("kv_lora_rank")
    rope_dim = cfg.integer("qk_rope_head_dim")
    nope = cfg.integer("qk_nope_head_dim")
    v_dim = cfg.integer("v_head_dim")
    head_dim = cfg.integer("head_dim")
    if kv_lora is not None:
        head_dim = v_dim or nope or head_dim
    if head_dim is None and heads:
        head_dim = hidden // heads or None

    model_type = (cfg.string("model_type") or "").lower()
    architectures = cfg.items("architectures")
    arch = architectures[0] if architectures and isinstance(architectures[0], str) else None
    if architectures and arch is None:
        raise ParseError(source, field("architectures", _expected("strings", architectures[0])))

    experts = cfg.integer("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    inter = cfg.integer("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim")
    if inter is None and not experts:
        inter = 4 * hidden
    tie = cfg.flag("tie_word_embeddings")
    if tie is None:
        tie = model_type.startswith("gemma")
    window, full_layers = _windows(cfg, model_type, layers)
    quant, bits = _quantization(cfg)

    spec = ModelSpec(
        name=name or _name(top, source), source=source, architecture=arch, num_layers=layers,
        hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        vocab_size=cfg.integer("vocab_size", "padded_vocab_size"), intermediate_size=inter,
        native_dtype=_dtype(cfg), max_position_embeddings=_max_positions(cfg), sliding_window=window,
        full_attention_layers=full_layers, kv_lora_rank=kv_lora, qk_rope_head_dim=rope_dim,
        num_experts=experts, experts_per_token=cfg.integer("num_experts_per_tok", "num_experts_per_token",
                                                       "moe_topk", "moe_k") if experts else None,
        moe_intermediate_size=(cfg.integer("moe_intermediate_size", "expert_intermediate_size") or inter)
        if experts else None,
        tie_word_embeddings=tie, quantization=quant, quant_bits=bits, q_lora_rank=cfg.integer("q_lora_rank"),
    )
    shared_experts, shared_inter, first_dense = _moe_extras(cfg, experts)
    parts = estimate_params(spec, shared_experts=shared_experts, shared_intermediate=shared_inter,
                            first_dense_layers=first_dense, qk_nope_head_dim=nope, v_head_dim=v_dim,
                            vision_params=_vision_params(top, source))
    total = parts.total
    active = total
    if experts and spec.experts_per_token:
        active = total - parts.experts * (1 - min(1.0, spec.experts_per_token / experts))
    return replace(spec, num_params=total, active_params=active)


def load_model_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read and parse a config.json file; ParseError for unreadable files too."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ParseError(file.name, os_error(e)) from e
    return parse_model_config(text, source=file.name, name=name)


def _load(text: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(source, said("not_json", detail=quoted(e.msg)), line=e.lineno) from e
    except (RecursionError, ValueError) as e:
        raise ParseError(source, said("not_json", detail=quoted(e))) from e
    if not isinstance(data, dict):
        raise ParseError(source, field(said("top_level"), _expected("object", data)))
    return data


def _windows(cfg: _Config, model_type: str, layers: int) -> tuple[int | None, int | None]:
    """(sliding window, full-attention layers) as the engines read them; (None, None) without windows."""
    window = cfg.integer("sliding_window")
    if window is None or cfg.flag("use_sliding_window") is False:
        return None, None
    layer_types = cfg.items("layer_types")
    if layer_types is not None:
        if not all(isinstance(t, str) for t in layer_types):
            raise cfg.fail("layer_types", said("expected", what=noun("list_of_strings")))
        full = sum(1 for t in layer_types if t == "full_attention")
        return (window, full) if full < len(layer_types) else (None, None)
    pattern = cfg.integer("sliding_window_pattern")
    if pattern is not None:
        return window, layers // pattern
    if model_type == "gemma2":
        return window, layers // 2
    if model_type in _ALL_WINDOW_TYPES:
        return window, 0
    return None, None


def _quantization(cfg: _Config) -> tuple[str | None, int | None]:
    qc = cfg.obj("quantization_config")
    if qc is None:
        return None, None
    sub = _Config(qc, {}, cfg.source, "quantization_config.")
    method = (sub.string("quant_method") or "").lower().replace("-", "_") or None
    bits = sub.integer("bits", "w_bit", "weight_bits", "num_bits")
    if method == "bitsandbytes":
        if sub.flag("load_in_8bit"):
            return "bitsandbytes", 8
        return "bitsandbytes", 4
    if method in ("fp8", "fbgemm_fp8"):
        return method, 8
    if method == "mxfp4":
        return "mxfp4", 4
    if method == "modelopt":
        algo = (sub.string("quant_algo") or "").lower()
        return ("nvfp4", 4) if "fp4" in algo else ("fp8", 8)
    if method == "compressed_tensors":
        return _compressed_tensors(sub)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto_round", "autoround", "marlin"):
        return method.replace("_marlin", "").replace("autoround", "auto_round"), bits or 4
    return method, bits


def _compressed_tensors(sub: _Config) -> tuple[str | None, int | None]:
    groups = sub.obj("config_groups") or {}
    for group in groups.values():
        if not isinstance(group, dict):
            raise sub.fail("config_groups", said("expected", what=noun("objects")))
        weights = group.get("weights")
        if not isinstance(weights, dict):
            continue
        bits = _Config(weights, {}, sub.source, "quantization_config.config_groups.weights.").integer("num_bits")
        kind = weights.get("type")
        if bits == 8 and kind == "float":
            return "fp8", 8
        if bits == 8:
            return "int8", 8
        return "compressed-tensors", bits
    return "compressed-tensors", None


def _moe_extras(cfg: _Config, experts: int | None) -> tuple[int, int | None, int]:
    if not experts:
        return 0, None, 0
    shared = cfg.integer("n_shared_experts", "num_shared_experts", minimum=0) or 0
    shared_inter = cfg.integer("shared_expert_intermediate_size")
    if shared_inter and not shared:
        shared = 1
    first_dense = cfg.integer("first_k_dense_replace", minimum=0) or 0
    dense_list = cfg.items("mlp_only_layers")
    if dense_list:
        first_dense = max(first_dense, len(dense_list))
    return shared, shared_inter, first_dense


def _max_positions(cfg: _Config) -> int | None:
    max_pos = cfg.integer("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
    scaling = cfg.obj("rope_scaling")
    if scaling:
        sub = _Config(scaling, {}, cfg.source, "rope_scaling.")
        kind = (sub.string("rope_type", "type") or "").lower()
        factor = sub.number("factor")
        original = sub.integer("original_max_position_embeddings")
        if kind == "yarn" and factor and original:
            max_pos = max(max_pos or 0, int(original * factor))
    return max_pos


def _dtype(cfg: _Config) -> str | None:
    value = cfg.string("torch_dtype", "dtype")
    return value.lower().replace("torch.", "") if value else None


def _vision_params(top: dict[str, Any], source: str) -> float:
    vision = top.get("vision_config")
    if vision is None:
        return 0.0
    if not isinstance(vision, dict):
        raise ParseError(source, field("vision_config", _expected("object", vision)))
    sub = _Config(vision, {}, source, "vision_config.")
    depth = sub.integer("depth", "num_hidden_layers", "num_layers")
    width = sub.integer("hidden_size", "embed_dim", "width")
    if not depth or not width:
        return 0.0
    inter = sub.integer("intermediate_size")
    if inter is None:
        ratio = sub.number("mlp_ratio") or 4.0
        inter = int(width * ratio)
    gated = (sub.string("hidden_act") or "").lower() == "silu"
    return float(depth * (4 * width * width + (3 if gated else 2) * width * inter))


def _name(top: dict[str, Any], source: str) -> str:
    value = top.get("_name_or_path")
    return value if isinstance(value, str) and value.strip() else source


def _expected(what: str, value: Any) -> Phrase:
    return said("expected_got", what=noun(what), got=quoted(_show(value)))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
