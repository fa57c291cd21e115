"""SGLang's start-up memory arithmetic: mem_fraction_static of free memory."""

from __future__ import annotations

import pytest

from runbooks.catalogs.engine_defaults import sglang_mem_fraction_static
from runbooks.catalogs.models import find_model
from runbooks.model.budget import Assumed
from runbooks.sizing.budget import BudgetInputs, compute_budget

QWQ = find_model("Qwen/QwQ-32B")


def sglang(model=QWQ, **kw):
    kw.setdefault("gpu_total_gib", 22.06)
    return compute_budget(model, BudgetInputs(engine="sglang", **kw))


def test_qwq_on_4_l4_reproduces_the_logged_pool():
    # logged: 21.63 GB free, 15.54 GB weights, mfs 0.85 -> 46611 tokens
    b = sglang(engine_version="0.4.3.post4", tp=4, gpu_name="L4", free_gib=21.63)
    assert str(b.assumption("mem_fraction_static").value).startswith("0.85")
    assert b.weights_gib == pytest.approx(15.54, rel=0.01)
    assert b.kv_cache_tokens == pytest.approx(46611, rel=0.03)
    assert b.kv_bytes_per_token == 65536
    assert b.budget_gib == pytest.approx(21.63 * 0.85)


def test_pool_is_free_minus_weights_minus_the_unreserved_share():
    b = sglang(find_model("meta-llama/Llama-3.1-8B-Instruct"), engine_version="0.4.6", free_gib=22.39,
               mem_fraction_static=0.88)
    expected = (22.39 - b.weights_gib - 22.39 * 0.12) * 2**30 // 131072
    assert b.kv_cache_tokens == int(expected)


def test_default_fraction_by_tp_in_0_4():
    assert sglang_mem_fraction_static((0, 4, 6), 79.15, 1)[0] == 0.88
    assert sglang_mem_fraction_static((0, 4, 6), 79.15, 2)[0] == 0.87
    assert sglang_mem_fraction_static((0, 4, 6), 79.15, 4)[0] == 0.85
    assert sglang_mem_fraction_static((0, 4, 6), 79.15, 8)[0] == 0.81
    assert sglang_mem_fraction_static((0, 4, 6), 139.8, 8)[0] > 0.81  # raised on > 96 GB cards


def test_default_fraction_in_0_5_keeps_a_reserve_sized_by_the_card():
    mfs_24, _ = sglang_mem_fraction_static((0, 5, 0), 23.58, 1)
    mfs_80, _ = sglang_mem_fraction_static((0, 5, 0), 79.15, 1)
    assert mfs_24 == pytest.approx(0.877, abs=0.002)
    assert mfs_80 == pytest.approx(0.874, abs=0.002)


def test_pool_at_or_below_zero_stops_start_up_with_sglang_wording():
    b = sglang(engine_version="0.4.6", tp=4, gpu_name="L4", max_model_len=8192, mem_fraction_static=0.6)
    assert b.failure_id == "sglang_not_enough_memory"
    assert b.failure == "Not enough memory. Please try to increase --mem-fraction-static."
    assert not b.fits


def test_short_pool_warns_that_context_is_capped():
    b = sglang(find_model("meta-llama/Llama-3.1-8B-Instruct"), gpu_total_gib=23.58, engine_version="0.4.6")
    assert b.failure is None
    assert "context_exceeds_kv_pool" in b.warnings
    assert b.max_concurrency < 1


def test_mla_cell_is_latent_and_not_split_by_tp():
    b = sglang(find_model("deepseek-ai/DeepSeek-V3"), gpu_total_gib=139.8, gpu_name="H200", tp=8,
               max_model_len=32768)
    assert b.kv_bytes_per_token == 70272
    assert b.failure is None


def test_swa_models_get_a_smaller_cell_from_0_5():
    gemma = find_model("google/gemma-3-27b-it")
    old = sglang(gemma, gpu_total_gib=79.15, engine_version="0.4.6", max_model_len=32768)
    new = sglang(gemma, gpu_total_gib=79.15, engine_version="0.5.2", max_model_len=32768)
    assert new.kv_cache_tokens > old.kv_cache_tokens
    assert new.assumption("swa_full_tokens_ratio") == Assumed(0.8, "engine_default", (("engine", "SGLang"),))


def test_default_mem_fraction_static_by_version():
    """server_args.py@0.5.2 reserves by card tier; from 0.5.3 (and in arg_groups/memory_hook.py
    @0.5.23) 512 MB + 1.5 MB per chunk token + 2 MB per decode-graph batch size + TP x PP / 8 GB,
    at least 10 GB on cards over 60 GB."""
    from runbooks.catalogs.engine_defaults import sglang_mem_fraction_static

    assert sglang_mem_fraction_static((0, 5, 2), 79.19, 1)[0] == round((79.19 - 10.0) / 79.19, 3)
    # H100 80GB: 8192-token chunk, 256 graphs: 512 + 12288 + 512 + 128 MB
    assert sglang_mem_fraction_static((0, 5, 23), 79.19, 1)[0] == round((79.19 * 1024 - 13440) / (79.19 * 1024), 3)
    # L4 (22 GB): 2048-token chunk, 24 graphs, no 10 GB floor
    assert sglang_mem_fraction_static((0, 5, 23), 22.05, 1)[0] == round((22.05 * 1024 - (512 + 3072 + 48 + 128)) /
                                                                           (22.05 * 1024), 3)
    # TP 8 on H200s: 512 graphs and a GB of parallel slack; the floor does not bind
    assert sglang_mem_fraction_static((0, 5, 23), 139.8, 8)[0] == round((139.8 * 1024 - (512 + 12288 + 1024 + 1024)) /
                                                                           (139.8 * 1024), 3)
