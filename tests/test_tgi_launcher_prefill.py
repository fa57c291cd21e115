"""TGI 3's launcher defaults: the prefill batch it computes from the card and the model, and the
max-total-tokens a shard sets after warm-up with or without prefill chunking
(launcher/src/main.rs, flash_causal_lm.py `warmup`, models/model.py at v3.0.0-v3.3.7)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from runbooks.catalogs.engine_defaults import TgiLauncherConfig, tgi_card, tgi_default_prefill
from runbooks.catalogs.models import find_model
from runbooks.sizing.budget import BudgetInputs, compute_budget, inputs_from_config
from runbooks.sizing.tgi import launcher_config, tgi_prefill_chunking
from tests.support.calibration_report import load_cases, run_case

#: Llama 3.1 8B as config.json gives it to the launcher
LLAMA8_CFG = TgiLauncherConfig(num_heads=32, num_kv_heads=8, head_dim=128, hidden_size=4096, intermediate_size=14336,
                               num_layers=32, vocab_size=128256, max_position_embeddings=131072)
H100_MIB = 81559  # nvidia-smi's memory.total of an H100 80GB HBM3


def test_the_model_flops_a_token_are_the_launchers_sum():
    # per layer: q, attention and o 2 x 32 x 128 x 4096 each, k and v 2 x 8 x 128 x 4096 each,
    # gate/up/down 2 x 3 x 4096 x 14336; 32 layers
    per_layer = 3 * 2 * 32 * 128 * 4096 + 2 * 2 * 8 * 128 * 4096 + 2 * 3 * 4096 * 14336
    assert per_layer == 469_762_048
    assert LLAMA8_CFG.flop() == 32 * per_layer == 15_032_385_536
    assert launcher_config(find_model("meta-llama/Llama-3.1-8B-Instruct")).flop() == 15_032_385_536


@pytest.mark.parametrize(("card", "shards", "config", "expected"), [
    # 900e12 // 15,032,385,536: one H100
    ("nvidia-h100-80gb-hbm3", 1, LLAMA8_CFG, 59870),
    # 125e12 // 15,032,385,536: one A10G
    ("nvidia-a10g", 1, LLAMA8_CFG, 8315),
    # 2 x 900e12 over Llama 3.1 70B's 147.64 GFLOP a token
    ("nvidia-h100-80gb-hbm3", 2, launcher_config(find_model("meta-llama/Llama-3.1-70B-Instruct")), 12191),
])
def test_the_prefill_default_is_the_cards_flops_over_the_models(card, shards, config, expected):
    value, why, params = tgi_default_prefill((3, 3, 7), config, card, shards, H100_MIB, 1.0)
    assert (value, why) == (expected, "tgi_prefill_compute")
    assert params["card"] == card


def test_a_card_is_known_from_the_release_that_names_it():
    # H200 from 3.1.0, A40 and the A100 80GB PCIe from 3.0.2: before, "Unkown compute for card"
    for card, first, before in (("nvidia-h200", (3, 1, 0), (3, 0, 2)), ("nvidia-a40", (3, 0, 2), (3, 0, 1)),
                                ("nvidia-a100-80gb-pcie", (3, 0, 2), (3, 0, 1))):
        assert tgi_default_prefill(first, LLAMA8_CFG, card, 1, None, 1.0)[1] == "tgi_prefill_compute"
        assert tgi_default_prefill(before, LLAMA8_CFG, card, 1, None, 1.0)[:2] == (4096, "tgi_prefill_unknown_card")


def test_nvidia_smi_names_become_the_launchers_card_names():
    assert tgi_card("NVIDIA A100 80GB PCIe") == "nvidia-a100-80gb-pcie"
    # the launcher's table says "nvidia-t4" and "nvidia-4090"; nvidia-smi never prints those
    assert tgi_card("Tesla T4") == "tesla-t4"
    assert tgi_card("NVIDIA GeForce RTX 4090") == "nvidia-geforce-rtx-4090"
    assert tgi_default_prefill((3, 3, 7), LLAMA8_CFG, tgi_card("Tesla T4"), 1, None, 1.0)[0] == 4096
    assert tgi_card("H100") is None and tgi_card(None) is None


def test_the_memory_estimate_caps_the_default():
    # 30% of an H100 at the launcher's 0.95, in Rust's f32: 81559 MiB x 0.3 x 0.95 = 24,373,432,320
    # bytes (f64 would give 24,372,591,820); its weight estimate of the 8B is 14,449,770,496 bytes
    # (192,944,128 a layer, dropping q/k/v's hidden dimension, 32 layers and two 4096 x 128,256
    # embeddings, 2 bytes each) and a token 260,096 bytes (131,072 of fp16 KV, 129,024 of MLP)
    assert LLAMA8_CFG.model_vram() == 14_449_770_496
    assert LLAMA8_CFG.token_vram() == 260_096
    value, why, _ = tgi_default_prefill((3, 3, 7), LLAMA8_CFG, "nvidia-h100-80gb-hbm3", 1, H100_MIB, 0.3)
    assert (value, why) == ((24_373_432_320 - 14_449_770_496) // 260_096, "tgi_prefill_vram") == (38153, "tgi_prefill_vram")
    # TGI_WIGGLE_ROOM set in the container replaces the 0.95
    assert 30000 < tgi_default_prefill((3, 3, 7), LLAMA8_CFG, "nvidia-h100-80gb-hbm3", 1, H100_MIB, 0.3, 0.9)[0] < 38153
    # memory below the weight estimate: the launcher warns "Not enough VRAM" and caps nothing
    assert tgi_default_prefill((3, 3, 7), LLAMA8_CFG, "nvidia-h100-80gb-hbm3", 1, H100_MIB, 0.3, 0.5)[:2] == (
        59870, "tgi_prefill_compute")
    # the cap reads memory.total whatever the card: an unknown card's fallback is capped too
    # (15000 MiB x 0.95 = 14,942,208,000 bytes in f32)
    assert tgi_default_prefill((3, 3, 7), LLAMA8_CFG, "nvidia-rtx-a6000", 1, 15000, 1.0)[:2] == (
        (14_942_208_000 - 14_449_770_496) // 260_096, "tgi_prefill_vram") == (1893, "tgi_prefill_vram")
    # a quantized checkpoint gets no memory estimate, so no cap
    quantized = TgiLauncherConfig(**{**LLAMA8_CFG.__dict__, "quantized": True})
    assert tgi_default_prefill((3, 3, 7), quantized, "nvidia-h100-80gb-hbm3", 1, H100_MIB, 0.3)[0] == 59870


def test_the_models_length_caps_the_default():
    short = TgiLauncherConfig(**{**LLAMA8_CFG.__dict__, "max_position_embeddings": 8192})
    assert tgi_default_prefill((3, 3, 7), short, "nvidia-h100-80gb-hbm3", 1, H100_MIB, 1.0)[0] == 8192


def test_vision_models_get_the_fallback_of_their_release():
    gemma3 = launcher_config(find_model("google/gemma-3-27b-it"))
    qwen_vl = launcher_config(find_model("Qwen/Qwen2.5-VL-7B-Instruct"))
    assert gemma3.flop() is None and gemma3.model_type == "gemma3"
    # 8000 for gemma3 and 10,000 for qwen2(.5)_vl from 3.2.0; 4096 before
    assert tgi_default_prefill((3, 2, 0), gemma3, "nvidia-h100-80gb-hbm3", 1, None, 1.0)[:2] == (8000, "tgi_prefill_vlm")
    assert tgi_default_prefill((3, 1, 1), gemma3, "nvidia-h100-80gb-hbm3", 1, None, 1.0)[0] == 4096
    assert tgi_default_prefill((3, 3, 7), qwen_vl, "nvidia-rtx-a6000", 1, None, 1.0)[:2] == (10000, "tgi_prefill_unknown_card")


def test_mixtral_counts_its_local_experts_in_the_memory_estimate():
    cfg = launcher_config(find_model("mistralai/Mixtral-8x7B-Instruct-v0.1"))
    assert (cfg.local_experts, cfg.experts_per_token) == (8, 2)
    # two experts a token in the FLOPs, all eight in the weights
    assert cfg.flop() == 32 * (3 * 2 * 32 * 128 * 4096 + 2 * 2 * 8 * 128 * 4096 + 2 * 3 * 4096 * 14336 * 2)
    qwen_moe = launcher_config(find_model("Qwen/Qwen3-30B-A3B"))
    assert qwen_moe.local_experts == 1  # its config says num_experts, a key the launcher does not read


def test_the_budget_uses_the_launchers_default_and_one_warm_up_request():
    llama = find_model("meta-llama/Llama-3.1-8B-Instruct")
    b = compute_budget(llama, BudgetInputs(engine="tgi", engine_version="3.3.7", gpu_total_gib=79.19, gpu_name="H100"))
    assumed = b.assumption("max_batch_prefill_tokens")
    assert (assumed.value, assumed.why) == (59870, "tgi_prefill_compute")
    assert b.max_num_batched_tokens == 59870
    # the evidence's own nvidia-smi name wins over the catalog entry's: the 80GB PCIe A100 is
    # unknown to 3.0.1 and known from 3.0.2
    pcie = dict(engine="tgi", gpu_total_gib=79.15, gpu_name="NVIDIA A100 80GB PCIe")
    assert compute_budget(llama, BudgetInputs(engine_version="3.0.1", **pcie)).max_num_batched_tokens == 4096
    assert compute_budget(llama, BudgetInputs(engine_version="3.0.2", **pcie)).max_num_batched_tokens == 20755  # 312e12 // 15,032,385,536
    # 2.x keeps max-input + 50
    assert compute_budget(llama, BudgetInputs(engine="tgi", engine_version="2.4.1", gpu_total_gib=79.19,
                                              gpu_name="H100")).max_num_batched_tokens == 4145


def test_gemma3_on_tgi_3_3_sets_max_total_tokens_to_its_warm_up_as_the_log_printed():
    # the calibration case's log: "Using prefill chunking = False", "Default `max_batch_prefill_tokens`
    # to 8000", "Maximum input tokens defaulted to 7999", "Maximum total tokens defaulted to 8000"
    case = next(c for c in load_cases() if c["id"] == "tgi-gemma3-27b-2xa6000-3.3")
    _, budget = run_case(case)
    assert budget.max_num_batched_tokens == 8000
    assert budget.max_model_len == 8000
    assert budget.assumption("max_input_tokens").value == 7999
    assert budget.assumption("max_total_tokens").why == "tgi3_unchunked_total"


@pytest.mark.parametrize(("model", "version", "gpu", "container", "chunked"), [
    ("meta-llama/Llama-3.1-8B-Instruct", (3, 3, 7), "H100-SXM5-80GB", None, True),
    # paged attention below compute capability 8.0
    ("meta-llama/Llama-3.1-8B-Instruct", (3, 3, 7), "T4", None, False),
    # PREFILL_CHUNKING=0 or ATTENTION=paged in the container
    ("meta-llama/Llama-3.1-8B-Instruct", (3, 3, 7), "H100-SXM5-80GB", "PREFILL_CHUNKING=0", False),
    # 3.3 chunks VLMs except Gemma 3, Mllama, Qwen2-VL and Qwen2.5-VL; 3.0-3.2 chunk none
    ("Qwen/Qwen2.5-VL-7B-Instruct", (3, 3, 7), "H100-SXM5-80GB", None, False),
    ("google/gemma-3-27b-it", (3, 3, 4), "RTX A6000", None, False),
])
def test_prefill_chunking_follows_model_card_and_container(model, version, gpu, container, chunked):
    from runbooks.catalogs.gpus import find_gpu

    assert tgi_prefill_chunking(version, find_model(model), find_gpu(gpu), container)[0] is chunked


def test_a_vlm_that_tgi_3_3_chunks_was_unchunked_before():
    vlm = find_model("meta-llama/Llama-3.1-8B-Instruct")
    vlm = type(vlm)(**{**vlm.__dict__, "architecture": "LlavaNextForConditionalGeneration"})
    assert tgi_prefill_chunking((3, 3, 0), vlm, None, None) == (True, "")
    assert tgi_prefill_chunking((3, 2, 3), vlm, None, None) == (False, "LlavaNextForConditionalGeneration")


def test_the_containers_env_turns_chunking_off_in_the_budget():
    from runbooks.model.evidence import ServerConfig

    llama = find_model("meta-llama/Llama-3.1-8B-Instruct")
    cfg = ServerConfig(source="test", engine="tgi", engine_version="3.3.7", env={"PREFILL_CHUNKING": "0"})
    b = compute_budget(llama, inputs_from_config(cfg, 79.19, "H100"))
    assert b.max_model_len == 59870  # the warm-up's tokens, not the cache's
    assert b.assumption("max_total_tokens").why == "tgi3_unchunked_total"
    chunked = compute_budget(llama, inputs_from_config(ServerConfig(source="test", engine="tgi", engine_version="3.3.7"), 79.19,
                                                       "H100"))
    assert chunked.max_model_len == min(chunked.kv_cache_tokens, 131072) != 59870


def test_tgi3_warm_up_requests_hold_max_total_tokens_when_it_is_given():
    # the router asks each warm-up request for max_total - prompt new tokens; the shard holds
    # blocks for prompt + new - 1 (flash_causal_lm.py:346@v3.3.4): 8,191 tokens for each of the
    # two requests of a 7,168-token cap over the A10G's 8,315-token prefill
    mistral = find_model("mistralai/Mistral-7B-Instruct-v0.3")
    low = BudgetInputs(engine="tgi", engine_version="3.3.4", gpu_total_gib=22.07, gpu_name="NVIDIA A10G",
                       cuda_memory_fraction=0.8, max_total_tokens=8192, max_input_tokens=7168)
    b = compute_budget(mistral, low)
    assert b.max_num_batched_tokens == 8315
    assert b.kv_cache_tokens == 2 * 8191  # the reserve leaves nothing: the warm-up's own blocks
    assert "tgi_warmup_prompt_over_total" not in b.warnings
    # without --max-input-tokens the one warm-up request (8,315 tokens) is longer than
    # max_total_tokens: the router's u32 subtraction wraps, which the budget says it cannot price
    uncapped = compute_budget(mistral, BudgetInputs(engine="tgi", engine_version="3.3.4", gpu_total_gib=22.07,
                                                    gpu_name="NVIDIA A10G", max_total_tokens=8192))
    assert "tgi_warmup_prompt_over_total" in uncapped.warnings


def test_speculation_turns_chunking_off_and_adds_its_tokens_to_each_warm_up_request():
    from runbooks.model.evidence import ServerConfig

    llama = find_model("meta-llama/Llama-3.1-8B-Instruct")
    assert tgi_prefill_chunking((3, 3, 7), llama, None, None, 2) == (False, "--speculate 2")
    cfg = ServerConfig(source="test", engine="tgi", engine_version="3.3.7", flags={"--speculate": "2"})
    inputs = inputs_from_config(cfg, 22.07, "NVIDIA A10G")
    assert inputs.tgi_speculate == 2
    sped = compute_budget(llama, inputs)
    assert sped.assumption("max_total_tokens").why == "tgi3_unchunked_total"
    assert sped.max_model_len == 8315  # the warm-up's own tokens
    given = dict(engine="tgi", engine_version="3.3.7", gpu_total_gib=22.07, gpu_name="NVIDIA A10G",
                 cuda_memory_fraction=0.7, max_total_tokens=4096, max_input_tokens=2048)
    plain, two = (compute_budget(llama, BudgetInputs(**given, tgi_speculate=n)) for n in (0, 2))
    # at 0.7 the launcher's memory estimate caps the prefill at 5,031 tokens (22,599 MiB x 0.7 x
    # 0.95 in f32, less its 14,449,770,496-byte weight estimate, over 260,096 bytes): three warm-up
    # requests (2048, 2048, 935), and the reserve leaves nothing after them, so the cache is
    # their blocks, 4095 tokens each, and 2 more each under --speculate 2
    assert plain.max_num_batched_tokens == 5031
    assert (plain.kv_cache_tokens, two.kv_cache_tokens) == (3 * 4095, 3 * 4097)


def test_an_unnamed_gpu_says_the_fallback_is_assumed_not_that_tgi_lacks_the_card():
    assert tgi_default_prefill((3, 3, 7), LLAMA8_CFG, None, 1, None, 1.0) == (4096, "tgi_prefill_card_unnamed", {})
    llama = find_model("meta-llama/Llama-3.1-8B-Instruct")
    b = compute_budget(llama, BudgetInputs(engine="tgi", engine_version="3.3.7", gpu_total_gib=79.19))
    assert b.assumption("max_batch_prefill_tokens").why == "tgi_prefill_card_unnamed"


def test_flashinfer_workspaces_are_held_through_tgi_3s_warm_up_and_cost_their_tokens(monkeypatch):
    # one shared 128 MiB float workspace and three wrappers' 8 MiB int workspaces
    # (layers/attention/flashinfer.py:27@v3.0.0; flashinfer prefill.py:600, :1268, decode.py:328@v0.1.6)
    import runbooks.sizing.tgi as tgi_sizing

    llama = find_model("meta-llama/Llama-3.1-8B-Instruct")
    inputs = BudgetInputs(engine="tgi", engine_version="3.0.0", gpu_total_gib=22.06, gpu_name="L4")
    paged = compute_budget(llama, replace(inputs, block_size=16))  # ATTENTION=paged: no FlashInfer
    flashinfer = compute_budget(llama, inputs)
    monkeypatch.setattr(tgi_sizing, "TGI_FLASHINFER_BUFFERS_BYTES", 0)
    unpriced = compute_budget(llama, inputs)
    assert flashinfer.block_size == 1
    assert flashinfer.activation_gib - unpriced.activation_gib == pytest.approx(152 / 1024)
    assert paged.activation_gib == pytest.approx(unpriced.activation_gib)
    # 152 MiB at 128 KiB a token (32 layers x 8 KV heads x 128 x 2 x 2 bytes) is 1,216 tokens
    assert unpriced.kv_cache_tokens - flashinfer.kv_cache_tokens == 1216


def test_every_budget_from_tgi_2_1_warns_that_its_kv_figure_is_above_the_figures_it_was_held_to():
    llama = find_model("meta-llama/Llama-3.1-8B-Instruct")
    for version, warned in (("2.0.4", False), ("2.1.0", True), ("2.4.1", True), ("3.0.0", True), ("3.3.7", True)):
        b = compute_budget(llama, BudgetInputs(engine="tgi", engine_version=version, gpu_total_gib=79.19,
                                               gpu_name="H100"))
        assert ("tgi_kv_optimistic" in b.warnings) is warned, version


def test_the_tgi_warning_quotes_the_calibration_tables_own_errors():
    from bot.render.i18n import Catalog

    cases = {c["id"]: c for c in load_cases()}
    errors = []
    for case_id in ("tgi-llama3-8b-class-a10g", "tgi-docs-v3-llama31-8b-l4", "tgi-gemma3-27b-2xa6000-3.3"):
        row, _ = run_case(cases[case_id])
        errors.append(round(row.kv_err * 100))
    for lang in ("en", "zh"):
        text = Catalog.load(lang).t("budget_cli.warning.tgi_kv_optimistic")
        assert [int(n) for n in re.findall(r"(\d+)%", text)] == errors, lang


def test_the_plan_previews_and_triages_shortfall_is_the_calibration_tables_largest():
    """"up to 43% less" (plan previews, docs/triage.md) is the worst of the three start-ups."""
    from bot.render.i18n import Catalog

    cases = {c["id"]: c for c in load_cases()}
    shortfalls = []
    for case_id in ("tgi-llama3-8b-class-a10g", "tgi-docs-v3-llama31-8b-l4", "tgi-gemma3-27b-2xa6000-3.3"):
        row, _ = run_case(cases[case_id])
        shortfalls.append(round((1 - 1 / (1 + row.kv_err)) * 100))
    for lang in ("en", "zh"):
        text = Catalog.load(lang).t("plan_preview.note.tgi_kv_optimistic_preview")
        assert [int(n) for n in re.findall(r"(\d+)%", text)] == [max(shortfalls)], lang
    triage_doc = (Path(__file__).resolve().parent.parent / "docs" / "triage.md").read_text()
    assert f"print {min(shortfalls)}-{max(shortfalls)}% less cache" in triage_doc


def test_tgi_2_1_to_2_4_0_counts_no_warm_up_blocks_back_when_every_request_stops_at_once():
    # (flash_causal_lm.py:1117, :349-353@v2.2.0): requests of max_total - 1 ask for one new token,
    # stop after the prefill, and generate_token returns no batch whose blocks could be counted
    llama = find_model("meta-llama/Llama-3.1-8B-Instruct")

    def tokens(version, prefill):
        b = compute_budget(llama, BudgetInputs(engine="tgi", engine_version=version, gpu_total_gib=79.19,
                                               gpu_name="H100", max_input_tokens=4095, max_total_tokens=4096,
                                               max_batch_prefill_tokens=prefill))
        return b.kv_cache_tokens, "tgi_warmup_blocks_not_counted" in b.warnings

    # one request of 4,095 tokens holds 256 blocks of 16, 4,096 tokens, no longer counted back
    assert tokens("2.2.0", 4095)[1]
    assert tokens("2.0.4", 4095)[0] - tokens("2.2.0", 4095)[0] == 4096
    # two such requests: 8,192 tokens
    assert tokens("2.2.0", 8190)[1] and tokens("2.0.4", 8190)[0] - tokens("2.2.0", 8190)[0] == 8192
    # a 50-token remainder request asks for 4,046 new tokens and survives: all blocks counted, as before 2.1
    assert tokens("2.2.0", 4145) == (tokens("2.0.4", 4145)[0], False)
    # from 2.4.1 the blocks are read before the warm-up step
    assert tokens("2.4.0", 4095)[1] and not tokens("2.4.1", 4095)[1]


def _gemma3(version: str, **kw) -> object:
    gemma = find_model("google/gemma-3-27b-it")
    return compute_budget(gemma, BudgetInputs(
        engine="tgi", engine_version=version, gpu_total_gib=79.10, gpu_name="H100", tp=4, max_input_tokens=32000,
        max_total_tokens=64000, max_batch_prefill_tokens=32000, **kw))


def test_gemma3_on_tgi_3_2_holds_sdpas_float32_scores_and_fails_its_32k_warm_up_as_3105_did():
    """3.2.x runs Gemma 3's image-masked prefill through SDPA's float32 math path: scores and their
    softmax over 8 heads a shard, 32,000 x 32,001 each, the 30.52 GiB #3105's warm-up fails to get."""
    on_32, on_33 = _gemma3("3.2.0"), _gemma3("3.3.0")
    scores = 8 * 32000 * 32001 * 4 / 2**30
    assert round(scores, 2) == 30.52
    masks = 2 * 32000 * 32001 * 2 / 2**30  # the global and sliding-window masks, bf16
    # the scores and their softmax replace the MLP's smaller peak; the masks are on top of both
    from runbooks.sizing.activation import forward_peak_bytes
    mlp = forward_peak_bytes(find_model("google/gemma-3-27b-it"), 32000, 4, None, unfused_act=True) / 2**30
    assert mlp < 2 * scores
    assert on_32.activation_gib - on_33.activation_gib == pytest.approx(2 * scores - mlp)
    assert on_32.failure_id == "tgi_prefill_oom"
    # from 3.3.0 FlashInfer takes the masked prefill: the masks alone, and the warm-up fits
    assert on_33.failure_id is None and on_33.block_size == 1
    plain = compute_budget(find_model("google/gemma-3-27b-it"), BudgetInputs(
        engine="tgi", engine_version="3.3.0", gpu_total_gib=79.10, gpu_name="H100", tp=4, max_input_tokens=32000,
        max_total_tokens=64000, max_batch_prefill_tokens=32000))
    assert on_33.activation_gib == pytest.approx(plain.activation_gib)
    import runbooks.sizing.tgi as tgi_sizing
    masks_of_33, scores_of_33 = tgi_sizing.gemma3_warmup_attention_bytes(
        find_model("google/gemma-3-27b-it"), (3, 3, 0), [32000], 4, 2, 1, tgi_sizing.Notes())
    assert (round(masks_of_33 / 2**30, 3), scores_of_33) == (round(masks, 3), 0.0)


def test_gemma3_under_paged_attention_on_tgi_3_3_says_its_sdpa_is_not_priced():
    paged = _gemma3("3.3.4", block_size=16)
    assert "tgi_gemma3_sdpa_unpriced" in paged.warnings
    assert "tgi_gemma3_sdpa_unpriced" not in _gemma3("3.3.4").warnings  # FlashInfer
    assert "tgi_gemma3_sdpa_unpriced" not in _gemma3("3.2.1").warnings  # priced


def test_other_models_are_untouched_by_the_gemma3_masks():
    import runbooks.sizing.tgi as tgi_sizing
    llama = find_model("meta-llama/Llama-3.1-8B-Instruct")
    assert tgi_sizing.gemma3_warmup_attention_bytes(llama, (3, 2, 0), [32000], 1, 2, 1, tgi_sizing.Notes()) == (0, 0)
    gemma = find_model("google/gemma-3-27b-it")
    assert tgi_sizing.gemma3_warmup_attention_bytes(gemma, (3, 1, 1), [8000], 2, 2, 1, tgi_sizing.Notes()) == (0, 0)
