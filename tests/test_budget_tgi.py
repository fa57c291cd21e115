"""TGI's warm-up arithmetic: 90% of what the largest prefill batch leaves, plus its blocks."""

from __future__ import annotations

import pytest

from runbooks.catalogs.engine_defaults import tgi_wiggle_room
from runbooks.catalogs.models import find_model
from runbooks.model.budget import Assumed
from runbooks.model.units import GIB
from runbooks.sizing.budget import BudgetInputs, compute_budget

LLAMA8 = find_model("meta-llama/Llama-3.1-8B-Instruct")


def tgi(model=LLAMA8, **kw):
    kw.setdefault("gpu_total_gib", 79.15)
    return compute_budget(model, BudgetInputs(engine="tgi", **kw))


def test_tgi2_defaults_cap_lengths_at_4096():
    b = tgi(engine_version="2.2.0")
    assumed = dict(b.assumptions)
    assert assumed["max_total_tokens"] == Assumed(4096, "tgi_2_default")
    assert assumed["max_input_tokens"] == Assumed(4095, "tgi_2_default")
    assert assumed["max_batch_prefill_tokens"] == Assumed(4145, "tgi_2_default")
    assert b.max_model_len == 4096
    assert b.block_size == 16


def test_blocks_are_wiggle_room_share_of_free_plus_warmup_blocks():
    b = tgi(engine_version="2.2.0")
    block_bytes = 131072 * 16
    warm_blocks = 2 * (4096 // 16)  # two warm-up requests, each with blocks for 4096 tokens
    free = b.free_gib - b.weights_gib - warm_blocks * block_bytes / 2**30 - b.activation_gib
    assert b.gpu_blocks == int(free * tgi_wiggle_room((2, 2, 0)) * 2**30 // block_bytes) + warm_blocks
    assert b.kv_cache_tokens == b.gpu_blocks * 16


def test_cuda_memory_fraction_takes_its_share_of_the_total_off_free_memory():
    full = tgi(engine_version="2.2.0")
    capped = tgi(engine_version="2.2.0", cuda_memory_fraction=0.8)
    lost = (full.gpu_blocks - capped.gpu_blocks) * 131072 * 16 / 2**30
    assert lost == pytest.approx(0.2 * 79.15 * tgi_wiggle_room((2, 2, 0)), abs=0.01)
    assert capped.budget_gib == pytest.approx(0.8 * 79.15)


def test_larger_prefill_batch_costs_kv():
    small = tgi(engine_version="2.2.0", max_batch_prefill_tokens=4145)
    big = tgi(engine_version="2.2.0", max_batch_prefill_tokens=16384, max_input_tokens=8191,
              max_total_tokens=8192)
    assert big.activation_gib > small.activation_gib
    assert big.kv_cache_gib < small.kv_cache_gib


def test_warmup_that_does_not_fit_fails_with_tgi_wording():
    b = tgi(engine_version="2.2.0", gpu_total_gib=22.07, max_batch_prefill_tokens=32768,
            max_input_tokens=16384, max_total_tokens=16385)
    assert b.failure_id == "tgi_prefill_oom"
    assert b.failure == ("Not enough memory to handle 32768 prefill tokens. You need to decrease "
                         "`--max-batch-prefill-tokens`")


def test_tgi3_uses_model_length_and_single_token_blocks():
    b = tgi(engine_version="3.1.0", max_total_tokens=32768)
    assert b.block_size == 1
    assert b.max_model_len == 32768
    assert b.fits


# ------------------------------------------------------------------ TGI 3: the wiggle room on the fraction


LLAMA31_70B = find_model("meta-llama/Llama-3.1-70B-Instruct")


def _tgi_70b_on_two_h100s(version: str, **kw):
    return compute_budget(LLAMA31_70B, BudgetInputs(engine="tgi", engine_version=version, gpu_total_gib=79.19,
                                                     gpu_name="H100", tp=2, **kw))


@pytest.mark.parametrize("version", ["3.0.0", "3.1.0", "3.3.7"])
def test_tgi3_reserves_one_minus_fraction_times_wiggle_of_the_card(version):
    """flash_causal_lm.py:1556@v3.3.7: get_free_memory(device, MEMORY_FRACTION * TGI_WIGGLE_ROOM),
    i.e. free - (1 - fraction x wiggle) x total, not wiggle x (free - (1 - fraction) x total)."""
    b = _tgi_70b_on_two_h100s(version)
    w = tgi_wiggle_room(tuple(int(p) for p in version.split(".")))
    one_block = b.kv_bytes_per_token * b.block_size / 2**30
    # the cache is what the weights and the warm-up's activations leave, less the reserve, to
    # within the block rounding; the warm-up request's own blocks (4096 prompt tokens and one
    # new) are counted back in, so it is never less than they are
    left = b.free_gib - b.weights_gib - b.activation_gib - (1 - w) * 79.19
    warm = 4097 * b.kv_bytes_per_token / 2**30
    assert left > warm  # the reserve leaves more than the warm-up request's blocks at each
    assert abs(b.kv_cache_gib - max(left, warm)) <= one_block + 1e-9


def test_tgi3_70b_on_two_h100s_gets_far_less_kv_than_the_2x_formula():
    by_version = {v: round(_tgi_70b_on_two_h100s(v).kv_cache_gib, 2) for v in ("2.4.1", "3.0.0", "3.1.0", "3.3.7")}
    # 2.4.1: 0.90 x what is free, after a warm-up that holds three full copies of its 4096-token
    # prefill's logits at TP 2 (tgi_logit_copies); 3.x: what is free less 5%, 7% and 10% of the
    # card, after a warm-up whose LM head reads one row a request (no --enable-prefill-logprobs)
    # and whose one request is the launcher's prefill default, 12,191 tokens (2 x 900 TFLOP/s
    # over 147.6 GFLOP a token); its MLP holds act(gate) and act(gate) x up at once
    # (forward_peak_bytes' unfused_act); from 3.0 each shard also holds FlashInfer's 152 MiB of
    # workspaces (TGI_FLASHINFER_BUFFERS_BYTES)
    assert by_version == {"2.4.1": 7.72, "3.0.0": 6.08, "3.1.0": 4.49, "3.3.7": 2.12}
    assert _tgi_70b_on_two_h100s("3.3.7").max_num_batched_tokens == 12191
    assert _tgi_70b_on_two_h100s("3.3.7", max_total_tokens=12288).fits
    assert _tgi_70b_on_two_h100s("3.3.7", max_total_tokens=16384).failure_id == "tgi_max_total_tokens_oom"
    # allowed prefill log-probabilities bring the three copies of the whole prefill's logits back
    # (4 requests of 1024 tokens: 4 rows without them, 4096 with)
    sized = dict(max_batch_prefill_tokens=4096, max_input_tokens=1024, max_total_tokens=2048)
    allowed = _tgi_70b_on_two_h100s("3.3.7", tgi_prefill_logprobs=True, **sized)
    plain = _tgi_70b_on_two_h100s("3.3.7", **sized)
    assert allowed.activation_gib - plain.activation_gib == pytest.approx(3 * (4096 - 4) * 128256 * 2 / GIB, rel=1e-9)
    assert allowed.kv_cache_tokens < plain.kv_cache_tokens


def test_the_warm_up_logits_copies_follow_the_version_and_tp():
    """Before 2.4.0 log_softmax writes a second tensor (three at TP > 1, where the gathered
    logits are a transposed view); from 2.4.0 it writes into the logits, which saves the copy at
    TP 1 only; from 3.0.0 the LM head reads the whole prefill only with prefill log-probabilities
    allowed, else one row for each of the warm-up's requests."""
    from runbooks.catalogs.engine_defaults import TGI_FLASHINFER_BUFFERS_BYTES
    from runbooks.sizing.activation import forward_peak_bytes, logits_bytes
    from runbooks.sizing.tgi import tgi_logit_copies

    assert [tgi_logit_copies(tp, (2, 3, 1)) for tp in (1, 2, 8)] == [2, 3, 3]
    assert [tgi_logit_copies(tp, (2, 4, 0)) for tp in (1, 2, 8)] == [1, 3, 3]
    # (version, TP, logprobs allowed, copies, logits rows): 4 warm-up requests of 1024 tokens
    for version, tp, allowed, copies, rows in (("2.3.1", 1, None, 2, 4096), ("2.4.0", 1, None, 1, 4096),
                                               ("3.3.7", 1, None, 1, 4), ("3.3.7", 2, None, 3, 4),
                                               ("3.3.7", 1, True, 1, 4096), ("3.3.7", 2, True, 3, 4096),
                                               ("3.0.0", 2, False, 3, 4)):
        b = compute_budget(LLAMA31_70B, BudgetInputs(engine="tgi", engine_version=version, gpu_total_gib=79.19,
                                                      gpu_name="H100", tp=tp, max_batch_prefill_tokens=4096,
                                                      max_input_tokens=1024, max_total_tokens=2048,
                                                      tgi_prefill_logprobs=allowed))
        tokens = b.max_num_batched_tokens
        expected = forward_peak_bytes(LLAMA31_70B, tokens, tp, "bfloat16", unfused_act=True) + copies * logits_bytes(
            LLAMA31_70B, rows, 2) + (TGI_FLASHINFER_BUFFERS_BYTES if version >= "3" else 0)
        assert b.activation_gib == pytest.approx(expected / GIB, rel=1e-9), (version, tp, allowed)
    same = dict(engine="tgi", gpu_total_gib=79.19, gpu_name="H100", tp=1, max_batch_prefill_tokens=4096,
                max_input_tokens=1024, max_total_tokens=2048)
    older = compute_budget(LLAMA31_70B, BudgetInputs(engine_version="2.3.1", **same))
    newer = compute_budget(LLAMA31_70B, BudgetInputs(engine_version="2.4.0", **same))
    assert older.activation_gib - newer.activation_gib == pytest.approx(4096 * 128256 * 2 / GIB, rel=1e-9)


def test_tgi3_cuda_memory_fraction_multiplies_the_wiggle_room():
    full = _tgi_70b_on_two_h100s("3.0.0")
    capped = _tgi_70b_on_two_h100s("3.0.0", cuda_memory_fraction=0.98)
    lost = (full.gpu_blocks - capped.gpu_blocks) * full.kv_bytes_per_token * full.block_size / 2**30
    assert lost == pytest.approx((1 - 0.98) * 0.95 * 79.19, abs=0.01)


LLAMA3_AWQ = find_model("meta-llama/Meta-Llama-3-8B-Instruct-AWQ")


def test_awq_split_k_gemm_holds_eight_partial_outputs_of_the_widest_projection():
    from runbooks.sizing.tgi import awq_split_k_peak_bytes
    # Llama-3-8B, 4096 warm-up tokens in fp16: the fused gate/up (2 x 14336) written 8 times
    # and summed, next to the residual and normed input (3 x 4096)
    assert awq_split_k_peak_bytes(LLAMA3_AWQ, 4096, 1, 2) == 4096 * 2 * (3 * 4096 + 9 * 2 * 14336)
    assert awq_split_k_peak_bytes(LLAMA3_AWQ, 4096, 2, 2) < awq_split_k_peak_bytes(LLAMA3_AWQ, 4096, 1, 2)


@pytest.mark.parametrize(("version", "split_k"), [("1.1.0", True), ("1.4.5", True), ("2.1.1", True),
                                                  ("1.0.3", False), ("2.2.0", False), ("3.3.0", False)])
def test_awq_warmup_peak_counts_the_split_k_buffer_only_where_the_release_runs_it(version, split_k):
    kw = {"gpu_total_gib": 23.58, "engine_version": version, "max_input_tokens": 1024, "max_total_tokens": 2048,
          "max_batch_prefill_tokens": 4096}
    awq = tgi(LLAMA3_AWQ, quantization="awq", **kw)
    plain = tgi(find_model("meta-llama/Meta-Llama-3-8B-Instruct"), dtype="float16", **kw)
    # the same warm-up batch: logits and log-softmax are the same, the forward peak differs (the
    # plain MLP's peak: gate/up, act(gate) and the product, 4 x 14336 a token)
    extra = awq.activation_gib - plain.activation_gib
    if split_k:
        assert extra * 2**30 == pytest.approx(4096 * 2 * 9 * 2 * 14336 - 4096 * 2 * 4 * 14336, rel=1e-6)
    else:
        assert extra == pytest.approx(0.0, abs=1e-9)


def test_tgi_mlp_holds_the_activation_and_the_product_beside_gate_up():
    """flash_llama_modeling.py:319@v0.9.3, :402-404@v3.3.7: act(gate) * up written in torch;
    vLLM and SGLang fuse the two into one SiluAndMul output. MoE layers run fused kernels."""
    from runbooks.sizing.activation import forward_peak_bytes

    tokens = 4096
    for tp in (1, 2):
        extra = forward_peak_bytes(LLAMA8, tokens, tp, "bfloat16", unfused_act=True) - \
            forward_peak_bytes(LLAMA8, tokens, tp, "bfloat16")
        assert extra == tokens * 2 * 14336 / tp
    mixtral = find_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert forward_peak_bytes(mixtral, tokens, 1, "bfloat16", unfused_act=True) == \
        forward_peak_bytes(mixtral, tokens, 1, "bfloat16")
