"""`gpumem budget`: the documented JSON keys with the budget's own values, flags from a
Deployment, what-if, the safe-flag plan, contradictions, bad names, in English and Chinese."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bot.main import main
from collectors.access_logs.fast import scan_access_log
from collectors.parsers.model_config import load_model_config
from runbooks.catalogs.models import find_model
from runbooks.model.budget import BudgetInputs
from runbooks.remediation.solver import solve_safe_flags
from runbooks.sizing.budget import compute_budget
from tests.support import words

ROOT = Path(__file__).resolve().parent.parent
INCIDENT = ROOT / "examples" / "runbook-incident"
KUBE = ROOT / "tests" / "data" / "kube"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
DOCUMENTED = ("weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib", "kv_cache_gib", "kv_bytes_per_token",
              "kv_cache_tokens", "max_concurrency", "fits", "failure", "assumptions")
INCIDENT_FLAGS = ("--engine", "vllm", "--model", QWEN, "--gpu", "A100-80GB", "--engine-version", "0.6.6",
                  "--max-model-len", "8192", "--max-num-seqs", "128", "--gpu-memory-utilization", "0.95")
INCIDENT_INPUTS = BudgetInputs(engine="vllm", gpu_total_gib=79.15, engine_version="0.6.6", max_model_len=8192,
                               max_num_seqs=128, gpu_memory_utilization=0.95, gpu_name="A100-SXM4-80GB")


def _run(capsys, *argv: str, lang: str = "en") -> tuple[int, str, str]:
    try:
        rc = main(["budget", *argv, "--lang", lang])
    except SystemExit as e:  # argparse refused a flag's value: exit 2 with its usage line
        rc = e.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _json(capsys, *argv: str) -> tuple[int, dict]:
    rc, out, _ = _run(capsys, *argv, "--json")
    return rc, json.loads(out)


def _same_budget(doc: dict, budget) -> None:
    for key in DOCUMENTED[:-1]:
        value = getattr(budget, key)
        assert doc[key] == (round(value, 4) if isinstance(value, float) else value), key
    assert doc["assumption_reasons"] == {name: {"value": a.value, "why": a.why, "params": dict(a.params)}
                                         for name, a in budget.assumptions}
    assert set(doc["assumptions"]) == set(doc["assumption_reasons"])


def test_json_has_the_documented_keys_with_the_budgets_values(capsys):
    rc, doc = _json(capsys, *INCIDENT_FLAGS)
    assert rc == 0
    budget = compute_budget(find_model(QWEN), INCIDENT_INPUTS)
    _same_budget(doc, budget)
    assert set(DOCUMENTED) <= set(doc)
    assert (doc["max_concurrency"], doc["max_model_len"], doc["fits"], doc["failure"]) == (
        round(budget.kv_cache_tokens / 8192, 4), 8192, True, None)
    assert doc["assumptions"]["block_size"] == "16 (vLLM default on CUDA)"
    assert "gpu_memory_utilization" not in doc["assumptions"]  # it was given


def test_text_leads_with_the_verdict_and_splits_one_gpus_memory(capsys):
    rc, out, _ = _run(capsys, *INCIDENT_FLAGS)
    assert rc == 0
    budget = compute_budget(find_model(QWEN), INCIDENT_INPUTS)
    assert out.startswith("gpumem budget · vllm 0.6.6 (vllm-v0) · Qwen/Qwen2.5-7B-Instruct · A100-SXM4-80GB, "
                          "79.15 GiB per GPU · TP 1 × PP 1\n")
    # the cache holds 136.84 requests of 8192; --max-num-seqs 128 caps what runs at once
    assert budget.max_concurrency == pytest.approx(136.84, abs=0.01)
    assert (f"== Verdict: starts. KV cache {budget.kv_cache_gib:.2f} GiB = {budget.kv_cache_tokens:,} tokens; "
            "128 requests at once (capped by --max-num-seqs 128; the KV cache holds 136 requests of 8192 "
            "tokens)") in out
    assert f"  weights                             {budget.weights_gib:.2f} GiB" in out
    assert "engine budget 75.19 GiB of 79.15 GiB (--gpu-memory-utilization 0.95)" in out
    assert "  - block_size = 16 (vLLM default on CUDA)" in out
    assert "L+XL: pass --profile ACCESS_LOG" in out


def test_text_in_chinese(capsys):
    rc, out, _ = _run(capsys, *INCIDENT_FLAGS, lang="zh")
    assert rc == 0
    assert "== 结论：可以启动。KV 缓存" in out
    assert "== 单卡显存分布" in out and "  权重" in out
    assert "引擎预算 75.19 GiB / 整卡 79.15 GiB（--gpu-memory-utilization 0.95）" in out


def test_flags_and_gpu_come_from_the_deployment(capsys):
    rc, doc = _json(capsys, "--from-deployment", str(INCIDENT / "deployment.yaml"))
    assert rc == 0
    assert (doc["engine"], doc["engine_version"], doc["model"], doc["gpu"]) == (
        "vllm", "0.6.6", QWEN, "A100-SXM4-80GB")
    assert [n["id"] for n in doc["notes"]] == ["gpu_from_deployment"]
    _same_budget(doc, compute_budget(find_model(QWEN), INCIDENT_INPUTS))


def test_command_line_flags_override_the_deployment(capsys):
    rc, doc = _json(capsys, "--from-deployment", str(INCIDENT / "deployment.yaml"), "--max-num-seqs", "32",
                    "--gpu-memory-utilization", "0.9")
    assert rc == 0
    assert (doc["max_num_seqs"], doc["budget_gib"]) == (32, round(0.9 * 79.15, 4))
    _same_budget(doc, compute_budget(find_model(QWEN), replace(INCIDENT_INPUTS, max_num_seqs=32,
                                                               gpu_memory_utilization=0.9)))


def test_mig_deployment_budgets_one_slice(capsys):
    rc, doc = _json(capsys, "--from-deployment", str(KUBE / "deployment-mig.yaml"))
    assert rc == 0
    assert (doc["gpu"], doc["gpu_total_gib"]) == ("A100-SXM4-80GB MIG 3g.40gb", 39.25)
    assert doc["notes"][0]["params"] == {"gpu": "NVIDIA-A100-SXM4-80GB MIG 3g.40gb"}


def test_gke_accelerator_label_names_the_gpu(capsys):
    rc, doc = _json(capsys, "--from-deployment", str(KUBE / "deployment-kubeai.yaml"))
    assert rc == 0
    assert (doc["gpu"], doc["gpu_total_gib"], doc["model"]) == ("L4", 22.06, "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8")
    assert doc["conflicts"] == []


def test_deployment_without_a_gpu_label_asks_for_one(capsys):
    rc, out, err = _run(capsys, "--from-deployment", str(KUBE / "deployment-runbook-incident.yaml"))
    assert rc == 2 and out == ""
    assert "which GPU? Pass --gpu NAME" in err and "--gpu-mem-gib" in err


def test_unknown_model_names_the_nearest_and_how_to_pass_a_config(capsys):
    rc, out, err = _run(capsys, "--engine", "vllm", "--model", "qwen-7b", "--gpu", "A100")
    assert rc == 2 and out == ""
    assert "unknown model 'qwen-7b'" in err and "Qwen/Qwen2.5-7B-Instruct" in err
    assert "--model path/to/config.json" in err
    assert "Traceback" not in err


def test_unknown_gpu_names_the_nearest_and_how_to_give_memory(capsys):
    rc, out, err = _run(capsys, "--engine", "vllm", "--model", QWEN, "--gpu", "A100x", lang="zh")
    assert rc == 2 and out == ""
    assert "未知 GPU 'A100x'" in err and "A10" in err and "--gpu-mem-gib N" in err


def test_a_config_json_path_is_a_model(capsys):
    path = ROOT / "tests" / "data" / "model_configs" / "qwen2.5-7b-instruct.json"
    rc, doc = _json(capsys, "--engine", "sglang", "--model", str(path), "--gpu-mem-gib", "40")
    assert rc == 0
    model = load_model_config(path)
    assert (doc["model"], doc["model_source"], doc["gpu"]) == (model.name, model.source, "40 GiB")
    _same_budget(doc, compute_budget(model, BudgetInputs(engine="sglang", gpu_total_gib=40.0)))


def test_tgi_max_model_len_is_max_total_tokens(capsys):
    rc, doc = _json(capsys, "--engine", "tgi", "--model", QWEN, "--gpu", "L4", "--max-model-len", "8192")
    assert rc == 0
    assert doc["max_model_len"] == 8192
    _same_budget(doc, compute_budget(find_model(QWEN), BudgetInputs(engine="tgi", gpu_total_gib=22.06, gpu_name="L4",
                                                                    max_total_tokens=8192)))


# ------------------------------------------------------------------ what-if


def test_what_if_json_has_before_after_and_what_changed(capsys):
    rc, doc = _json(capsys, *INCIDENT_FLAGS, "--what-if", "max-num-seqs=32,max-model-len=4096")
    assert rc == 0
    assert doc["changed"] == {"max-num-seqs": {"before": 128, "after": 32},
                              "max-model-len": {"before": 8192, "after": 4096}}
    _same_budget(doc["before"], compute_budget(find_model(QWEN), INCIDENT_INPUTS))
    _same_budget(doc["after"], compute_budget(find_model(QWEN), replace(INCIDENT_INPUTS, max_num_seqs=32,
                                                                        max_model_len=4096)))


def test_what_if_text_shows_both_side_by_side(capsys):
    rc, out, _ = _run(capsys, *INCIDENT_FLAGS, "--what-if", "max-num-seqs=32,max-model-len=4096")
    assert rc == 0
    before = compute_budget(find_model(QWEN), INCIDENT_INPUTS)
    after = compute_budget(find_model(QWEN), replace(INCIDENT_INPUTS, max_num_seqs=32, max_model_len=4096))
    assert "== What if max-num-seqs 128 → 32, max-model-len 8192 → 4096" in out
    table = out.split("== What if", 1)[1]
    assert table.splitlines()[1].split() == ["before", "after"]
    assert f"{before.kv_cache_tokens:,}" in table and f"{after.kv_cache_tokens:,}" in table
    assert "  starts                          yes                    yes" in table
    # 4096 tokens: the cache holds twice as many, but --max-num-seqs 32 caps it: the cost shows
    assert "  requests at once                128 (--max-num-seqs)   32 (--max-num-seqs)" in table


def test_concurrency_is_the_engines_cap_or_the_cache_in_whole_requests(capsys):
    """min(--max-num-seqs, what the KV cache holds), floored, in the JSON of every engine."""
    rc, doc = _json(capsys, *INCIDENT_FLAGS, "--what-if", "max-num-seqs=256")
    assert rc == 0
    before, after = doc["before"], doc["after"]
    assert (before["kv_requests"], before["concurrency"], before["concurrency_limit"]) == (136, 128, "max_num_seqs")
    # more sequences take more CUDA-graph memory: the cache then holds 135, below the cap of 256
    assert (after["kv_requests"], after["concurrency"], after["concurrency_limit"]) == (135, 135, "kv_cache")
    for engine, seqs_flag in (("sglang", "--max-running-requests"), ("tgi", "--max-batch-size")):
        rc, doc = _json(capsys, "--engine", engine, "--model", QWEN, "--gpu", "A100-80GB", "--max-model-len", "8192",
                        "--max-num-seqs", "8")
        assert (doc["concurrency"], doc["concurrency_limit"]) == (8, "max_num_seqs"), engine
        rc, out, _ = _run(capsys, "--engine", engine, "--model", QWEN, "--gpu", "A100-80GB", "--max-model-len",
                          "8192", "--max-num-seqs", "8")
        assert f"8 requests at once (capped by {seqs_flag} 8;" in out, engine


def test_what_if_that_fixes_a_failing_launch_exits_0(capsys):
    base = ("--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--engine-version",
            "0.10.1")
    rc, doc = _json(capsys, *base, "--what-if", "max-model-len=8192")
    assert (doc["before"]["failure_id"], doc["after"]["fits"], rc) == ("kv_below_one_sequence", True, 0)
    assert doc["changed"]["max-model-len"] == {"before": 131072, "after": 8192}
    rc, _ = _json(capsys, *base)
    assert rc == 1


def test_unknown_what_if_key_lists_the_valid_keys(capsys):
    rc, out, err = _run(capsys, *INCIDENT_FLAGS, "--what-if", "max-seqs=3")
    assert rc == 2 and out == ""
    assert "--what-if key 'max-seqs' is unknown. Valid keys: tensor-parallel-size, " in err
    assert "max-num-seqs" in err


def test_what_if_value_of_the_wrong_kind_says_what_is_expected(capsys):
    rc, _, err = _run(capsys, *INCIDENT_FLAGS, "--what-if", "gpu-memory-utilization=95")
    assert rc == 2
    assert "--what-if gpu-memory-utilization=95: expected a number above 0 and at most 1." in err


# ------------------------------------------------------------------ plan and per-bucket capacity


def test_profile_plan_gives_ready_to_paste_flags_and_why(capsys):
    log = INCIDENT / "access.log"
    rc, doc = _json(capsys, *INCIDENT_FLAGS, "--profile", str(log), "--target-headroom", "0.1")
    scan = scan_access_log(log, "access.log", detail=True)
    plan = solve_safe_flags(find_model(QWEN), INCIDENT_INPUTS, scan.profile, scan.detail, 0.1)
    assert doc["plan"]["args"] == list(plan.args())
    # the p99 (8215) rounds to 9216, above the running 8192: a stop-gap keeps 8192
    assert (doc["plan"]["max_model_len"], doc["plan"]["memory_fraction"]) == (8192, 0.88)
    assert doc["plan"]["max_num_seqs"] == plan.max_num_seqs
    assert [r["id"] for r in doc["plan"]["reasons"]] == [r.id for r in plan.reasons]
    assert doc["plan"]["feasible"] is True and rc == 0
    assert doc["buckets"]["basis"] == "profile_p95"
    assert [r["tokens"] for r in doc["buckets"]["rows"]] == [556, 2101, 8192, 8192]
    assert doc["buckets"]["status"] == "absorbs_all_long"


def test_profile_plan_text_explains_each_value(capsys):
    rc, out, _ = _run(capsys, *INCIDENT_FLAGS, "--profile", str(INCIDENT / "access.log"))
    assert rc == 0
    assert "== Safe flags for the measured profile (2400 requests; keep 10% of the KV cache free)" in out
    assert "\n  args:\n    - --max-model-len=8192\n" in out
    assert "--max-model-len 9216: the p99 request is 8215 tokens (input + output), rounded up" in out
    assert ("--max-model-len 8192: kept at the current value; the p99 request (8215 tokens) is longer, so the "
            "longest requests are refused today either way, and a stop-gap never raises the context") in out
    assert "--gpu-memory-utilization 0.88: stepped back from 0.95 to the safe 0.88" in out
    assert "== Concurrent requests per bucket (length: the bucket's p95 in the profile, input + output)" in out


def test_target_headroom_needs_a_profile(capsys):
    rc, out, err = _run(capsys, *INCIDENT_FLAGS, "--target-headroom", "0.2")
    assert rc == 2 and out == "" and "--target-headroom needs --profile ACCESS_LOG" in err


# ------------------------------------------------------------------ contradictions and failures


def test_tp_beyond_the_requested_gpus_is_reported_and_exits_2(capsys):
    rc, doc = _json(capsys, "--from-deployment", str(INCIDENT / "deployment.yaml"), "--tp", "2")
    assert rc == 2
    assert doc["conflicts"][0]["id"] == "tp_exceeds_gpus_requested" and doc["conflicts"][0]["fatal"]
    assert doc["conflicts"][0]["text"] == ("TP 2 x PP 1 needs 2 GPUs, but the Deployment requests 1: "
                                           "the engine cannot start its ranks")


def test_fp8_on_a_gpu_without_it_cannot_run(capsys):
    rc, out, _ = _run(capsys, "--engine", "vllm", "--model", QWEN, "--gpu", "T4", "--quantization", "fp8")
    assert rc == 2
    assert "== Contradictions\n  - [cannot run] fp8 needs compute capability 8.0; T4 has 7.5" in out


def test_fp8_on_ampere_runs_weight_only_with_a_warning(capsys):
    rc, out, _ = _run(capsys, "--engine", "vllm", "--model", QWEN, "--gpu", "A100", "--quantization", "fp8",
                      "--max-model-len", "8192")
    assert rc == 0
    assert "FP8 weights run weight-only (Marlin kernels)" in out.split("== Warnings", 1)[1]


def test_a_launch_the_engine_refuses_exits_1_with_its_reason(capsys):
    rc, doc = _json(capsys, "--engine", "vllm", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "L4")
    assert rc == 1
    assert doc["fits"] is False and doc["failure_id"] == "weights_exceed_gpu"
    assert doc["failure"].startswith("CUDA out of memory. Tried to allocate")


@pytest.mark.parametrize(("argv", "words"), [
    (("--model", QWEN, "--gpu", "A100"), "pass --engine vllm|sglang|tgi"),
    (("--engine", "vllm", "--gpu", "A100"), "pass --model NAME"),
    (("--engine", "vllm", "--model", QWEN, "--gpu", "A100", "--gpu-memory-utilization", "1.5"),
     "argument --gpu-memory-utilization: must be above 0 and at most 1"),
    (("--engine", "vllm", "--model", QWEN, "--gpu", "A100", "--tp", "0"), "argument --tp: must be between 1 and 1024"),
    (("--from-deployment", "/no/such/deployment.yaml"), "/no/such/deployment.yaml: no such file"),
])
def test_bad_usage_exits_2_with_a_message(capsys, argv, words):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert words in err


def test_a_multi_node_launch_counts_the_gpus_of_every_node(capsys):
    rc, doc = _json(capsys, "--from-deployment", str(KUBE / "statefulset-sglang-multinode.yaml"), "--gpu", "H100")
    assert (doc["engine"], doc["tp"], doc["conflicts"], rc) == ("sglang", 16, [], 0)  # 8 GPUs x --nnodes 2


@pytest.mark.parametrize(("flag", "value"), [
    ("--gpu-mem-gib", "inf"), ("--gpu-mem-gib", "nan"), ("--gpu-mem-gib", "1e308"), ("--gpu-mem-gib", "-40"),
    ("--gpu-memory-utilization", "nan"), ("--gpu-memory-utilization", "-0.5"), ("--max-model-len", "-8192"),
    ("--max-num-seqs", "1e308"), ("--other-process-gib", "inf"), ("--target-headroom", "nan"), ("--tp", "inf"),
])
def test_non_finite_and_absurd_numbers_are_usage_errors_naming_the_flag(capsys, flag, value):
    rc, out, err = _run(capsys, "--engine", "vllm", "--model", QWEN, "--gpu", "A100", flag, value)
    assert rc == 2 and out == ""
    assert f"argument {flag}:" in err and "Traceback" not in err and "nan GiB" not in err


def test_slack_refuses_the_same_numbers_before_any_work_starts():
    from bot.grammar.slack import CommandError, parse_command

    with pytest.raises(CommandError) as e:
        parse_command("budget --engine vllm --model Qwen/Qwen2.5-7B-Instruct --gpu A100 --gpu-mem-gib nan")
    assert e.value.key == "bad_flags" and "--gpu-mem-gib" in words.en(e.value.params["detail"])
