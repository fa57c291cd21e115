"""Which vLLM engine (V0 or V1) a launch runs: by version, VLLM_USE_V1 and the GPU's compute
capability, and how the CLI, a Deployment and a what-if select it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.main import main
from collectors.parsers.kube_objects import parse_deployment
from runbooks.catalogs.engine_defaults import vllm_engine, vllm_regime
from runbooks.catalogs.gpus import find_gpu
from runbooks.catalogs.models import find_model
from runbooks.model.budget import Assumed
from runbooks.sizing.budget import BudgetInputs, compute_budget, inputs_from_config
from runbooks.sizing.conflicts import find_conflicts
from runbooks.sizing.whatif import apply_what_if, parse_what_if

QWEN15 = find_model("Qwen/Qwen2.5-1.5B-Instruct")


def vllm(model=QWEN15, **kw):
    kw.setdefault("gpu_name", "T4")
    kw.setdefault("gpu_total_gib", find_gpu(kw["gpu_name"]).total_gib if kw["gpu_name"] else 14.56)
    kw.setdefault("max_model_len", 4096)
    return compute_budget(model, BudgetInputs(engine="vllm", **kw))


@pytest.mark.parametrize(("version", "use_v1", "cc", "engine"), [
    ((0, 7, 3), None, (8, 0), "v0"),  # V1 only opt-in before 0.8
    ((0, 7, 3), True, (8, 0), "v1"),
    ((0, 8, 0), None, (8, 0), "v1"),  # V1 the default from 0.8.0
    ((0, 8, 5), None, (7, 5), "v0"),  # T4: falls back to V0
    ((0, 10, 1), None, (7, 0), "v0"),  # V100: still V0 in 0.10.1
    ((0, 10, 2), None, (7, 5), "v1"),  # 0.10.2 runs V1 below 8.0 (FlexAttention)
    ((0, 9, 2), False, (9, 0), "v0"),  # VLLM_USE_V1=0
    ((0, 11, 0), False, (9, 0), "v1"),  # V0 removed
    ((0, 9, 2), None, None, "v1"),  # GPU unknown: taken as able to run V1
])
def test_engine_follows_version_switch_and_compute_capability(version, use_v1, cc, engine):
    assert vllm_engine(version, use_v1, cc)[0] == engine


def test_t4_on_0_8_runs_the_v0_arithmetic_and_says_why():
    auto = vllm(engine_version="0.8.5")
    forced = vllm(engine_version="0.8.5", use_v1=False)
    assert auto.regime == forced.regime == "vllm-v0"
    assert auto.kv_cache_tokens == forced.kv_cache_tokens
    assert auto.assumption("vllm_engine") == Assumed("V0", "vllm_v0_below_cc80")
    # V0 defaults, not V1's: 256 sequences, max(max_model_len, 2048) tokens per step, no chunked prefill
    assert (auto.max_num_seqs, auto.max_num_batched_tokens) == (256, 4096)
    assert auto.weights_gib == pytest.approx(2.88, abs=0.01)
    assert auto.kv_cache_tokens == 324_304


def test_the_same_launch_on_an_ampere_card_runs_v1():
    b = vllm(engine_version="0.8.5", gpu_name="A10G")
    assert b.regime == "vllm-v1-08"
    assert b.assumption("vllm_engine") == Assumed("V1", "vllm_v1_from_08")
    assert (b.max_num_seqs, b.max_num_batched_tokens) == (256, 2048)


def test_from_0_10_2_a_t4_runs_v1():
    b = vllm(engine_version="0.10.2")
    assert b.regime == "vllm-v1"
    assert b.assumption("vllm_engine") is None  # nothing to explain: the version's only choice


def test_unknown_gpu_assumes_v1_and_says_so():
    b = vllm(engine_version="0.9.2", gpu_name=None, gpu_total_gib=14.56)
    assert b.regime == "vllm-v1"
    assert b.assumption("vllm_engine") == Assumed("V1", "vllm_gpu_unknown_cc80")


def test_v0_switch_after_0_11_is_ignored_with_a_warning():
    b = vllm(engine_version="0.11.0", gpu_name="A100 80GB", use_v1=False)
    assert b.regime == "vllm-v1"
    assert "vllm_v0_removed" in b.warnings


def test_v1_forced_below_compute_capability_8_is_a_fatal_conflict():
    inputs = BudgetInputs(engine="vllm", gpu_total_gib=14.56, engine_version="0.9.2", use_v1=True, gpu_name="T4")
    conflicts = find_conflicts(QWEN15, inputs, find_gpu("T4"))
    assert [(c.id, c.fatal, c.params) for c in conflicts] == [
        ("vllm_v1_needs_compute_capability_8", True, {"gpu": "T4", "have": "7.5"})]
    assert find_conflicts(QWEN15, replace(inputs, engine_version="0.10.2"), find_gpu("T4")) == ()
    assert find_conflicts(QWEN15, replace(inputs, gpu_name="A10G"), find_gpu("A10G")) == ()


def test_v1_opt_in_on_0_7_counts_other_processes_like_0_8():
    alone = vllm(model=find_model("TinyLlama/TinyLlama-1.1B-Chat-v1.0"), engine_version="0.7.3", use_v1=True,
                 gpu_name="L40S", gpu_memory_utilization=0.2, max_model_len=1024)
    second = vllm(model=find_model("TinyLlama/TinyLlama-1.1B-Chat-v1.0"), engine_version="0.7.3", use_v1=True,
                  gpu_name="L40S", gpu_memory_utilization=0.2, max_model_len=1024, other_process_gib=9.21)
    assert alone.regime == second.regime == "vllm-v1-08"
    # 0.7.3's V1 profile computes the logits of its 1024 dummy requests and runs no sampler
    # (gpu_model_runner.py:1296-1306@0.7.3): the forward over 2048 tokens is the peak
    assert alone.max_num_seqs == 1024 and alone.max_num_batched_tokens == 2048
    assert alone.activation_gib == pytest.approx(2048 * 2 * (3 * 2048 + 3 * 5632) / 2**30)
    assert alone.fits and alone.kv_cache_tokens == 300_912
    assert second.failure_id == "no_cache_blocks"


def test_deployment_env_vllm_use_v1_selects_v0():
    text = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: qwen}
spec:
  template:
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.9.2
        args: ["--model", "Qwen/Qwen2.5-1.5B-Instruct", "--max-model-len", "4096"]
        env:
        - {name: VLLM_USE_V1, value: "0"}
"""
    _, config = parse_deployment(text, "deployment.yaml")
    inputs = inputs_from_config(config, 79.15, "A100-SXM4-80GB")
    assert inputs.use_v1 is False
    assert compute_budget(QWEN15, inputs).regime == "vllm-v0"


def test_what_if_switches_the_engine():
    base = BudgetInputs(engine="vllm", gpu_total_gib=79.15, engine_version="0.9.2", gpu_name="A100-SXM4-80GB",
                        max_model_len=4096)
    after, applied = apply_what_if(base, parse_what_if("VLLM_USE_V1=0"))
    assert applied == {"vllm-use-v1": False}
    assert compute_budget(QWEN15, base).regime == "vllm-v1"
    assert compute_budget(QWEN15, after).regime == "vllm-v0"


def _cli(capsys, *argv):
    rc = main(["budget", *argv, "--json", "--lang", "en"])
    return rc, json.loads(capsys.readouterr().out)


def test_cli_vllm_engine_flag_selects_the_engine(capsys):
    common = ("--engine", "vllm", "--model", "Qwen/Qwen2.5-1.5B-Instruct", "--gpu", "A100-80GB",
              "--engine-version", "0.9.2", "--max-model-len", "4096")
    rc, v1 = _cli(capsys, *common)
    assert rc == 0 and v1["regime"] == "vllm-v1"
    rc, v0 = _cli(capsys, *common, "--vllm-engine", "v0")
    assert rc == 0 and v0["regime"] == "vllm-v0"
    assert v0["assumptions"]["vllm_engine"] == "V0 (VLLM_USE_V1=0)"


def test_cli_forcing_v1_on_a_t4_exits_2_with_the_conflict(capsys):
    rc, doc = _cli(capsys, "--engine", "vllm", "--model", "Qwen/Qwen2.5-1.5B-Instruct", "--gpu", "T4",
                   "--engine-version", "0.8.5", "--max-model-len", "4096", "--vllm-engine", "v1")
    assert rc == 2
    assert [c["id"] for c in doc["conflicts"]] == ["vllm_v1_needs_compute_capability_8"]
    assert "Compute Capability < 8.0" in doc["conflicts"][0]["text"]


_OLD_GPUS = [g for g in ("T4", "V100", "V100-32GB") if find_gpu(g).compute_capability < (8, 0)]
_V1_AMPERE_ONLY = ["0.8.0", "0.8.5", "0.9.0", "0.9.2", "0.10.0", "0.10.1"]


@settings(max_examples=40, deadline=None)
@given(gpu=st.sampled_from(_OLD_GPUS), version=st.sampled_from(_V1_AMPERE_ONLY),
       length=st.sampled_from([2048, 4096, 8192]), util=st.sampled_from([None, 0.8, 0.95]))
def test_below_ampere_the_default_is_exactly_the_v0_budget(gpu, version, length, util):
    kw = {"engine_version": version, "gpu_name": gpu, "max_model_len": length, "gpu_memory_utilization": util}
    auto, v0 = vllm(**kw), vllm(use_v1=False, **kw)
    assert auto.regime == "vllm-v0"
    assert (auto.kv_cache_tokens, auto.weights_gib, auto.activation_gib) == (
        v0.kv_cache_tokens, v0.weights_gib, v0.activation_gib)
    assert vllm_regime(tuple(int(p) for p in version.split(".")), None, find_gpu(gpu).compute_capability) == "v0"


def test_the_budget_page_documents_the_engine_flag():
    page = (Path(__file__).resolve().parent.parent / "docs" / "budget.md").read_text()
    assert "--vllm-engine v0" in page and "`--vllm-engine v0\\|v1`" in page


def test_v1_batch_defaults_by_version_and_card():
    """vllm/engine/arg_utils.py: no A100 exception in 0.8.5 (:1596), one from 0.9.0 (:1495), the
    >= 160 GiB tier from 0.28.0 (:2582; absent in 0.27.0), GB10 excepted from 0.33.0 (:2963)."""
    from runbooks.catalogs.engine_defaults import vllm_v1_limits

    def limits(version, gib, name):
        return vllm_v1_limits(version, gib, name)[:2]

    # before 0.8.5 the device's name decides: 8192 tokens only on H100/H200, 1024 sequences on
    # every card until 0.8.3 (arg_utils.py:1281@0.7.0, :1693@0.8.0, :1669-1682@0.8.4)
    assert limits((0, 7, 1), 79.11, "NVIDIA H100 80GB HBM3") == (1024, 8192)
    assert limits((0, 7, 1), 79.15, "NVIDIA A100-SXM4-80GB") == (1024, 2048)
    assert limits((0, 8, 0), 44.4, "NVIDIA L40S") == (1024, 2048)
    assert limits((0, 8, 4), 44.4, "NVIDIA L40S") == (256, 2048)
    assert limits((0, 8, 4), 139.8, "NVIDIA H200") == (1024, 8192)
    assert limits((0, 8, 4), 79.11, None) == (1024, 8192)
    assert limits((0, 8, 5), 79.15, "NVIDIA A100-SXM4-80GB") == (1024, 8192)
    assert limits((0, 9, 0), 79.15, "NVIDIA A100-SXM4-80GB") == (256, 2048)
    assert limits((0, 9, 0), 79.19, "NVIDIA H100 80GB HBM3") == (1024, 8192)
    assert limits((0, 27, 0), 178.4, "NVIDIA B200") == (1024, 8192)
    assert limits((0, 28, 0), 178.4, "NVIDIA B200") == (1024, 16384)
    assert limits((0, 32, 0), 119.7, "NVIDIA GB10") == (1024, 8192)
    assert limits((0, 33, 0), 119.7, "NVIDIA GB10") == (256, 2048)
    assert limits((0, 33, 0), 44.4, "NVIDIA L40S") == (256, 2048)


def test_v1_profile_peak_by_release_logits_of_every_token_then_of_each_request_then_the_sampler():
    """V1 0.7.0-0.7.2 profile the logits of all max_num_batched_tokens dummy tokens, 0.7.3 those
    of the max_num_seqs requests' last tokens, both without the sampler; 0.8.0 runs it."""
    model = find_model("meta-llama/Llama-3.1-8B-Instruct")
    kw = {"model": model, "use_v1": True, "gpu_name": "H100", "gpu_total_gib": 79.11, "max_model_len": 8192}
    early, later, sampled = (vllm(engine_version=v, **kw) for v in ("0.7.1", "0.7.3", "0.8.0"))
    assert early.max_num_batched_tokens == later.max_num_batched_tokens == sampled.max_num_batched_tokens == 8192
    hidden = 8192 * 4096 * 2
    assert early.activation_gib * 2**30 == pytest.approx(8192 * 128256 * 2 + hidden)
    assert later.activation_gib * 2**30 == pytest.approx(
        max(8192 * 2 * (3 * 4096 + 3 * 14336), 1024 * 128256 * 2 + hidden))
    assert sampled.activation_gib > early.activation_gib > later.activation_gib
    assert early.kv_cache_gib < later.kv_cache_gib
