"""Unsloth-style launches: bitsandbytes 4-bit checkpoints (4.5 bits a weight with the quant
state, 16-bit compute dtype) and vLLM's LoRA slots (--enable-lora, --max-lora-rank,
--max-loras, --max-cpu-loras)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.main import main
from collectors.parsers.kube_objects import parse_deployment
from runbooks.catalogs.models import find_model
from runbooks.model.budget import Assumed
from runbooks.model.units import GIB
from runbooks.sizing.budget import BudgetInputs, compute_budget, inputs_from_config
from runbooks.sizing.conflicts import find_conflicts
from runbooks.sizing.weights import (
    LORA_RANKS,
    bnb_bytes_per_param,
    lora_bytes,
    param_breakdown,
    weights_bytes,
)

LLAMA8 = find_model("meta-llama/Llama-3.1-8B-Instruct")
BNB8 = find_model("unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit")


def vllm(model=LLAMA8, **kw):
    kw.setdefault("gpu_total_gib", 14.56)
    kw.setdefault("gpu_name", "T4")
    kw.setdefault("engine_version", "0.9.2")
    kw.setdefault("max_model_len", 8192)
    return compute_budget(model, BudgetInputs(engine="vllm", **kw))


def test_unsloth_bnb_4bit_repo_resolves_to_the_base_architecture():
    assert (BNB8.quantization, BNB8.quant_bits, BNB8.num_layers) == ("bitsandbytes", 4, 32)


def test_bnb_4bit_linear_weights_take_4_5_bits_and_the_rest_16():
    assert bnb_bytes_per_param(4) == pytest.approx(4.5 / 8)
    parts = param_breakdown(LLAMA8)
    linear = parts.attention + parts.mlp + parts.other
    expected = linear * 4.5 / 8 + (parts.embed + parts.lm_head) * 2
    assert weights_bytes(BNB8) == pytest.approx(expected)
    assert weights_bytes(BNB8) / GIB == pytest.approx(5.61, abs=0.01)
    # a 16-bit checkpoint quantized in flight lands at the same size
    assert weights_bytes(LLAMA8, quantization="bitsandbytes") == pytest.approx(weights_bytes(BNB8))


def test_bnb_on_a_t4_computes_in_float16_and_fits_8k_context():
    b = vllm(model=BNB8)
    assert b.assumption("dtype") == Assumed("float16", "no_bf16_on_gpu")
    assert b.regime == "vllm-v0"  # 0.9 on compute capability 7.5
    assert b.weights_gib == pytest.approx(5.64, abs=0.01)
    assert b.kv_bytes_per_token == 131072
    assert b.kv_cache_tokens == 49_744
    assert b.fits


def test_lora_slot_size_per_layer_and_module():
    # rank 16, one slot: 32 layers x 81,920 A/B elements per rank + embedding and LM-head A/B
    assert lora_bytes(LLAMA8, 16) / 2**20 == pytest.approx(92.1, abs=0.05)
    assert lora_bytes(LLAMA8, 64, max_loras=4, tp=2) / GIB == pytest.approx(0.986, abs=0.001)


def test_enable_lora_defaults_to_one_slot_of_rank_16_and_comes_out_of_the_kv_cache():
    plain = vllm(model=BNB8)
    lora = vllm(model=BNB8, enable_lora=True)
    assert lora.lora_gib == pytest.approx(lora_bytes(BNB8, 16) / GIB)
    assert lora.weights_gib - plain.weights_gib == pytest.approx(lora.lora_gib)
    assert plain.kv_cache_gib - lora.kv_cache_gib == pytest.approx(lora.lora_gib)
    assert lora.assumption("max_lora_rank") == Assumed(16, "vllm_lora_default")
    assert lora.assumption("max_loras") == Assumed(1, "vllm_lora_default")


def test_lora_flags_from_a_deployment_need_enable_lora():
    text = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: lora}
spec:
  template:
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.9.2
        args: ["--model", "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit", "--enable-lora", "--max-lora-rank", "64",
               "--max-loras", "4", "--max-cpu-loras", "8"]
"""
    _, config = parse_deployment(text, "deployment.yaml")
    inputs = inputs_from_config(config, 22.07, "A10G")
    assert (inputs.enable_lora, inputs.max_lora_rank, inputs.max_loras, inputs.max_cpu_loras) == (True, 64, 4, 8)
    assert compute_budget(BNB8, inputs).lora_gib == pytest.approx(lora_bytes(BNB8, 64, 4) / GIB)
    flags = {k: v for k, v in config.flags.items() if k != "enable-lora"}
    without = inputs_from_config(replace(config, flags=flags), 22.07, "A10G")
    assert (without.enable_lora, without.max_lora_rank) == (False, None)  # vLLM ignores them too


def test_lora_configurations_vllm_refuses_are_fatal_conflicts():
    def ids(**kw):
        inputs = BudgetInputs(engine="vllm", gpu_total_gib=22.07, enable_lora=True, **kw)
        return [(c.id, c.fatal) for c in find_conflicts(LLAMA8, inputs, None)]

    assert ids(max_lora_rank=48) == [("lora_rank_unsupported", True)]
    assert ids(max_loras=4, max_cpu_loras=2) == [("max_cpu_loras_below_max_loras", True)]
    assert ids(max_lora_rank=64, max_loras=4, max_cpu_loras=4) == []


def test_cli_lora_flags(capsys):
    argv = ["budget", "--engine", "vllm", "--model", "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit", "--gpu", "T4",
            "--engine-version", "0.9.2", "--max-model-len", "8192", "--json", "--lang", "en"]
    assert main([*argv, "--enable-lora", "--max-lora-rank", "64", "--max-loras", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["lora_gib"] == round(lora_bytes(BNB8, 64, 2) / GIB, 4)
    assert main([*argv, "--max-lora-rank", "64"]) == 2
    assert "--enable-lora" in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(rank=st.sampled_from(LORA_RANKS), loras=st.integers(1, 8), tp=st.sampled_from([1, 2, 4, 8]))
def test_lora_slots_scale_with_slots_and_grow_with_rank(rank, loras, tp):
    one = lora_bytes(LLAMA8, rank, 1, tp)
    assert lora_bytes(LLAMA8, rank, loras, tp) == pytest.approx(loras * one)
    assert lora_bytes(LLAMA8, rank * 2, 1, tp) > one
    assert lora_bytes(LLAMA8, rank, 1, tp * 2) < one
