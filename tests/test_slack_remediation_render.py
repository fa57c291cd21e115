"""The plan message in every stage, in en and zh, as golden files within Block Kit's limits; the
"Plan" buttons under a diagnosis and the value they carry; refusals and `/gpumem plans`."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.render import slack_blocks as B
from bot.render import slack_remediation as P
from bot.render.i18n import Catalog
from bot.render.slack_triage import diagnosis_message
from bot.store.db import StoredPlan
from runbooks.model.changes import Change
from runbooks.model.report import Action, Report, Verdict
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support.fake_slack import block_errors

GOLDEN = Path(__file__).resolve().parent / "golden" / "slack"
UPDATE = os.environ.get("GPUMEM_UPDATE_GOLDEN") == "1"
T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)
PATCH = ({"op": "test", "path": "/spec/template/spec/containers/0/args",
          "value": ["--model=q", "--max-model-len=8192"]},
         {"op": "replace", "path": "/spec/template/spec/containers/0/args",
          "value": ["--model=q", "--max-model-len=4096"]})


def _stored(state: str = "proposed", approvals: tuple[str, ...] = (), needed: int = 1) -> StoredPlan:
    plan = Plan("p-0a1b2c3d", PlanTarget("prod", "llm", "Deployment", "vllm-server"), "cap_max_model_len",
                (Change.set_arg("vllm", "max-model-len", 8192, 4096),), "41", 7, PATCH,
                "application/json-patch+json", "U0ONCALL", T0, T0 + timedelta(minutes=15), needed,
                "triage of llm/vllm-server")
    return StoredPlan(plan, state, "C0INCIDENT", "1700000000.000100", approvals, T0)


#: each stage as the desk renders it, with the parameters it passes
STAGES = {
    "proposed": (_stored(), {}),
    "partly_approved": (_stored(approvals=("U0APPROVER",), needed=2), {"users": ("U0APPROVER",)}),
    "approved": (_stored("approved", ("U0APPROVER",)), {"users": ("U0APPROVER",)}),
    "dry_run_ok": (_stored("applying", ("U0APPROVER",)), {}),
    "watching": (_stored("applied", ("U0APPROVER",)), {"minutes": 10, "updated": 1, "available": 1, "replicas": 2}),
    "held": (_stored("watched", ("U0APPROVER",)), {"notes": (), "replicas": 2}),
    "symptoms_remain": (_stored("watched", ("U0APPROVER",)),
                        {"notes": ("12 preemption or reject lines in new pods' logs",), "replicas": 2}),
    "failed": (_stored("failed", ("U0APPROVER",)),
               {"notes": ("1 restarts in new pods", "2 CUDA OOM lines in new pods' logs"), "replicas": 2}),
    "failed_rolled_back": (_stored("rolled_back", ("U0APPROVER",)),
                           {"notes": ("progress deadline exceeded",), "replicas": 2}),
    "changed": (_stored("failed", ("U0APPROVER",)), {"planned": "41", "now": "44"}),
    "not_applied": (_stored("failed", ("U0APPROVER",)),
                    {"reason": "gpumem: the writer may not patch deployments in llm (missing RBAC verb patch)."}),
    "rolled_back": (_stored("rolled_back", ("U0APPROVER",)), {"users": ("U0APPROVER",)}),
    "rejected": (_stored("rejected"), {"users": ("U0SECOND",)}),
    "expired": (_stored("expired"), {}),
    "superseded": (_stored("superseded"), {}),
}


def _check_golden(name: str, doc: dict) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    if UPDATE or not path.exists():
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"{path} was missing and has been written; check it in and run again")
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(text), (
        f"{path.name} changed; if intended, rerun with GPUMEM_UPDATE_GOLDEN=1")


def _buttons(msg: dict) -> list[str]:
    return [e["action_id"] for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"]]


def test_every_stage_has_a_golden_case():
    assert set(STAGES) == set(P.STAGES)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_plan_stage_renders_as_its_golden_file_within_the_limits(lang):
    doc = {}
    for stage, (stored, params) in STAGES.items():
        msg = P.plan_message(stored, lang, stage, **params)
        assert block_errors(msg["blocks"]) == [] and B.violations(msg["blocks"]) == [], stage
        assert "n/a" not in msg["text"], (stage, msg["text"])  # every placeholder of the status line filled
        doc[stage] = msg
    _check_golden(f"_plan.{lang}", doc)


def test_each_stage_offers_the_buttons_it_allows():
    expected = {"proposed": [P.APPROVE_ACTION, P.REJECT_ACTION], "partly_approved": [P.APPROVE_ACTION, P.REJECT_ACTION],
                "watching": [P.ROLLBACK_ACTION], "held": [P.ROLLBACK_ACTION], "symptoms_remain": [P.ROLLBACK_ACTION],
                "failed": [P.ROLLBACK_ACTION], "changed": [P.REPLAN_ACTION], "not_applied": [P.REPLAN_ACTION],
                "expired": [P.REPLAN_ACTION]}
    for stage, (stored, params) in STAGES.items():
        msg = P.plan_message(stored, "en", stage, **params)
        assert _buttons(msg) == expected.get(stage, []), stage
        for b in msg["blocks"]:
            for e in b.get("elements", []) if b["type"] == "actions" else []:
                assert e["value"] == "p-0a1b2c3d"  # the plan id, nothing else


def test_approve_and_rollback_ask_for_confirmation_in_slacks_limits():
    for stage in ("proposed", "held"):
        stored, params = STAGES[stage]
        for lang in ("en", "zh"):
            (button,) = [e for b in P.plan_message(stored, lang, stage, **params)["blocks"] if b["type"] == "actions"
                         for e in b["elements"] if "confirm" in e]
            confirm = button["confirm"]
            assert len(confirm["title"]["text"]) <= 100 and len(confirm["text"]["text"]) <= 300
            assert "--max-model-len" in confirm["text"]["text"]


def test_the_body_shows_target_version_diff_risk_rollback_and_expiry():
    msg = P.plan_message(_stored(), "en", "proposed")
    text = json.dumps(msg["blocks"], ensure_ascii=False)
    for words in ("Deployment llm/vllm-server", "prod", "resourceVersion 41, generation 7", "<@U0ONCALL>",
                  "`--max-model-len 8192 -&gt; 4096`", "rolling update", "Restores --max-model-len 4096 -&gt; 8192",
                  "<!date^1796092140^", "0 of 1", "/gpumem rollback p-0a1b2c3d"):
        assert words in text, words


def test_an_unknown_stage_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown plan stage"):
        P.plan_message(_stored(), "en", "done")


# ----------------------------------------------------------------------------- the "Plan" buttons


def _report() -> Report:
    return Report(target="llm/vllm-server", verdict=Verdict("kv_cache_pressure", priority="high"), actions=(
        Action("cap_max_model_len", {"flag": "max-model-len", "current": 8192, "target": 4096},
               changes=(Change.set_arg("vllm", "max-model-len", 8192, 4096),)),
        Action("scale_out", {"current": 2, "target": 3}, changes=(Change.scale(2, 3),)),
    ))


def test_plan_buttons_carry_the_target_action_and_changes_and_sit_above_run_again():
    report = _report()
    plans = P.plan_buttons(report, "en", "llm/vllm-server", "prod", ("scale_out",))
    msg = diagnosis_message(report, "en", target="llm/vllm-server", context="prod", plan_blocks=plans)
    assert block_errors(msg["blocks"]) == []
    ids = [b.get("block_id") for b in msg["blocks"] if b["type"] == "actions"]
    assert ids == [P.PLAN_BLOCK, "gpumem_diagnosis"]
    (button,) = plans[0]["elements"]
    assert button["action_id"] == f"{P.PLAN_ACTION}:2" and button["text"]["text"].startswith("Plan: ")
    assert P.parse_plan_value(button["value"]) == ("llm/vllm-server", "prod", "scale_out",
                                                   (Change("scale", None, None, None, 3),))
    assert P.plan_buttons(report, "en", "llm/vllm-server", None, ()) == []
    assert diagnosis_message(report, "en") == diagnosis_message(report, "en", plan_blocks=[])


@pytest.mark.parametrize("value", ["", "[]", '{"t": 1}', '{"t": "a/b", "a": "x", "ch": []}',
                                   '{"t": "a/b", "a": "x", "ch": [["scale", null, null]]}',
                                   '{"t": "a/b", "a": "x", "ch": [["scale", null, null, {"x": 1}]]}',
                                   '{"t": "a/b", "c": 3, "a": "x", "ch": [["scale", null, null, 3]]}'])
def test_a_value_plan_buttons_do_not_make_is_refused(value):
    with pytest.raises(ValueError):
        P.parse_plan_value(value)


# ----------------------------------------------------------------------------- refusals, lists


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_refusal_is_worded_with_its_values(lang):
    cat = Catalog.load(lang)
    reasons = sorted(k.split(".")[-1] for k in cat.messages if k.startswith("slack_plan.refused."))
    assert len(reasons) >= 15
    for reason in reasons:
        msg = P.refusal_message(lang, reason, plan="p-1", namespace="llm", cluster="prod", approvers=("U1", "S2"),
                                state="applied", verb="approve", reason="r", differences="d")
        assert block_errors(msg["blocks"]) == [] and "n/a" not in msg["text"], reason
    who = P.refusal_message(lang, "not_an_approver", plan="p-1", namespace="llm", approvers=("U1", "S2"),
                            verb="approve")
    assert "<@U1>, <!subteam^S2>" in who["text"]
    nobody = P.refusal_message(lang, "not_an_approver", plan="p-1", namespace="llm", approvers=(), verb="approve")
    assert cat.t("slack_plan.nobody") in nobody["text"]


def test_plans_lists_the_open_ones_in_both_languages():
    plans = [_stored(), _stored("approved", ("U0APPROVER",))]
    for lang in ("en", "zh"):
        msg = P.plans_message(plans, lang)
        assert block_errors(msg["blocks"]) == [] and msg["text"] == Catalog.load(lang).t("slack_plan.plans.title",
                                                                                         count=2)
        assert json.dumps(msg["blocks"], ensure_ascii=False).count("p-0a1b2c3d") == 2
    assert "No open plans." in json.dumps(P.plans_message([], "en")["blocks"])
