"""KV bytes per token and per request, as vLLM, SGLang and TGI lay out the cache."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runbooks.catalogs.models import find_model
from runbooks.sizing.budget import kv_bytes_per_token
from runbooks.sizing.kv import dtype_bytes, kv_heads_per_rank, request_kv_bytes, serving_dtype, window_layers


def test_qwen25_7b_bf16_stores_57344_bytes_per_token_on_one_gpu():
    # 28 layers x 2 (K,V) x 4 KV heads x 128 x 2 bytes
    assert kv_bytes_per_token(find_model("Qwen/Qwen2.5-7B-Instruct"), tp=1) == 57344


def test_llama31_8b_bf16_stores_131072_bytes_per_token():
    assert kv_bytes_per_token(find_model("meta-llama/Llama-3.1-8B-Instruct")) == 131072


def test_kv_heads_split_by_tp_until_one_head_per_gpu():
    model = find_model("meta-llama/Llama-3.1-8B-Instruct")  # 8 KV heads
    assert kv_bytes_per_token(model, tp=2) == 65536
    assert kv_bytes_per_token(model, tp=8) == 16384


def test_four_kv_head_model_replicates_heads_at_tp8():
    model = find_model("Qwen/Qwen2.5-7B-Instruct")
    assert kv_heads_per_rank(model, 8) == 1
    # TP4 and TP8 both keep one head per GPU: replication, not a further split
    assert kv_bytes_per_token(model, tp=8) == kv_bytes_per_token(model, tp=4) == 14336


def test_mla_deepseek_v3_stores_one_576_value_latent_per_layer():
    model = find_model("deepseek-ai/DeepSeek-V3")
    assert kv_bytes_per_token(model, tp=1) == 61 * 576 * 2 == 70272


def test_mla_latent_is_not_divided_by_tp():
    model = find_model("deepseek-ai/DeepSeek-R1")
    assert kv_bytes_per_token(model, tp=8) == kv_bytes_per_token(model, tp=1) == 70272


@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_fp8_kv_cache_halves_bytes_per_token(kv_dtype):
    model = find_model("Qwen/Qwen2.5-7B-Instruct")
    assert kv_bytes_per_token(model, 1, kv_dtype) == 57344 // 2
    assert kv_bytes_per_token(find_model("deepseek-ai/DeepSeek-V3"), 8, kv_dtype) == 70272 // 2


def test_auto_kv_dtype_follows_the_serving_dtype():
    model = find_model("Qwen/Qwen2.5-7B-Instruct")
    assert kv_bytes_per_token(model, 1, "auto", "float32") == 57344 * 2
    assert kv_bytes_per_token(model, 1, "auto", "float16") == 57344


def test_float32_checkpoints_are_served_in_16_bits():
    gemma2 = find_model("google/gemma-2-9b-it")
    assert gemma2.native_dtype == "float32"
    assert serving_dtype(gemma2, None) == "float16"
    assert serving_dtype(gemma2, "bfloat16") == "bfloat16"


def test_dtype_bytes_defaults_to_two_for_unknown_names():
    assert dtype_bytes("int8") == 1.0
    assert dtype_bytes("torch.float32") == 4.0
    assert dtype_bytes("mystery") == 2.0


def test_gemma3_has_one_full_attention_layer_in_six():
    assert window_layers(find_model("google/gemma-3-27b-it")) == (10, 52)
    assert window_layers(find_model("Qwen/Qwen2.5-7B-Instruct")) == (28, 0)


def test_sliding_window_layers_hold_only_the_window_when_exploited():
    model = find_model("google/gemma-3-27b-it")
    long_full = request_kv_bytes(model, 32768, exploit_window=False)
    long_windowed = request_kv_bytes(model, 32768, exploit_window=True)
    per_layer = kv_bytes_per_token(model) / model.num_layers
    # 10 full layers keep 32768 tokens; 52 windowed layers keep 1024 + one block
    assert long_windowed == pytest.approx(per_layer * (10 * 32768 + 52 * (1024 + 16)))
    assert long_windowed < long_full / 5


def test_short_requests_are_not_cut_by_the_window():
    model = find_model("openai/gpt-oss-20b")
    assert request_kv_bytes(model, 64, exploit_window=True) == request_kv_bytes(model, 64, exploit_window=False)


def test_request_bytes_round_up_to_whole_blocks():
    model = find_model("meta-llama/Llama-3.1-8B-Instruct")
    assert request_kv_bytes(model, 17, block_size=16) == 32 * 131072


def test_pipeline_stage_holds_its_share_of_layers():
    model = find_model("meta-llama/Llama-3.1-8B-Instruct")
    assert request_kv_bytes(model, 16, pp=2) == 16 * 131072 / 2
    odd = replace(model, num_layers=31)
    # 31 layers over 2 stages: the first holds 16
    assert request_kv_bytes(odd, 16, pp=2) == pytest.approx(16 * 131072 / 32 * 16)
