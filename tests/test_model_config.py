"""Reading a Hugging Face config.json into a ModelSpec."""

from __future__ import annotations

import contextlib
import json
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.parsers.model_config import load_model_config, parse_model_config
from runbooks.catalogs.models import find_model
from runbooks.model.evidence import ModelSpec
from runbooks.sizing.kv import kv_bytes_per_token
from tests.support import words

DATA = Path(__file__).parent / "data" / "model_configs"

# config file -> catalog model with the same architecture
SAME_AS_CATALOG = {
    "qwen2.5-7b-instruct.json": "Qwen/Qwen2.5-7B-Instruct",
    "llama-3.1-8b-instruct.json": "meta-llama/Llama-3.1-8B-Instruct",
    "gemma-3-27b-it.json": "google/gemma-3-27b-it",
    "gemma-2-9b-it.json": "google/gemma-2-9b-it",
    "deepseek-v3.json": "deepseek-ai/DeepSeek-V3",
    "gpt-oss-20b.json": "openai/gpt-oss-20b",
    "mixtral-8x7b-instruct.json": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "qwen3-30b-a3b.json": "Qwen/Qwen3-30B-A3B",
    "mistral-7b-v0.1.json": "mistralai/Mistral-7B-v0.1",
    "phi-1_5.json": "microsoft/phi-1_5",
    "qwen2.5-vl-7b-instruct.json": "Qwen/Qwen2.5-VL-7B-Instruct",
    "llama-3.1-70b-w8a8.json": "neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8",
    "qwen2.5-7b-instruct-awq.json": "Qwen/Qwen2.5-7B-Instruct-AWQ",
}
_COMPARED = [f.name for f in fields(ModelSpec) if f.name not in ("name", "source", "num_params", "active_params")]


def parse_file(name: str) -> ModelSpec:
    return load_model_config(DATA / name)


@pytest.mark.parametrize(("config", "catalog"), sorted(SAME_AS_CATALOG.items()))
def test_recorded_configs_parse_to_the_catalog_architecture(config, catalog):
    parsed, known = parse_file(config), find_model(catalog)
    assert {k: getattr(parsed, k) for k in _COMPARED} == {k: getattr(known, k) for k in _COMPARED}
    assert parsed.num_params == pytest.approx(known.num_params, rel=0.01)
    assert parsed.source == config


def test_qwen25_7b_reads_gqa_and_skips_the_unused_window():
    spec = parse_file("qwen2.5-7b-instruct.json")
    assert (spec.num_kv_heads, spec.head_dim, spec.sliding_window) == (4, 128, None)
    assert kv_bytes_per_token(spec) == 57344


def test_gemma3_reads_the_nested_text_config_and_counts_the_vision_tower():
    spec = parse_file("gemma-3-27b-it.json")
    assert (spec.num_layers, spec.hidden_size, spec.head_dim) == (62, 5376, 128)
    assert (spec.sliding_window, spec.full_attention_layers) == (1024, 10)
    assert spec.architecture == "Gemma3ForConditionalGeneration"
    assert spec.tie_word_embeddings is True
    assert spec.num_params == pytest.approx(27.43e9, rel=0.01)


def test_deepseek_v3_reads_mla_shared_experts_and_fp8():
    spec = parse_file("deepseek-v3.json")
    assert spec.is_mla and (spec.kv_lora_rank, spec.qk_rope_head_dim, spec.q_lora_rank) == (512, 64, 1536)
    assert (spec.quantization, spec.quant_bits) == ("fp8", 8)
    assert spec.num_params == pytest.approx(671e9, rel=0.005)
    assert spec.active_params == pytest.approx(37.5e9, rel=0.02)
    assert spec.max_position_embeddings == 163840
    assert kv_bytes_per_token(spec, tp=8) == 70272


def test_gpt_oss_counts_full_layers_from_layer_types_and_reads_mxfp4():
    spec = parse_file("gpt-oss-20b.json")
    assert (spec.sliding_window, spec.full_attention_layers) == (128, 12)
    assert (spec.quantization, spec.quant_bits) == ("mxfp4", 4)
    assert (spec.num_experts, spec.experts_per_token, spec.moe_intermediate_size) == (32, 4, 2880)


def test_awq_quantization_config_sets_method_bits_and_dtype():
    spec = parse_file("qwen2.5-7b-instruct-awq.json")
    assert (spec.quantization, spec.quant_bits, spec.native_dtype) == ("awq", 4, "float16")


def test_compressed_tensors_int8_is_w8a8():
    assert parse_file("llama-3.1-70b-w8a8.json").quantization == "int8"


def test_yarn_rope_scaling_extends_the_context_like_vllm():
    base = json.loads((DATA / "qwen2.5-7b-instruct.json").read_text())
    base["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert parse_model_config(json.dumps(base)).max_position_embeddings == 131072


def test_mha_model_without_kv_heads_uses_all_heads():
    spec = parse_file("phi-1_5.json")
    assert spec.num_kv_heads == 32 and spec.head_dim == 64
    assert spec.name == "microsoft/phi-1_5"


def test_name_argument_wins_and_source_names_the_file():
    spec = parse_model_config('{"num_hidden_layers": 2, "hidden_size": 64}', source="x/config.json", name="mine")
    assert (spec.name, spec.source) == ("mine", "x/config.json")


def test_invalid_json_raises_parse_error_with_line():
    with pytest.raises(ParseError) as err:
        parse_model_config('{\n  "num_hidden_layers": 2,\n  "hidden_size": }', source="config.json")
    assert err.value.source == "config.json" and err.value.line == 3
    assert "not JSON" in words.message(err.value)


@pytest.mark.parametrize(("text", "key"), [
    ('{"num_hidden_layers": "32", "hidden_size": 4096}', "num_hidden_layers"),
    ('{"num_hidden_layers": 32, "hidden_size": 4096.5}', "hidden_size"),
    ('{"num_hidden_layers": 32, "hidden_size": true}', "hidden_size"),
    ('{"num_hidden_layers": -1, "hidden_size": 4096}', "num_hidden_layers"),
    ('{"num_hidden_layers": 32, "hidden_size": 4096, "text_config": []}', "text_config"),
    ('{"num_hidden_layers": 32, "hidden_size": 4096, "quantization_config": "awq"}', "quantization_config"),
    ('{"num_hidden_layers": 32, "hidden_size": 4096, "quantization_config": {"bits": "four"}}',
     "quantization_config.bits"),
    ('{"num_hidden_layers": 32, "hidden_size": 4096, "layer_types": [1, 2], "sliding_window": 4}', "layer_types"),
    ('{"num_hidden_layers": 32, "hidden_size": 4096, "vision_config": {"depth": "x", "hidden_size": 8}}',
     "vision_config.depth"),
    ('{"num_hidden_layers": 32, "hidden_size": 1e300}', "hidden_size"),
    ('{"hidden_size": 4096}', "num_hidden_layers"),
    ('[1, 2]', "top level"),
])
def test_wrong_shapes_raise_parse_error_naming_the_key(text, key):
    with pytest.raises(ParseError) as err:
        parse_model_config(text)
    assert key in words.message(err.value)


def test_unreadable_file_is_a_parse_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(ParseError) as err:
        load_model_config(path)
    assert err.value.source == "config.json"


_KEYS = ["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
         "vocab_size", "intermediate_size", "max_position_embeddings", "sliding_window", "use_sliding_window",
         "sliding_window_pattern", "layer_types", "kv_lora_rank", "qk_rope_head_dim", "q_lora_rank",
         "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
         "first_k_dense_replace", "mlp_only_layers", "tie_word_embeddings", "torch_dtype", "quantization_config",
         "quant_method", "bits", "text_config", "vision_config", "rope_scaling", "factor", "type",
         "original_max_position_embeddings", "architectures", "model_type", "config_groups", "weights", "num_bits",
         "depth", "multi_query", "_name_or_path", "load_in_8bit", "quant_algo"]
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 1 << 50), st.floats(allow_nan=True),
                     st.text(max_size=8), st.sampled_from(["gemma2", "mistral", "full_attention", "yarn", "awq",
                                                           "compressed-tensors", "bitsandbytes", "float"]))
_JSON = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.sampled_from(_KEYS), inner, max_size=6)),
                     max_leaves=25)
_CONFIGS = st.fixed_dictionaries({"num_hidden_layers": st.integers(1, 200), "hidden_size": st.integers(1, 1 << 16)},
                                 optional={k: _JSON for k in _KEYS if k not in ("num_hidden_layers", "hidden_size")})


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_any_text_gives_a_spec_or_parse_error(text):
    with contextlib.suppress(ParseError):
        assert isinstance(parse_model_config(text), ModelSpec)


@settings(max_examples=200, deadline=None)
@given(_CONFIGS)
def test_fuzz_config_shaped_json_gives_a_spec_or_parse_error(config):
    try:
        spec = parse_model_config(json.dumps(config))
    except ParseError:
        return
    assert isinstance(spec, ModelSpec)
    assert spec.num_params is not None and spec.num_params >= 0


@settings(max_examples=200, deadline=None)
@given(_JSON)
def test_fuzz_arbitrary_json_gives_a_spec_or_parse_error(value):
    with contextlib.suppress(ParseError):
        assert isinstance(parse_model_config(json.dumps(value)), ModelSpec)
