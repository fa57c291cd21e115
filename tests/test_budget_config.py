"""The budget of a parsed server launch (ServerConfig), whatever the engine."""

from __future__ import annotations

import pytest

from runbooks.catalogs.models import find_model
from runbooks.model.evidence import ServerConfig
from runbooks.sizing.budget import budget_from_config, inputs_from_config

QWEN7 = find_model("Qwen/Qwen2.5-7B-Instruct")


def test_vllm_flags_map_onto_budget_inputs():
    config = ServerConfig(source="deployment.yaml", engine="vllm", engine_version="0.10.1", max_model_len=8192,
                          max_num_seqs=128, memory_fraction=0.95, memory_fraction_kind="total",
                          tensor_parallel_size=1, kv_cache_dtype="fp8", enforce_eager=True)
    inputs = inputs_from_config(config, 79.15, "A100 80GB")
    assert (inputs.gpu_memory_utilization, inputs.max_model_len, inputs.max_num_seqs) == (0.95, 8192, 128)
    assert inputs.kv_cache_dtype == "fp8" and inputs.enforce_eager
    b = budget_from_config(config, QWEN7, 79.15, "A100 80GB")
    assert b.kv_bytes_per_token == 57344 // 2
    assert b.cudagraph_gib == 0
    assert b.budget_gib == pytest.approx(0.95 * 79.15)


def test_sglang_fraction_is_mem_fraction_static():
    config = ServerConfig(source="args", engine="sglang", memory_fraction=0.8, memory_fraction_kind="free_static",
                          flags={"chunked-prefill-size": "4096", "disable-cuda-graph": "true"})
    inputs = inputs_from_config(config, 79.15)
    assert inputs.mem_fraction_static == 0.8 and inputs.gpu_memory_utilization is None
    assert inputs.max_num_batched_tokens == 4096
    assert inputs.enforce_eager is True


def test_tgi_fraction_and_total_tokens():
    config = ServerConfig(source="args", engine="tgi", memory_fraction=0.9, memory_fraction_kind="process",
                          max_model_len=8192, max_input_tokens=8000, max_batch_prefill_tokens=8192)
    inputs = inputs_from_config(config, 79.15)
    assert inputs.cuda_memory_fraction == 0.9
    assert (inputs.max_total_tokens, inputs.max_input_tokens, inputs.max_batch_prefill_tokens) == (8192, 8000, 8192)
    assert budget_from_config(config, QWEN7, 79.15).max_model_len == 8192


def test_kv_cache_memory_bytes_and_v0_switch_pass_through():
    config = ServerConfig(source="args", engine="vllm", engine_version="0.8.5", kv_cache_memory_bytes=20 * 2**30,
                          flags={"VLLM_USE_V1": "0"}, max_model_len=4096)
    inputs = inputs_from_config(config, 79.15)
    assert inputs.kv_cache_memory_gib == 20.0
    assert inputs.use_v1 is False
    assert budget_from_config(config, QWEN7, 79.15).regime == "vllm-v0"


def test_engine_missing_means_vllm_and_other_processes_count():
    config = ServerConfig(source="args", max_model_len=8192)
    alone = budget_from_config(config, QWEN7, 79.15)
    crowded = budget_from_config(config, QWEN7, 79.15, other_process_gib=5.0)
    assert alone.engine == "vllm"
    assert crowded.headroom_gib == pytest.approx(alone.headroom_gib - 5.0)
