"""Weight bytes per GPU after quantization and sharding, and parameter counts from the architecture."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runbooks.catalogs.models import find_model
from runbooks.model.units import GIB
from runbooks.sizing.budget import weights_bytes
from runbooks.sizing.weights import (
    allocator_slack_bytes,
    estimate_params,
    lora_bytes,
    param_breakdown,
    quantized_bytes_per_param,
)


def gib(value: float) -> float:
    return value / GIB


def test_qwen25_7b_bf16_weights_are_about_14_2_gib():
    assert gib(weights_bytes(find_model("Qwen/Qwen2.5-7B-Instruct"))) == pytest.approx(14.18, abs=0.05)


def test_llama31_8b_bf16_weights_match_vllm_log_without_rope_cache():
    # vLLM printed 14.9888 GiB, of which 32 MiB is the 131072-position rotary cache
    assert gib(weights_bytes(find_model("meta-llama/Llama-3.1-8B-Instruct"))) == pytest.approx(14.957, abs=0.005)


def test_tensor_parallel_splits_weights_evenly():
    model = find_model("Qwen/Qwen2.5-7B-Instruct")
    assert weights_bytes(model, tp=4) == pytest.approx(weights_bytes(model) / 4, rel=1e-3)


def test_awq_keeps_embeddings_in_16_bits_and_packs_layers_in_about_4_bits():
    model = find_model("Qwen/Qwen2.5-7B-Instruct-AWQ")
    parts = param_breakdown(model)
    embeddings = (parts.embed + parts.lm_head) * 2
    layers = (parts.attention + parts.mlp) * (4 + 20 / 128) / 8
    assert weights_bytes(model) == pytest.approx(embeddings + layers, rel=1e-3)
    assert gib(weights_bytes(model)) == pytest.approx(5.19, abs=0.05)


def test_gptq_phi4_matches_the_logged_8_51_gib():
    model = find_model("kaitchup/Phi-4-AutoRound-GPTQ-4bit")
    assert (model.quantization, model.quant_bits) == ("gptq", 4)
    assert gib(weights_bytes(model)) == pytest.approx(8.51, abs=0.03)


def test_fp8_weights_take_one_byte_except_embeddings():
    base = find_model("meta-llama/Llama-3.1-8B-Instruct")
    fp8 = weights_bytes(base, quantization="fp8")
    parts = param_breakdown(base)
    assert fp8 == pytest.approx((parts.embed + parts.lm_head) * 2 + parts.attention + parts.mlp, rel=1e-3)


def test_int8_w8a8_halves_linear_layers():
    model = find_model("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8")
    assert model.quantization == "int8"
    assert gib(weights_bytes(model, tp=2)) == pytest.approx(gib(weights_bytes(find_model("meta-llama/Llama-3.1-70B-Instruct"),
                                                                             tp=2)) * 0.5, rel=0.03)


def test_bitsandbytes_4bit_uses_4_5_bits_per_weight():
    # vLLM keeps one fp32 absmax per 64 weights (double-quantized absmax dequantized at load)
    assert quantized_bytes_per_param("bitsandbytes", 4) * 8 == pytest.approx(4.5)
    assert quantized_bytes_per_param("bitsandbytes", 8) == 1.0


def test_mxfp4_quantizes_only_gpt_oss_experts():
    model = find_model("openai/gpt-oss-20b")
    parts = param_breakdown(model)
    expected = parts.experts * 4.25 / 8 + (parts.total - parts.experts - parts.router) * 2 + parts.router * 2
    assert weights_bytes(model) == pytest.approx(expected, rel=2e-3)
    assert 12 < gib(weights_bytes(model)) < 14


def test_moe_experts_are_sharded_by_tp():
    model = find_model("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")
    # printed 27.72 GiB per GPU with the experts spread over 8 GPUs
    assert gib(weights_bytes(model, tp=8)) == pytest.approx(27.72, rel=0.03)


def test_mla_compressed_kv_projection_is_replicated_on_every_rank():
    model = find_model("deepseek-ai/DeepSeek-V2-Lite")
    parts = param_breakdown(model)
    assert parts.replicated == model.num_layers * model.hidden_size * (512 + 64)
    per_rank = weights_bytes(model, tp=8)
    assert per_rank > weights_bytes(model) / 8


def test_pipeline_parallel_splits_layers_and_places_embeddings_at_the_ends():
    model = find_model("meta-llama/Llama-3.1-70B-Instruct")
    one = weights_bytes(model)
    two = weights_bytes(model, pp=2)
    parts = param_breakdown(model)
    layers = (parts.total - parts.embed - parts.lm_head) * 2
    assert two == pytest.approx(layers / 2 + parts.embed * 2, rel=1e-3)
    assert two < one


def test_estimate_params_matches_published_totals_for_dense_models():
    for name, published in (("meta-llama/Llama-3.1-8B-Instruct", 8.03e9), ("Qwen/Qwen2.5-72B-Instruct", 72.7e9),
                            ("microsoft/phi-4", 14.66e9), ("google/gemma-2-9b-it", 9.24e9)):
        assert estimate_params(find_model(name)).total == pytest.approx(published, rel=0.01)


def test_estimate_params_counts_deepseek_shared_experts_and_dense_layers():
    v3 = find_model("deepseek-ai/DeepSeek-V3")
    total = estimate_params(v3, shared_experts=1, first_dense_layers=3, qk_nope_head_dim=128, v_head_dim=128).total
    assert total == pytest.approx(671e9, rel=0.005)


def test_stated_parameter_count_wins_over_the_estimate():
    model = find_model("Qwen/Qwen2.5-VL-7B-Instruct")
    parts = param_breakdown(model)
    assert parts.total == pytest.approx(model.num_params)
    assert parts.other == pytest.approx(0.67e9, rel=0.02)  # the vision tower


def test_model_without_stated_count_uses_the_estimate():
    model = replace(find_model("Qwen/Qwen2.5-7B-Instruct"), num_params=None)
    assert param_breakdown(model).total == pytest.approx(7.6e9, rel=0.01)


def test_allocator_rounds_large_tensors_to_2_mib():
    # Llama 3.1 8B tensors are exact multiples of 2 MiB; QwQ-32B at TP4 leaves ~0.22 GiB of slack
    assert allocator_slack_bytes(find_model("meta-llama/Llama-3.1-8B-Instruct")) == 0
    assert gib(allocator_slack_bytes(find_model("Qwen/QwQ-32B"), tp=4)) == pytest.approx(0.22, abs=0.02)


def test_lora_slots_grow_with_rank():
    model = find_model("Qwen/Qwen2.5-7B-Instruct")
    assert lora_bytes(model, 0) == 0
    assert lora_bytes(model, 64) == pytest.approx(2 * lora_bytes(model, 32), rel=0.02)
