"""The model and GPU catalogs: coverage, exact architecture facts, and name resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runbooks.catalogs.gpus import GPUS, UnknownGpu, find_gpu, gpu_names
from runbooks.catalogs.models import UnknownModel, find_model, model_names, split_quantization
from runbooks.sizing.kv import kv_bytes_per_token

CALIBRATION = json.loads((Path(__file__).parent / "data" / "calibration" / "startup_cases.json").read_text())


# ------------------------------------------------------------------ models

def test_catalog_holds_at_least_30_models_with_complete_architecture():
    names = model_names()
    assert len(names) >= 30
    for name in names:
        spec = find_model(name)
        assert spec.num_layers and spec.hidden_size and spec.num_attention_heads and spec.num_kv_heads, name
        assert spec.head_dim and spec.vocab_size and spec.max_position_embeddings and spec.num_params, name
        assert spec.tie_word_embeddings is not None and spec.native_dtype, name


@pytest.mark.parametrize("name", [
    "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-405B-Instruct",
    "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", "meta-llama/Llama-3.3-70B-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B",
    "Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-32B-Instruct", "Qwen/Qwen2.5-72B-Instruct",
    "Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B", "Qwen/QwQ-32B", "deepseek-ai/DeepSeek-V2-Lite", "deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct",
    "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
    "mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/Mistral-Small-24B-Instruct-2501", "google/gemma-2-9b-it", "google/gemma-2-27b-it",
    "google/gemma-3-4b-it", "google/gemma-3-12b-it", "google/gemma-3-27b-it", "microsoft/Phi-3-mini-4k-instruct",
    "microsoft/Phi-3-medium-4k-instruct", "microsoft/phi-4", "openai/gpt-oss-20b", "openai/gpt-oss-120b",
])
def test_requested_models_resolve(name):
    assert find_model(name).num_layers


@pytest.mark.parametrize("case_model", sorted(CALIBRATION["models"]))
def test_catalog_agrees_with_every_model_the_calibration_file_describes(case_model):
    facts = CALIBRATION["models"][case_model]
    spec = find_model(case_model)
    assert spec.num_layers == facts["num_hidden_layers"]
    assert spec.num_attention_heads == facts["num_attention_heads"]
    assert spec.hidden_size == facts["hidden_size"]
    assert spec.vocab_size == facts["vocab_size"]
    assert kv_bytes_per_token(spec) == facts["derived_kv_bytes_per_token_16bit"]
    if facts.get("max_position_embeddings"):
        assert spec.max_position_embeddings == facts["max_position_embeddings"]
    if "params_b" in facts:
        assert spec.num_params / 1e9 == pytest.approx(facts["params_b"], rel=0.02)


@pytest.mark.parametrize(("name", "expected"), [
    ("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("llama3.1:8b", "meta-llama/Llama-3.1-8B-Instruct"),
    ("  LLAMA-3.1-8B  ", "meta-llama/Llama-3.1-8B-Instruct"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"),
    ("realtreetune/rho-1b-sft-GSM8K", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    ("gemma-3-27b", "google/gemma-3-27b-it"),
    ("phi-1.5", "microsoft/phi-1_5"),
])
def test_names_and_loose_spellings_resolve(name, expected):
    assert find_model(name).name == expected


@pytest.mark.parametrize(("name", "quant", "bits"), [
    ("Qwen2.5-7B-Instruct-AWQ", "awq", 4),
    ("Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4", "gptq", 4),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", "gptq", 8),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "fp8", 8),
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", "int8", 8),
    ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "fp8", 8),
    ("unsloth/meta-llama-3.1-8b-instruct-bnb-4bit", "bitsandbytes", 4),
    ("unsloth/qwen2.5-0.5b-instruct-unsloth-bnb-4bit", "bitsandbytes", 4),
    ("kaitchup/Phi-4-AutoRound-GPTQ-4bit", "gptq", 4),
    ("gaunernst/gemma-3-27b-it-int4-awq", "awq", 4),
])
def test_quantized_repos_map_to_the_base_with_quantization(name, quant, bits):
    spec = find_model(name)
    assert (spec.quantization, spec.quant_bits) == (quant, bits)
    assert spec.num_layers == find_model(split_quantization(name)[0]).num_layers


def test_awq_and_gptq_checkpoints_run_in_float16():
    assert find_model("Qwen2.5-7B-Instruct-AWQ").native_dtype == "float16"


def test_native_quantized_models_carry_their_format():
    assert (find_model("openai/gpt-oss-20b").quantization, find_model("deepseek-ai/DeepSeek-V3").quantization) == \
        ("mxfp4", "fp8")


def test_mla_and_moe_and_window_facts():
    v3 = find_model("deepseek-ai/DeepSeek-V3")
    assert (v3.kv_lora_rank, v3.qk_rope_head_dim, v3.q_lora_rank, v3.num_experts, v3.experts_per_token) == \
        (512, 64, 1536, 256, 8)
    assert find_model("deepseek-ai/DeepSeek-V2-Lite").q_lora_rank is None
    assert (find_model("google/gemma-2-9b-it").sliding_window, find_model("google/gemma-2-9b-it").full_attention_layers) \
        == (4096, 21)
    assert find_model("mistralai/Mistral-7B-v0.1").full_attention_layers == 0
    assert find_model("mistralai/Mistral-7B-Instruct-v0.3").sliding_window is None
    assert find_model("openai/gpt-oss-120b").full_attention_layers == 18


def test_unknown_model_names_the_nearest():
    with pytest.raises(UnknownModel) as err:
        find_model("qwen2.5-8b")
    assert isinstance(err.value, ValueError)
    assert err.value.name == "qwen2.5-8b"
    assert "Qwen/Qwen2.5-7B-Instruct" in err.value.nearest


def test_empty_name_is_unknown():
    with pytest.raises(UnknownModel):
        find_model("")


# -------------------------------------------------------------------- GPUs

@pytest.mark.parametrize(("name", "expected"), [
    ("a100-80g", "A100-SXM4-80GB"), ("A100 80GB", "A100-SXM4-80GB"), ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("NVIDIA A100 80GB PCIe", "A100-SXM4-80GB"), ("h100", "H100-SXM5-80GB"), ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
    ("NVIDIA A10G", "A10G"), ("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA RTX A6000", "RTX A6000"), ("NVIDIA H200", "H200"),
    ("NVIDIA H20", "H20"), ("NVIDIA B200", "B200"), ("AMD Instinct MI300X", "MI300X"),
    ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"), ("A100 40GB", "A100-SXM4-40GB"),
])
def test_gpu_aliases_resolve(name, expected):
    assert find_gpu(name).name == expected


def test_gpu_totals_match_the_calibration_logs():
    logged = {"RTX 3090": 23.58, "T4": 14.56, "A100-SXM4-40GB": 39.39, "A100-PCIE-40GB": 39.5, "L40S": 44.42,
              "H200": 139.8}
    for name, total in logged.items():
        assert find_gpu(name).total_gib == total
    assert find_gpu("A100 80GB").total_gib == 79.15
    assert find_gpu("H100").total_gib == 79.19


def test_gpu_capabilities():
    assert find_gpu("H100").supports_fp8 and find_gpu("L40S").supports_fp8
    assert not find_gpu("A100 80GB").supports_fp8
    assert not find_gpu("T4").supports_bf16 and find_gpu("A10G").supports_bf16
    assert find_gpu("A100 80GB").compute_capability == (8, 0)
    assert find_gpu("H100").nvlink and not find_gpu("L40S").nvlink


def test_every_gpu_is_reachable_by_its_own_name():
    for name in gpu_names():
        assert find_gpu(name).name == name
    assert len(GPUS) >= 15


@pytest.mark.parametrize(("name", "total"), [
    ("A100-80GB MIG 3g.40gb", 39.25), ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", 9.5), ("H100 MIG 7g.80gb", 79.19),
    ("a100-40g mig-2g.10gb", 9.62),
])
def test_mig_profiles_are_pseudo_gpus(name, total):
    gpu = find_gpu(name)
    assert gpu.total_gib == total
    assert gpu.mig_profile is not None and gpu.mig_profiles == {}
    assert "MIG" in gpu.name


def test_unknown_mig_profile_lists_the_gpus_profiles():
    with pytest.raises(UnknownGpu) as err:
        find_gpu("A100-80GB MIG 5g.50gb")
    assert "A100-SXM4-80GB MIG 3g.40gb" in err.value.nearest


def test_unknown_gpu_names_the_nearest():
    with pytest.raises(UnknownGpu) as err:
        find_gpu("H100X")
    assert isinstance(err.value, ValueError)
    assert err.value.nearest
