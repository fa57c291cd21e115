"""vLLM's start-up memory arithmetic, per version, and the start-up failures it predicts."""

from __future__ import annotations

import pytest

from runbooks.catalogs.models import find_model
from runbooks.model.budget import Assumed
from runbooks.sizing.budget import FAILURE_IDS, BudgetInputs, compute_budget

QWEN7 = find_model("Qwen/Qwen2.5-7B-Instruct")
LLAMA8 = find_model("meta-llama/Llama-3.1-8B-Instruct")


def vllm(model=QWEN7, **kw):
    kw.setdefault("gpu_total_gib", 79.15)
    return compute_budget(model, BudgetInputs(engine="vllm", **kw))


def test_runbook_incident_qwen7b_a100_util095_fits_137_sequences_of_8192():
    b = vllm(gpu_name="A100 80GB", gpu_memory_utilization=0.95, max_model_len=8192, max_num_seqs=128)
    assert b.fits and b.failure is None
    assert b.weights_gib == pytest.approx(14.2, abs=0.1)
    assert b.kv_bytes_per_token == 57344
    # 0.95 x 79.15 = 75.19 GiB budget; ~60 GiB of KV -> ~1.12M tokens, 137 requests of 8192
    assert b.budget_gib == pytest.approx(75.19, abs=0.01)
    assert b.kv_cache_gib == pytest.approx(60.0, abs=0.5)
    assert b.kv_cache_tokens == pytest.approx(1_124_000, rel=0.01)
    assert b.max_concurrency == pytest.approx(137, abs=2)
    assert b.kv_cache_tokens == b.gpu_blocks * 16
    # the whole card less what the engine holds and the CUDA context
    assert 2.5 < b.headroom_gib < 4.5


def test_defaults_are_listed_as_assumptions():
    b = vllm(gpu_name="A100 80GB", max_model_len=8192)
    assumed = dict(b.assumptions)
    assert assumed["engine_version"] == Assumed("0.33.0", "newest_known")
    assert assumed["gpu_memory_utilization"] == Assumed(0.9, "engine_default", (("engine", "vLLM"),))
    assert assumed["max_num_batched_tokens"] == Assumed(2048, "vllm_v1_excepted_gpu", (("gpu", "A100"),))
    assert assumed["max_num_seqs"].value == 256
    assert b.assumption("max_model_len") is None  # given


def test_v1_uses_bigger_batches_on_h100_than_on_a100():
    h100 = vllm(gpu_name="H100", gpu_total_gib=79.19, engine_version="0.10.1", max_model_len=8192)
    a100 = vllm(gpu_name="A100 80GB", engine_version="0.10.1", max_model_len=8192)
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)


def test_v0_profiles_max_model_len_tokens_without_chunked_prefill():
    b = vllm(engine_version="0.6.6", gpu_total_gib=23.57, max_model_len=8192, max_num_seqs=16)
    assert b.regime == "vllm-v0"
    assert b.max_num_batched_tokens == 8192
    # logged: 14.25 weights + 1.09 activation + 0.10 non-torch + 5.77 KV = 21.21
    assert b.activation_gib == pytest.approx(1.09, abs=0.1)
    assert b.kv_cache_gib == pytest.approx(5.77, rel=0.05)


def test_v0_turns_on_chunked_prefill_above_32k():
    b = vllm(LLAMA8, engine_version="0.7.3", gpu_total_gib=22.07)
    assert b.max_num_batched_tokens == 2048
    assert b.assumption("enable_chunked_prefill") == Assumed(True, "vllm_v0_chunked_above_32k")


def test_v0_fails_when_one_max_length_request_does_not_fit_with_v0_wording():
    b = vllm(LLAMA8, engine_version="0.7.3", gpu_total_gib=22.07)
    assert b.failure_id == "kv_below_one_sequence"
    assert not b.fits
    assert b.failure.startswith("The model's max seq len (131072) is larger than the maximum number of tokens "
                                f"that can be stored in KV cache ({b.kv_cache_tokens}).")


def test_v1_fails_with_v1_wording_and_estimated_max_length():
    b = vllm(LLAMA8, engine_version="0.10.1", gpu_total_gib=22.07, gpu_name="A10G")
    assert b.failure_id == "kv_below_one_sequence"
    assert "To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache" in b.failure
    assert f"the estimated maximum model length is {b.kv_cache_tokens}." in b.failure
    assert b.failure.endswith("Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                              "initializing the engine.")


def test_newer_v1_says_model_s():
    b = vllm(LLAMA8, engine_version="0.11.0", gpu_total_gib=22.07)
    assert "with the model's max seq len (131072)" in b.failure


def test_weights_above_budget_leave_no_cache_blocks():
    b = vllm(LLAMA8, engine_version="0.10.1", gpu_total_gib=22.07, gpu_memory_utilization=0.6, max_model_len=4096)
    assert b.failure_id == "no_cache_blocks"
    assert b.failure == ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                         "when initializing the engine.")
    assert b.kv_cache_tokens == 0


def test_v1_refuses_to_start_when_other_processes_leave_less_than_the_target():
    b = vllm(engine_version="0.10.1", gpu_memory_utilization=0.9, other_process_gib=10.0, max_model_len=8192)
    assert b.failure_id == "free_below_target"
    assert b.failure.startswith("Free memory on device (68.")
    assert "/79.15 GiB) on startup is less than desired GPU memory utilization (0.9, 71.24 GiB)." in b.failure


def test_v0_065_ignores_other_processes_but_the_allocation_then_runs_out():
    alone = vllm(engine_version="0.6.6", max_model_len=8192)
    crowded = vllm(engine_version="0.6.6", max_model_len=8192, other_process_gib=10.0)
    assert crowded.kv_cache_gib == pytest.approx(alone.kv_cache_gib)
    assert crowded.failure_id == "kv_allocation_oom"


def test_vllm_064_counts_other_processes_as_non_torch_memory():
    alone = vllm(engine_version="0.6.4", max_model_len=8192)
    crowded = vllm(engine_version="0.6.4", max_model_len=8192, other_process_gib=10.0)
    assert alone.kv_cache_gib - crowded.kv_cache_gib == pytest.approx(10.0)
    assert crowded.fits


def test_graphs_come_out_of_the_kv_budget_from_0_21():
    old = vllm(engine_version="0.20.0", max_model_len=8192)
    new = vllm(engine_version="0.21.0", max_model_len=8192)
    assert new.kv_cache_gib == pytest.approx(old.kv_cache_gib - new.cudagraph_gib, abs=0.01)
    assert new.headroom_gib > old.headroom_gib


def test_enforce_eager_captures_no_graphs():
    assert vllm(enforce_eager=True, max_model_len=8192).cudagraph_gib == 0


def test_kv_cache_memory_flag_replaces_the_utilization_budget():
    b = vllm(engine_version="0.11.0", kv_cache_memory_gib=20.0, max_model_len=8192)
    assert b.kv_cache_gib == 20.0
    assert b.kv_cache_tokens == int(20.0 * 2**30 // (57344 * 16)) * 16


def test_heads_not_divisible_by_tp_fail_before_anything_else():
    b = vllm(tp=8, max_model_len=8192)  # 28 heads
    assert b.failure_id == "heads_not_divisible_by_tp"
    assert b.failure == "Total number of attention heads (28) must be divisible by tensor parallel size (8)."


def test_tp_beyond_kv_heads_warns_of_replication():
    b = vllm(find_model("Qwen/Qwen2.5-72B-Instruct"), tp=16, max_model_len=8192)  # 8 KV heads, 64 heads
    assert "tp_exceeds_kv_heads_replicated" in b.warnings


def test_max_model_len_above_the_model_is_refused():
    b = vllm(max_model_len=65536)
    assert b.failure_id == "max_model_len_exceeds_model"
    assert "max_position_embeddings=32768" in b.failure


def test_weights_larger_than_the_card_fail_at_load():
    b = vllm(find_model("meta-llama/Llama-3.1-70B-Instruct"), max_model_len=8192)
    assert b.failure_id == "weights_exceed_gpu"
    assert b.failure.startswith("CUDA out of memory.")


def test_fp8_on_ampere_warns_weight_only():
    b = vllm(find_model("Qwen/Qwen3-8B"), quantization="fp8", gpu_name="A100 80GB", max_model_len=8192)
    assert "fp8_weight_only_on_gpu" in b.warnings
    t4 = vllm(find_model("Qwen/Qwen3-8B"), quantization="fp8", gpu_name="T4", gpu_total_gib=14.56,
              max_model_len=4096)
    assert "fp8_unsupported_on_gpu" in t4.warnings


def test_bf16_model_on_t4_is_served_in_fp16():
    b = vllm(find_model("Qwen/Qwen2.5-1.5B-Instruct"), gpu_name="T4", gpu_total_gib=14.56, max_model_len=4096)
    assert "bf16_unsupported_on_gpu" in b.warnings
    assert b.assumption("dtype").value == "float16"


def test_hybrid_allocator_gives_gemma3_more_long_requests_from_0_10():
    gemma = find_model("google/gemma-3-27b-it")
    old = vllm(gemma, engine_version="0.9.2", tp=2, max_model_len=32768)
    new = vllm(gemma, engine_version="0.10.1", tp=2, max_model_len=32768)
    assert new.max_concurrency > 3 * old.max_concurrency
    assert new.kv_cache_tokens == int(new.max_concurrency * 32768)


def test_deepseek_before_mla_support_caches_full_heads():
    lite = find_model("deepseek-ai/DeepSeek-V2-Lite")
    old = vllm(lite, engine_version="0.6.6", max_model_len=8192)
    new = vllm(lite, engine_version="0.8.5", max_model_len=8192)
    assert "mla_cached_per_head" in old.warnings
    assert old.kv_bytes_per_token == 27 * 2 * 16 * 192 * 2
    assert new.kv_bytes_per_token == 27 * 576 * 2


def test_pipeline_parallel_halves_weights_and_kv_per_gpu():
    model = find_model("meta-llama/Llama-3.1-70B-Instruct")
    b = vllm(model, tp=2, pp=2, max_model_len=8192)
    assert b.kv_bytes_per_token == 327680 // 2 // 2
    assert b.weights_gib < 36


def test_lora_slots_add_to_weights():
    plain = vllm(max_model_len=8192)
    lora = vllm(max_model_len=8192, max_lora_rank=64, max_loras=4)
    assert lora.weights_gib > plain.weights_gib + 0.1
    assert lora.kv_cache_gib < plain.kv_cache_gib


def test_failure_ids_are_from_the_stable_set():
    for b in (vllm(tp=8, max_model_len=8192), vllm(LLAMA8, gpu_total_gib=22.07), vllm(max_model_len=65536)):
        assert b.failure_id in FAILURE_IDS


def test_unknown_engine_is_a_value_error():
    with pytest.raises(ValueError, match="unknown engine"):
        compute_budget(QWEN7, BudgetInputs(engine="triton", gpu_total_gib=80))
