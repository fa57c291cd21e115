"""Triage and `gpumem budget --profile` give the same safe flags: one solver answers both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.main import main
from collectors.bundle import load_bundle
from runbooks.triage.actions import safe_plan
from runbooks.triage.context import build_context
from runbooks.triage.runbook import triage

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WITH_PROFILE = sorted(p.name for p in EXAMPLES.iterdir()
                      if (p / "access.log").exists() and (p / "deployment.yaml").exists())


def _budget_plan(capsys, example: Path, gpu: str, engine_version: str | None, reported: int | None = None) -> dict:
    argv = ["budget", "--from-deployment", str(example / "deployment.yaml"), "--profile", str(example / "access.log"),
            "--gpu", gpu, "--json"]
    if engine_version:
        argv += ["--engine-version", engine_version]
    if reported:
        argv += ["--reported-kv-tokens", str(reported)]
    rc = main(argv)
    out = capsys.readouterr().out
    assert rc in (0, 1), out
    return json.loads(out)["plan"]


def test_the_examples_with_a_profile_are_the_ones_compared():
    assert WITH_PROFILE == ["healthy-vllm-v1", "mixed-pool-vllm-v1", "params-edge-sglang", "runbook-incident"]


@pytest.mark.parametrize("name", WITH_PROFILE)
def test_triage_and_budget_recommend_the_same_flags(name, capsys):
    evidence = load_bundle(EXAMPLES / name)
    ctx = build_context(evidence)
    plan = safe_plan(ctx)
    assert plan is not None and plan.budget is not None, "the model is known: the budget sizes the pool"
    # the capacity the engine reported, where it did, is what both size on (`--reported-kv-tokens`)
    pool = ctx.kv_capacity_tokens
    reported = int(pool.value) if pool is not None and pool.source != "budget" else None
    assert plan.kv_pool_basis == ("engine_anchored" if reported else "budget")
    budget = _budget_plan(capsys, EXAMPLES / name, ctx.gpu_name, ctx.budget_inputs.engine_version, reported)
    assert budget["args"] == list(plan.args())
    assert (budget["max_model_len"], budget["max_num_seqs"]) == (plan.max_model_len, plan.max_num_seqs)
    assert (budget["kv_cache_tokens"], budget["kv_pool_basis"]) == (plan.kv_cache_tokens, plan.kv_pool_basis)


@pytest.mark.parametrize("name", WITH_PROFILE)
def test_every_flag_a_report_prints_is_a_typed_change_of_the_same_value(name):
    evidence = load_bundle(EXAMPLES / name)
    report = triage(evidence)
    plan = safe_plan(build_context(evidence))
    values = plan.values()
    for action in report.actions:
        for change in action.changes:
            if change.kind == "set_arg" and change.flag in values:
                assert change.new == values[change.flag], (action.id, change)
        if action.id == "set_safe_flags":
            # the template pastes the solver's flags it changes, none already at its value
            changed = {c.flag for c in action.changes if c.kind == "set_arg"}
            assert action.params["args"] == " ".join(a for a in plan.args() if a[2:].split("=")[0] in changed)


def test_the_runbook_incident_gets_the_numbers_both_surfaces_print(capsys):
    report = triage(load_bundle(EXAMPLES / "runbook-incident"))
    by_id = {a.id: a for a in report.actions}
    # 114, not the budget's 115: the pool is the 1,108,880 tokens the engine reported (metrics.txt),
    # not the 1,120,992 the budget computes
    assert by_id["lower_max_num_seqs"].params == {"current": 128, "target": 114, "flag": "max-num-seqs"}
    # the safe-flag template would set max-num-seqs 128 -> 114 and the fraction 0.95 -> 0.88:
    # two single-flag actions say each, so the template, the two combined, is not offered
    assert "set_safe_flags" not in by_id
    assert [(c.flag, c.old, c.new) for c in by_id["lower_memory_fraction"].changes] == [
        ("gpu-memory-utilization", 0.95, 0.88)]
    assert [(c.kind, c.old, c.new) for c in by_id["scale_out"].changes] == [("scale", 2, 3)]


WITH_DEPLOYMENT = sorted(p.name for p in EXAMPLES.iterdir() if (p / "deployment.yaml").exists())


@pytest.mark.parametrize("name", WITH_DEPLOYMENT)
def test_triage_and_budget_size_the_same_launch_the_same_way(name, capsys):
    """Every example with a Deployment: the budget triage reports is the one `gpumem budget` prints."""
    ctx = build_context(load_bundle(EXAMPLES / name))
    if ctx.budget is None:
        assert ctx.model is None or ctx.gpu_total_gib is None or ctx.config is None, name
        return
    gpu = ["--gpu", ctx.gpu_name] if ctx.gpu_name else ["--gpu-mem-gib", str(ctx.budget_inputs.gpu_total_gib)]
    argv = ["budget", "--from-deployment", str(EXAMPLES / name / "deployment.yaml"), *gpu,
            "--engine", ctx.budget_inputs.engine, "--json"]
    if ctx.budget_inputs.engine_version:
        argv += ["--engine-version", ctx.budget_inputs.engine_version]
    rc = main(argv)
    doc = json.loads(capsys.readouterr().out)
    assert rc in (0, 1)
    assert (doc["kv_cache_tokens"], doc["max_concurrency"]) == pytest.approx((ctx.budget.kv_cache_tokens,
                                                                               ctx.budget.max_concurrency), abs=1e-3), name
