"""The capacity budget against real start-up logs of vLLM, SGLang and TGI.

Targets: KV capacity within 5% median and 10% worst, weights within 3%, every reported
start-up failure predicted with the same failure id. The per-case table is
`tests.support.calibration_report.calibration_table()`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runbooks.model.budget import FAILURE_IDS
from tests.support.calibration_report import (
    EXCLUDED,
    INPUT_NOTES,
    KV_MEDIAN_TARGET,
    KV_METRIC,
    KV_WORST_TARGET,
    WEIGHTS_TARGET,
    calibration_table,
    case_inputs,
    load_cases,
    rows,
    run_case,
    summary,
)

CASES = load_cases()


@pytest.fixture(scope="module")
def table():
    print("\n" + calibration_table())
    return rows()


def test_every_case_runs_through_the_budget(table):
    assert len(table) == len(CASES) == 45


def test_kv_capacity_median_error_is_within_5_percent(table):
    s = summary(table)
    assert s["kv_cases"] >= 14
    assert s["kv_median"] <= KV_MEDIAN_TARGET


def test_kv_capacity_worst_error_is_within_10_percent(table):
    worst = {r.case_id: r.kv_err for r in table if r.kv_gated and abs(r.kv_err) > KV_WORST_TARGET}
    assert worst == {}


def test_weights_are_within_3_percent(table):
    off = {r.case_id: r.weights_err for r in table if r.weights_gated and abs(r.weights_err) > WEIGHTS_TARGET}
    assert off == {}
    assert summary(table)["weights_cases"] >= 15


def test_reported_start_up_failures_are_predicted_with_the_same_id(table):
    failed = [r for r in table if r.failure_rep and r.failure_gated]
    # the Qwen1.5 GPTQ refusal and gpt-oss-120b on an H100 (Marlin on 0.11) joined; then two Gemma 3
    # warm-ups on TGI 3.2 (SDPA's float32 scores) and Llama 3.1 70B's 131k prefill on TGI 2.2
    assert len(failed) == 13
    for r in failed:
        assert r.failure_rep in FAILURE_IDS
        assert r.failure_pred == r.failure_rep, r.case_id


def test_cases_that_started_are_predicted_to_start(table):
    assert {r.case_id: r.failure_pred for r in table if not r.failure_rep and r.failure_pred} == {}


def test_predicted_failure_text_carries_the_engines_numbers():
    case = next(c for c in CASES if c["id"] == "file-llama31-8b-24gb-131k-fail")
    _, budget = run_case(case)
    assert budget.failure.startswith("The model's max seq len (131072) is larger than the maximum number of "
                                     "tokens that can be stored in KV cache (")
    assert budget.kv_cache_tokens == pytest.approx(37696, rel=0.02)


def test_exclusions_and_input_notes_name_known_cases_and_reasons():
    ids = {c["id"] for c in CASES}
    for case_id, reasons in EXCLUDED.items():
        assert case_id in ids
        assert set(reasons) <= {"kv", "weights", "failure"}
        assert all(len(why) > 40 for why in reasons.values())
    for case_id, (inputs, why) in INPUT_NOTES.items():
        assert case_id in ids and inputs and why
    for case_id, (metric, why) in KV_METRIC.items():
        assert case_id in ids and metric == "kv_cache_gib" and why


def test_every_figure_left_out_of_the_gate_is_listed_with_a_reason(table):
    for r in table:
        if r.kv_rep is not None and not r.kv_gated:
            assert "kv" in EXCLUDED.get(r.case_id, {}), r.case_id
        if r.weights_rep is not None and not r.weights_gated:
            assert "weights" in EXCLUDED.get(r.case_id, {}), r.case_id
        if r.failure_rep and not r.failure_gated:
            assert "failure" in EXCLUDED.get(r.case_id, {}), r.case_id


def test_cases_from_the_real_incident_corpus_name_a_stored_folder():
    real = Path(__file__).parent / "data" / "real"
    cited = [re.search(r"tests/data/real/([\w.\-]+)", c["source"]) for c in CASES]
    folders = [m.group(1) for m in cited if m]
    assert len(folders) == 6
    for folder in folders:
        assert (real / folder / "source.md").is_file(), folder


def test_tgi_1x_inferred_batch_budget_matches_the_reported_16224_tokens():
    case = next(c for c in CASES if c["id"] == "tgi-653-llama2-7b-a10g-inferred")
    _, budget = run_case(case)
    assert budget.regime == "tgi-1"
    assert budget.max_batch_total_tokens == budget.kv_cache_tokens
    # TGI 0.9.4 gives the cache all the free memory (no wiggle room before 1.4.1): 17,120
    # predicted, +5.5%, inside the worst-case target (a 0.95 share would read lower, but that
    # share is not in this release's source)
    assert budget.kv_cache_tokens == 17120
    assert budget.kv_cache_tokens == pytest.approx(16224, rel=KV_WORST_TARGET)


def test_the_405b_fp8_start_up_ran_the_16_kv_head_checkpoint():
    from dataclasses import replace

    from runbooks.sizing.budget import compute_budget
    from tests.support.calibration_report import case_inputs

    case = next(c for c in CASES if c["id"] == "vllm-6746-llama31-405b-fp8-8xh100-fail")
    model, inputs = case_inputs(case)
    assert model.num_kv_heads == 16
    _, budget = run_case(case)
    # the extra K and V projections are the 1 GiB per rank the 8-head catalog entry missed
    assert budget.weights_gib == pytest.approx(case["reported"]["weights_gib"], rel=0.005)
    assert budget.kv_bytes_per_token == 126 * 2 * 2 * 128 * 2  # two KV heads per rank at TP 8
    assert budget.failure_id == "kv_below_one_sequence"
    as_published_now = compute_budget(replace(model, num_kv_heads=8, num_params=405.85e9), inputs)
    assert as_published_now.failure_id is None
    assert as_published_now.weights_gib < budget.weights_gib - 0.9


def test_mxfp4_experts_are_padded_for_the_kernel_that_runs_them():
    # vLLM runs gpt-oss's MXFP4 experts through Marlin on an A100 (2880 padded to 2944 and 3072),
    # through Marlin on an H100 before 0.12 (triton_kernels was a separate install) and through
    # Triton on an H100 from 0.12 (no padding at 2880; 1440 at TP 2 padded to 1472)
    from runbooks.catalogs.models import find_model
    from runbooks.model.units import GIB
    from runbooks.sizing.weights import mxfp4_moe_kernel, mxfp4_padding_bytes

    kernels = {(c, v): mxfp4_moe_kernel(c, v)[0] for c, v in (
        ((8, 0), (0, 19, 0)), ((9, 0), (0, 10, 1)), ((9, 0), (0, 11, 2)), ((9, 0), (0, 12, 0)),
        ((10, 0), (0, 14, 1)), ((12, 0), (0, 14, 1)), ((12, 0), (0, 11, 0)))}
    assert list(kernels.values()) == ["marlin", "marlin", "marlin", "triton", "triton", "marlin", "marlin"]
    # only 9.0 and up before 0.12 is an assumption (triton_kernels may have been installed by hand)
    assert [mxfp4_moe_kernel(c, v)[1] is not None for c, v in kernels] == [False, True, True, False, False, False, True]
    assert mxfp4_moe_kernel(None, (0, 12, 0)) == (None, None)
    model = find_model("openai/gpt-oss-20b")
    assert mxfp4_padding_bytes(model, None, "marlin") / GIB == pytest.approx(0.85, abs=0.01)
    assert mxfp4_padding_bytes(model, None, "triton") == 0.0
    assert mxfp4_padding_bytes(model, None, "triton", tp=2) / GIB == pytest.approx(
        model_experts_gib(model) / 2 * (1472 / 1440 - 1), rel=1e-6)
    assert mxfp4_padding_bytes(model, None, None) == 0.0
    assert mxfp4_padding_bytes(find_model("Qwen/Qwen2.5-7B-Instruct"), "mxfp4", "marlin") == 0.0


def model_experts_gib(model):
    from runbooks.model.units import GIB
    from runbooks.sizing.weights import param_breakdown, quantized_bytes_per_param

    return param_breakdown(model).experts * quantized_bytes_per_param("mxfp4", 4) / GIB


def test_gpt_oss_120b_on_an_h100_before_0_12_loads_the_marlin_padded_weights():
    # vllm#23278: 0.10.1 on one H100 prints the Marlin warning and "Model loading took 65.9651 GiB";
    # from 0.12 the same card runs Triton and the weights are the checkpoint's
    case = next(c for c in CASES if c["id"] == "vllm-27508-gpt-oss-120b-h100-fail")
    model, inputs = case_inputs(case)
    from dataclasses import replace

    from runbooks.sizing.budget import compute_budget

    old = compute_budget(model, replace(inputs, engine_version="0.10.1"))
    assert old.weights_gib == pytest.approx(65.97, rel=0.01)
    assert dict(old.assumptions)["mxfp4_moe_kernel"].value == "marlin"
    new = compute_budget(model, replace(inputs, engine_version="0.12.0"))
    assert new.weights_gib == pytest.approx(old.weights_gib - 5.13, abs=0.02)
    assert "mxfp4_moe_kernel" not in dict(new.assumptions)
    # the start-up of the thread itself (0.11.0, the cache 1.71 GiB for the 4.54 one sequence needs) is refused
    assert compute_budget(model, inputs).failure_id == "kv_below_one_sequence"


def test_the_a100_start_up_of_the_second_batch_prints_what_the_padded_figure_says():
    case = next(c for c in CASES if c["id"] == "vllm-myoceane-gpt-oss-20b-a100")
    row, _ = run_case(case)
    assert row.weights_err == pytest.approx(0.0, abs=0.01)
