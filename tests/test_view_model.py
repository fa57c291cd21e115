"""One typed view model for every renderer, and a typed budget in the Report."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from bot.render.report_json import report_json
from bot.render.slack_triage import diagnosis_message
from bot.render.text import render_text
from bot.render.view import ActionView, CauseView, ReportView, view
from collectors.bundle import load_bundle
from runbooks.model.budget import Assumed, Budget
from runbooks.model.report import Report
from runbooks.model.serde import from_jsonable
from runbooks.triage.runbook import triage

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _incident() -> Report:
    return triage(load_bundle(EXAMPLES / "runbook-incident"))


def test_the_report_carries_the_typed_budget_and_json_keeps_its_keys():
    report = _incident()
    assert isinstance(report.budget, Budget)
    doc = report_json(report)
    assert set(doc["budget"]) == {f.name for f in fields(Budget)} | {"assumption_reasons"}
    # each default assumed: its English words, and the value and reason id the words come from
    assert ["block_size", "16 (vLLM default on CUDA)"] in doc["budget"]["assumptions"]
    assert doc["budget"]["assumption_reasons"]["block_size"] == {"value": 16, "why": "vllm_cuda_default", "params": {}}
    assert doc["budget"]["kv_cache_tokens"] == report.budget.kv_cache_tokens
    assert {"weights_gib", "kv_cache_gib", "max_concurrency", "fits", "failure_id"} <= set(doc["budget"])


def test_a_report_read_back_from_json_has_the_same_typed_budget():
    report = _incident()
    back = from_jsonable(Report, json.loads(json.dumps(report_json(report))))
    assert back.budget == report.budget


def test_a_report_json_written_before_the_reason_ids_still_reads_back():
    doc = json.loads(json.dumps(report_json(_incident())))
    del doc["budget"]["assumption_reasons"]  # an older report: the English pairs only
    back = from_jsonable(Report, doc)
    assert back.budget.assumption("block_size") == Assumed("16", "recorded", (("text", "16 (vLLM default on CUDA)"),))
    assert back.budget.kv_cache_tokens == _incident().budget.kv_cache_tokens


def test_the_view_is_typed_and_worded_once():
    v = view(_incident(), "en")
    assert isinstance(v, ReportView)
    assert isinstance(v.primary_cause, CauseView) and v.primary == "kv_cache_pressure"
    first = v.actions[0]
    assert isinstance(first, ActionView)
    assert (first.id, first.title, first.changes) == (
        "lower_max_num_seqs", "Lower --max-num-seqs from 128 to 114", ("--max-num-seqs 128 -> 114",))
    # the engine measured the pool: the budget builds on it, never shows a second pool figure
    assert v.budget[0].startswith("on the engine's measured pool of 1,108,880 tokens")


def test_terminal_and_slack_show_the_same_worded_lines():
    report = _incident()
    v = view(report, "zh")
    text = render_text(report, "zh")
    blocks = json.dumps(diagnosis_message(report, "zh"), ensure_ascii=False)
    for action in v.actions[:3]:
        assert action.title in text and action.title in blocks
    assert v.primary_title in text and v.primary_title in blocks
