"""The plan message in every stage, in en and zh, as golden files within Block Kit's limits; the
"Plan" buttons under a diagnosis and the value they carry; refusals and `/gpumem plans`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.watch import Reverted
from bot.render import slack_blocks as B
from bot.render import slack_remediation as P
from bot.render.i18n import Catalog
from bot.render.slack_triage import diagnosis_message
from bot.store.db import StoredPlan
from runbooks.model.changes import Scale, SetArg, SplitPools
from runbooks.model.phrases import Phrase
from runbooks.model.report import Action, Report, Verdict
from runbooks.remediation.plan import Plan, PlanTarget
from runbooks.remediation.preview import (
    BlastRadius,
    BudgetFigures,
    BudgetPreview,
    NodeSpare,
    Note,
    PlanPreview,
)
from tests.support.fake_slack import block_errors
from tests.support.slack_kit import check_golden

T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)
PATCH = ({"op": "test", "path": "/spec/template/spec/containers/0/args",
          "value": ["--model=q", "--max-model-len=8192"]},
         {"op": "replace", "path": "/spec/template/spec/containers/0/args",
          "value": ["--model=q", "--max-model-len=4096"]})


PODS = ("vllm-server-7d9c8b6f4-2xkqp", "vllm-server-7d9c8b6f4-q8wvn")
#: the budget a max-model-len cap predicts: the same KV cache, twice the full-length requests
BUDGET = BudgetPreview(BudgetFigures(1120992, 136.8398, 3.303, 128, 8192, True),
                       BudgetFigures(1120992, 273.6797, 3.303, 128, 4096, True), "Qwen/Qwen2.5-7B-Instruct",
                       "A100-SXM4-80GB", "vllm", 2, 2,
                       notes=(Note("gpu_from_deployment", {"gpu": "NVIDIA-A100-SXM4-80GB"}),))


def _blast(spare: tuple[int, int]) -> BlastRadius:
    nodes = (NodeSpare("gpu-node-03", 8, 8 - spare[0]), NodeSpare("gpu-node-05", 6, 6 - spare[1]))
    return BlastRadius(True, PODS, 2, 2, 2, "RollingUpdate", 1, 0, "nvidia.com/gpu", 1, 1, 1, nodes, sum(spare),
                       sum(spare), "fits" if sum(spare) else "stuck")


FITS = PlanPreview(BUDGET, _blast((7, 4)))
STUCK = PlanPreview(BUDGET, _blast((0, 0)))
#: an unknown model: no budget, the blast radius all the same
NO_MODEL = PlanPreview(BudgetPreview(replicas_before=2, replicas_after=2, missing=(
    Note("model", {"code": "unknown_model", "name": "acme/mystery-llm-13b", "nearest": "-"}),)), _blast((7, 4)))


def _stored(state: str = "proposed", approvals: tuple[str, ...] = (), needed: int = 1,
            preview: PlanPreview | None = FITS) -> StoredPlan:
    plan = Plan("p-0a1b2c3d", PlanTarget("prod", "llm", "Deployment", "vllm-server"), "cap_max_model_len",
                (SetArg("vllm", "max-model-len", 8192, 4096),), "41", 7, PATCH,
                "application/json-patch+json", "U0ONCALL", T0, T0 + timedelta(minutes=15), needed,
                "triage of llm/vllm-server", preview=preview)
    return StoredPlan(plan, state, "C0INCIDENT", "1700000000.000100", approvals, T0)


#: each stage as the desk renders it, with the parameters it passes
STAGES = {
    "proposed": (_stored(), {"approvers": ("U0APPROVER", "U0SECOND", "S0SRE"), "approvers_configured": True}),
    "partly_approved": (_stored(approvals=("U0APPROVER",), needed=2),
                        {"users": ("U0APPROVER",), "approvers": ("U0SECOND", "S0SRE"), "approvers_configured": True}),
    "approved": (_stored("approved", ("U0APPROVER",)), {"users": ("U0APPROVER",)}),
    "dry_run_ok": (_stored("applying", ("U0APPROVER",)), {}),
    "watching": (_stored("applied", ("U0APPROVER",)), {"minutes": 10, "updated": 1, "available": 1, "replicas": 2}),
    "held": (_stored("watched", ("U0APPROVER",)), {"notes": (), "replicas": 2}),
    "symptoms_remain": (_stored("watched", ("U0APPROVER",)),
                        {"notes": (Phrase("watch.pressure_new", {"count": 12}),), "replicas": 2}),
    "failed": (_stored("failed", ("U0APPROVER",)),
               {"notes": (Phrase("watch.restarts_new", {"count": 1}), Phrase("watch.ooms_new", {"count": 2})),
                "replicas": 2}),
    "failed_rolled_back": (_stored("rolled_back", ("U0APPROVER",)),
                           {"notes": (Phrase("watch.deadline"),), "replicas": 2}),
    "changed": (_stored("failed", ("U0APPROVER",)), {"planned": "41", "now": "44"}),
    "not_applied": (_stored("failed", ("U0APPROVER",)),
                    {"reason": "gpumem: the writer may not patch deployments in llm (missing RBAC verb patch)."}),
    "rolled_back": (_stored("rolled_back", ("U0APPROVER",)), {"users": ("U0APPROVER",)}),
    "rejected": (_stored("rejected"), {"users": ("U0SECOND",)}),
    "expired": (_stored("expired"), {}),
    "superseded": (_stored("superseded"), {}),
    "reconciled_applied": (_stored("applied", ("U0APPROVER",)), {"reason": "-"}),
    "reconciled_failed": (_stored("failed", ("U0APPROVER",)),
                          {"reason": Phrase("reason.annotation_absent", {"annotation": "gpumem.io/plan",
                                                                         "plan": "p-0a1b2c3d"})}),
    "unknown": (_stored("applying", ("U0APPROVER",)),
                {"reason": "HTTP 503", "reread": "no answer within 10.0 s"}),
    "rollback_unknown": (_stored("applied", ("U0APPROVER",)),
                         {"users": ("U0APPROVER",), "reason": "connection closed without an answer",
                          "reread": "HTTP 503: etcdserver: request timed out"}),
    "reconciled_rolled_back": (_stored("rolled_back", ("U0APPROVER",)), {}),
    "rollback_not_applied": (_stored("applied", ("U0APPROVER",)),
                             {"reason": Phrase("reason.still_written",
                                               {"paths": "/spec/template/spec/containers/0/args"})}),
    "partly_applied": (_stored("failed", ("U0APPROVER",)),
                       {"reason": Phrase("reason.list", {"items": [
                           Phrase("reason.split_there", {"what": "Deployment/vllm-server-long",
                                                         "annotation": "gpumem.io/plan"}),
                           Phrase("reason.split_absent", {"what": "Service/vllm-server-long"})]})}),
    "watch_stopped": (_stored("applied", ("U0APPROVER",)), {"error_id": "3f9a1c07"}),
    "reverted": (_stored("reverted", ("U0APPROVER",)),
                 {"notes": (), "replicas": 2, "reverted": (Reverted(
                     "/spec/template/spec/containers/0/args/1", "--max-model-len=8192", "--max-model-len=4096",
                     "--max-model-len=8192", "argocd-controller", "2026-12-01T02:17:40Z", "2026-12-01T02:18:00Z",
                     "Update"),)}),
    "not_watched": (_stored("applied", ("U0APPROVER",)), {"kind": "LeaderWorkerSet", "name": "vllm"}),
}


_check_golden = check_golden


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
                "expired": [P.REPLAN_ACTION], "reconciled_applied": [P.ROLLBACK_ACTION],
                "reconciled_failed": [P.REPLAN_ACTION], "rollback_not_applied": [P.ROLLBACK_ACTION],
                "partly_applied": [P.ROLLBACK_ACTION],
                "watch_stopped": [P.ROLLBACK_ACTION], "not_watched": [P.ROLLBACK_ACTION]}
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
                  "<!date^1796092140^", "0 of 1", "/gpumem rollback p-0a1b2c3d",
                  "requests at once per pod 128 -&gt; 128 (after: capped by --max-num-seqs 128; the KV cache holds "
                  "273 requests of 4096 tokens)", "Blast radius",
                  "restarts all 2 pods (rolling update, maxSurge 1, maxUnavailable 0)",
                  "fits: the spare GPUs hold every extra pod at once"):
        assert words in text, words


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_preview_shows_a_stuck_rollout_first_and_a_missing_model_plainly(lang):
    doc = {}
    for name, preview in (("stuck", STUCK), ("no_model", NO_MODEL), ("stored_before_previews", None)):
        msg = P.plan_message(_stored(preview=preview), lang, "proposed")
        assert block_errors(msg["blocks"]) == [] and B.violations(msg["blocks"]) == [], name
        doc[name] = msg
    _check_golden(f"_plan_preview.{lang}", doc)
    cat = Catalog.load(lang)
    texts = [b["text"]["text"] for b in doc["stuck"]["blocks"] if b["type"] == "section" and "text" in b]
    warning = next(i for i, text in enumerate(texts) if text.startswith(":warning:"))
    assert texts[warning - 1].startswith(f"*{cat.t('slack_plan.changes')}*"), "right under the change"
    assert ("maxUnavailable" in texts[warning]) and cat.join(("gpu-node-03", "gpu-node-05")) in texts[warning]
    missing = json.dumps(doc["no_model"]["blocks"], ensure_ascii=False)
    assert "acme/mystery-llm-13b" in missing and cat.t("plan_preview.budget.title_missing") in missing
    assert cat.t("plan_preview.blast_title") not in json.dumps(doc["stored_before_previews"]["blocks"],
                                                               ensure_ascii=False)


def test_the_restarting_pods_listed_in_slack_are_capped():
    many = tuple(f"vllm-server-7d9c8b6f4-{i:05d}" for i in range(40))
    preview = PlanPreview(BUDGET, BlastRadius(True, many, 40, 40, 40, "RollingUpdate", 10, 0, "nvidia.com/gpu", 1, 10,
                                              10, (), 0, 0, "stuck"))
    text = json.dumps(P.plan_message(_stored(preview=preview), "en", "proposed")["blocks"], ensure_ascii=False)
    assert "vllm-server-7d9c8b6f4-00003, … (+36)" in text and "00004" not in text


def test_an_unknown_stage_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown plan stage"):
        P.plan_message(_stored(), "en", "done")


# ----------------------------------------------------------------------------- the "Plan" buttons


def _report() -> Report:
    return Report(target="llm/vllm-server", verdict=Verdict("kv_cache_pressure", priority="high"), actions=(
        Action("cap_max_model_len", {"flag": "max-model-len", "current": 8192, "target": 4096},
               changes=(SetArg("vllm", "max-model-len", 8192, 4096),)),
        Action("scale_out", {"current": 2, "target": 3}, changes=(Scale(2, 3),)),
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
                                                   (Scale(None, 3),))
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
                                state="applied", verb="approve", reason="r", differences="d", channel="C1",
                                command="/gpumem rollback")
        assert block_errors(msg["blocks"]) == [] and "n/a" not in msg["text"], reason
    who = P.refusal_message(lang, "not_an_approver", plan="p-1", namespace="llm", approvers=("U1", "S2"),
                            verb="approve")
    assert {"en": "<@U1>, <!subteam^S2>", "zh": "<@U1>、<!subteam^S2>"}[lang] in who["text"]
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


# ----------------------------------------------------------------------------- a pool split's plans

from bot.render import slack_split as S  # noqa: E402
from runbooks.remediation.split import CREATE_OBJECTS  # noqa: E402

#: a secret-looking env value in the clone: never in a Slack message
SPLIT_SECRET = "sk-live-split-golden-0123456789"
_LONG = {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "vllm-server-long", "namespace": "llm",
                      "labels": {"app": "vllm-server-long", "gpumem.io/pool": "long"}},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "vllm-server-long", "gpumem.io/pool": "long"}},
                  "template": {"metadata": {"labels": {"app": "vllm-server-long", "gpumem.io/pool": "long",
                                                       "track": "stable"}},
                               "spec": {"containers": [{
                                   "name": "vllm", "image": "vllm/vllm-openai:v0.6.6",
                                   "args": ["--model=Qwen/Qwen2.5-7B-Instruct", "--max-model-len=27648",
                                            "--max-num-seqs=34", f"--api-key={SPLIT_SECRET}"],
                                   "env": [{"name": "HF_TOKEN", "value": "hf_live_secret_value"},
                                           {"name": "OPENAI_API_KEY", "value": SPLIT_SECRET}]}]}}}}
_LONG_SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm-server-long", "namespace": "llm"},
                 "spec": {"selector": {"app": "vllm-server-long", "gpumem.io/pool": "long"},
                          "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}]}}
SPLIT1 = {"engine": "vllm", "flags": ["max-model-len", "max-num-seqs"], "gpu": "A100-SXM4-80GB",
          "gpu_resource": "nvidia.com/gpu", "namespace": "llm", "phase": 1, "phase1": "p-5p11a001",
          "plan": "p-5p11a001", "port": 80, "threshold": 2048, "watch_s": 600.0,
          "long": {"deployment": "vllm-server-long", "fits": 34, "gpu_quota": 1, "gpus_per_pod": 1,
                   "kv_tokens": 1075136, "labels": {"app": "vllm-server-long", "gpumem.io/pool": "long",
                                                    "track": "stable"},
                   "length_basis": "p99", "max_model_len": 27648, "max_num_seqs": 34, "replicas": 1,
                   "selector": {"app": "vllm-server-long", "gpumem.io/pool": "long"}, "service": "vllm-server-long"},
          "profile": {"long_share": 0.2743, "p99_total_tokens": 27433, "requests": 3000,
                      "source": "triage llm/vllm-server 2026-12-01 02:10 UTC"},
          "short": {"deployment": "vllm-server", "gpu_quota": 2, "gpus_per_pod": 1, "kv_tokens": 1126224,
                    "max_model_len": 4096, "max_num_seqs": 128, "output_allowance": 1280, "replicas": 2,
                    "service": "vllm-server"},
          "single": {"max_model_len": 8192, "max_num_seqs": 128, "memory_fraction": 0.95, "replicas": 2}}
SPLIT2 = {**SPLIT1, "phase": 2, "plan": "p-5p11a002", "routing_confirmed_by": "U0SECOND"}


def _split_stored(phase: int, state: str = "proposed", approvals: tuple[str, ...] = ()) -> StoredPlan:
    target = PlanTarget("prod", "llm", "Deployment", "vllm-server")
    if phase == 1:
        changes = (SplitPools("vllm", "Deployment", None, "create Deployment/vllm-server-long"),
                   SplitPools(None, "Service", None, "create Service/vllm-server-long"))
        patch = ({"op": "create", "kind": "Deployment", "name": "vllm-server-long", "value": _LONG},
                 {"op": "create", "kind": "Service", "name": "vllm-server-long", "value": _LONG_SERVICE})
        plan = Plan("p-5p11a001", target, "split_pools", changes, "41", 7, patch, CREATE_OBJECTS, "U0ONCALL", T0,
                    T0 + timedelta(minutes=15), 1, "triage of llm/vllm-server, split_pools phase 1")
    else:
        changes = (SetArg("vllm", "max-model-len", 8192, 4096),
                   SplitPools(None, "routing", None, "confirmed by U0SECOND: prompt tokens > 2048 -> Service/vllm-server-long"))
        plan = Plan("p-5p11a002", target, "split_pools", changes, "44", 7, PATCH, "application/json-patch+json",
                    "U0SECOND", T0, T0 + timedelta(minutes=15), 1, "routing confirmed, split_pools phase 2")
    return StoredPlan(plan, state, "C0INCIDENT", "1700000000.000100", approvals, T0)


#: the split messages the golden files keep: phase 1 waiting, held (with the routing button) and
#: rolled back, phase 2 waiting
SPLIT_CASES = {
    "phase1_proposed": (_split_stored(1), SPLIT1, "proposed", {}),
    "phase1_held": (_split_stored(1, "watched", ("U0APPROVER",)), SPLIT1, "held", {"notes": (), "replicas": 1}),
    "phase1_rolled_back": (_split_stored(1, "rolled_back", ("U0APPROVER",)), SPLIT1, "rolled_back",
                           {"users": ("U0APPROVER",)}),
    "phase2_proposed": (_split_stored(2), SPLIT2, "proposed", {}),
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_pool_splits_plan_messages_render_as_their_golden_file_within_the_limits(lang):
    doc = {}
    for name, (stored, split, stage, params) in SPLIT_CASES.items():
        msg = P.plan_message(stored, lang, stage, split=split, **params)
        assert block_errors(msg["blocks"]) == [] and B.violations(msg["blocks"]) == [], name
        assert len(msg["text"]) <= 3000 and "n/a" not in json.dumps(msg, ensure_ascii=False), name
        text = json.dumps(msg, ensure_ascii=False)
        assert SPLIT_SECRET not in text and "hf_live_secret_value" not in text and "HF_TOKEN" not in text, name
        doc[name] = msg
    _check_golden(f"_plan_split.{lang}", doc)


def test_phase1_lists_the_objects_the_routing_and_both_templates_never_a_body():
    msg = P.plan_message(*SPLIT_CASES["phase1_proposed"][:1], "en", "proposed", split=SPLIT1)
    text = json.dumps(msg["blocks"], ensure_ascii=False)
    for words in ("Pool split, phase 1 of 2: create vllm-server-long beside vllm-server",
                  "Deployment llm/vllm-server-long: 1 replica, --max-model-len 27648, --max-num-seqs 34, "
                  "pod labels app=vllm-server-long, gpumem.io/pool=long, track=stable",
                  "Service llm/vllm-server-long: ports 80-&gt;http, selector app=vllm-server-long, gpumem.io/pool=long",
                  "Requests with more than 2048 prompt tokens -&gt; Service llm/vllm-server-long:80; all others "
                  "-&gt; Service llm/vllm-server:80",
                  "*Pool split (runbook template)*", "long pool service: llm/vllm-server-long",
                  "max-model-len per pool: short 4096", "long 27,648 (the profile's p99 of 27,433 tokens rounded up)",
                  "GPU quota per pool: short 2 x 1 nvidia.com/gpu = 2, long 1 x 1 = 1",
                  "request profile: triage llm/vllm-server 2026-12-01 02:10 UTC (3000 requests",
                  "*Routing rollback (runbook template)*", "conditions to switch back",
                  "the single pool's flags after rollback: --max-model-len=8192 --max-num-seqs=128 on vllm-server",
                  "watch window: 10 minutes", "need 1 free nvidia.com/gpu",
                  "Service/vllm-server-long, Deployment/vllm-server-long deleted"):
        assert words in text, words
    assert "vllm/vllm-openai" not in text and "--api-key" not in text, "nothing of the pod spec beyond the flags"
    # a split plan whose template could not be read shows its changes by name, still no body
    bare = json.dumps(P.plan_message(_split_stored(1), "en", "proposed"), ensure_ascii=False)
    assert "create Deployment/vllm-server-long" in bare and SPLIT_SECRET not in bare


def test_only_a_watched_phase1_offers_routing_confirmed_with_a_dialog_naming_threshold_and_services():
    expected = {"proposed": [P.APPROVE_ACTION, P.REJECT_ACTION], "watching": [P.ROLLBACK_ACTION],
                "held": [P.ROUTING_ACTION, P.ROLLBACK_ACTION], "symptoms_remain": [P.ROUTING_ACTION, P.ROLLBACK_ACTION],
                "failed": [P.ROLLBACK_ACTION], "rolled_back": []}
    for stage, buttons in expected.items():
        msg = P.plan_message(_split_stored(1, "watched"), "en", stage, split=SPLIT1, notes=(), replicas=1,
                             minutes=10, updated=0, available=0)
        assert _buttons(msg) == buttons, stage
        assert all(e["value"] == "p-5p11a001" for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"])
    held2 = P.plan_message(_split_stored(2, "watched"), "en", "held", split=SPLIT2, notes=(), replicas=2)
    assert _buttons(held2) == [P.ROLLBACK_ACTION], "phase 2 has nothing after it"
    for lang in ("en", "zh"):
        msg = P.plan_message(_split_stored(1, "watched"), lang, "held", split=SPLIT1, notes=(), replicas=1)
        (routing,) = [e for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"]
                      if e["action_id"] == P.ROUTING_ACTION]
        confirm = routing["confirm"]
        assert len(confirm["title"]["text"]) <= 100 and len(confirm["text"]["text"]) <= 300
        for words in ("2048", "llm/vllm-server-long", "llm/vllm-server"):
            assert words in confirm["text"]["text"], (lang, words)


def test_phase2_shows_its_flag_change_and_who_confirmed_the_routing():
    text = json.dumps(P.plan_message(_split_stored(2), "en", "proposed", split=SPLIT2)["blocks"], ensure_ascii=False)
    assert "`--max-model-len 8192 -&gt; 4096`" in text and "Confirmed by <@U0SECOND>" in text
    assert "first p-5p11a002 (its Roll back button" in text and "then p-5p11a001" in text
    assert "Restores --max-model-len 4096 -&gt; 8192" in text and "split_pools None" not in text


def test_a_phase1_rollback_refusal_withholds_the_pod_templates_values():
    rows = [{"object": "Deployment/vllm-server-long", "path": "/spec/replicas", "gpumem": 1, "now": 3},
            {"object": "Deployment/vllm-server-long", "path": "/spec/template/spec/containers/0/env/1/value",
             "gpumem": SPLIT_SECRET, "now": "sk-other"},
            {"object": "Service/vllm-server-long", "path": "/spec/ports", "gpumem": [{"port": 80}], "now": []}]
    text = S.differences_text(rows, "en")
    assert text.startswith("Deployment/vllm-server-long /spec/replicas: 1 / 3; ")
    assert "/env/1/value: changed (values in the pod template are not shown in Slack" in text
    assert "/spec/ports: (list) / (list)" in text
    assert SPLIT_SECRET not in text and "sk-other" not in text


def test_the_mixed_pool_diagnosis_offers_a_plan_button_for_the_split():
    report = Report(target="llm/vllm-server", verdict=Verdict("mixed_pool", priority="high"), actions=(
        Action("split_pools", {"long_pct": 27.4}, changes=(SplitPools("vllm", "threshold", None, 2048),)),
        Action("split_pools_escalated", {}, "escalate", (SplitPools("vllm", "threshold", None, 2048),)),
    ))
    from bot.service.approvals import applicable

    assert [applicable(a) for a in report.actions] == [True, False]
    (block,) = P.plan_buttons(report, "en", "llm/vllm-server", "prod", ("split_pools",))
    (button,) = block["elements"]
    assert P.parse_plan_value(button["value"]) == ("llm/vllm-server", "prod", "split_pools",
                                                   (SplitPools("vllm", "threshold", None, 2048),))


def _first_section(msg: dict) -> str:
    return msg["blocks"][0]["text"]["text"]


def _field(msg: dict, label: str) -> str | None:
    for block in msg["blocks"]:
        for f in block.get("fields", ()):
            head, _, body = f["text"].partition("\n")
            if head == f"*{label}*":
                return body
    return None


def test_the_plan_message_leads_with_the_change_and_the_triages_own_risk():
    msg = P.plan_message(_stored(), "en", "proposed", approvers=("U0ANA", "S0SRE"))
    head = "Approve `--max-model-len 8192 -&gt; 4096` on llm/vllm-server? (needs 1 of: <@U0ANA>, <!subteam^S0SRE>)"
    assert _first_section(msg).startswith(f":clipboard: *{head}*\n")
    # the notification (what a phone shows) leads with the same question
    assert msg["text"].startswith("Approve --max-model-len 8192 -> 4096 on llm/vllm-server? (needs 1 of: ")
    text = json.dumps(msg["blocks"], ensure_ascii=False)
    # the triage's risk for capping the context, with the plan's value, not the generic rollout text
    assert "requests longer than 4096 tokens get HTTP 400; tell the callers" in text
    assert "The pods restart one at a time" not in text
    assert _field(msg, "Expires") is not None and _field(msg, "Next step") is None
    # two approvals needed, one given: the headline asks for the one left
    two = P.plan_message(_stored(approvals=("U0APPROVER",), needed=2), "en", "partly_approved",
                         users=("U0APPROVER",), approvers=("U0ANA",))
    assert "(needs 1 of: <@U0ANA>)" in _first_section(two)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_waiting_plan_nobody_may_approve_says_so_in_words_in_the_headline_and_the_notification(lang):
    unset = P.plan_message(_stored(), lang, "proposed", approvers=(), approvers_configured=False)
    left = P.plan_message(_stored(), lang, "proposed", approvers=(), approvers_configured=True)
    unknown = P.plan_message(_stored(), lang, "proposed")
    words = {"en": ("remediation.approvers names no approver for llm", "nobody else may approve"),
             "zh": ("remediation.approvers 没有为 llm 配置审批人", "已无其他人可批准")}[lang]
    assert words[0] in _first_section(unset).split("\n", 1)[0] and words[0] in unset["text"]
    assert words[1] in _first_section(left).split("\n", 1)[0] and words[1] in left["text"]
    assert words[1] not in unset["text"] and words[0] not in left["text"]
    # not told who may approve: the question alone, no claim about approvers
    first = _first_section(unknown).split("\n", 1)[0]
    assert first.endswith(("?*", "？*")) and words[0] not in first and words[1] not in first


@pytest.mark.parametrize("stage", ["held", "rolled_back", "rejected", "expired", "failed"])
def test_a_plan_that_no_longer_waits_shows_its_next_step_not_its_expiry(stage):
    stored, params = STAGES[stage]
    msg = P.plan_message(stored, "en", stage, **params)
    assert _field(msg, "Expires") is None
    step = _field(msg, "Next step")
    assert step, stage
    if stage in ("rolled_back", "rejected"):
        assert "`/gpumem triage llm/vllm-server`" in step
    assert _first_section(msg).split("\n", 1)[0].endswith("*`--max-model-len 8192 -&gt; 4096` on llm/vllm-server*")
    zh = P.plan_message(stored, "zh", stage, **params)
    assert _field(zh, "下一步") and _field(zh, "过期时间") is None


def _settings(approvers: dict, four_eyes: bool = True):
    from types import SimpleNamespace

    from runbooks.remediation.policy import ApprovalPolicy

    policy = ApprovalPolicy(enabled=True, approvers=approvers, four_eyes=four_eyes)
    return SimpleNamespace(remediation=SimpleNamespace(policy=policy))


def test_who_may_still_approve_is_what_the_policy_allows_less_the_requester_and_who_approved():
    from bot.service.approvals import may_still_approve

    both = {"llm": ("U0ONCALL", "U0ANA", "S0SRE"), "*": ("U0BO", "U0ANA")}
    # the namespace's list then "*" (once each); the requester out under four-eyes
    assert may_still_approve(_settings(both), _stored()) == (("U0ANA", "S0SRE", "U0BO"), True)
    assert may_still_approve(_settings(both, four_eyes=False), _stored()) == (
        ("U0ONCALL", "U0ANA", "S0SRE", "U0BO"), True)
    # one approval given: that user may not approve again
    assert may_still_approve(_settings(both), _stored(approvals=("U0ANA",), needed=2)) == (("S0SRE", "U0BO"), True)
    # only the requester listed: nobody else may; no list for the namespace: nobody at all
    assert may_still_approve(_settings({"llm": ("U0ONCALL",)}), _stored()) == ((), True)
    assert may_still_approve(_settings({"other": ("U0ANA",)}), _stored()) == ((), False)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_terminal_plan_leads_with_the_same_one_line_headline(lang):
    from bot.render.remediation import plan_text

    lines = plan_text(_stored(), lang).splitlines()
    assert lines[0] == {
        "en": "Approve `--max-model-len 8192 -> 4096` on llm/vllm-server? (needs 1 approval: "
              "gpumem apply p-0a1b2c3d --yes)",
        "zh": "批准在 llm/vllm-server 上执行 `--max-model-len 8192 -> 4096`？（需 1 个批准：gpumem apply p-0a1b2c3d --yes）",
    }[lang]
    assert lines[1].startswith({"en": "Plan p-0a1b2c3d: ", "zh": "计划 p-0a1b2c3d："}[lang])
    # two needed, one given: the one left; once it no longer waits, the plan's state leads (no question)
    two = plan_text(_stored(approvals=("U0APPROVER",), needed=2), "en").splitlines()[0]
    assert "(needs 1 approval: gpumem apply p-0a1b2c3d --yes)" in two
    assert plan_text(_stored("applied", ("U0APPROVER",)), "en").splitlines()[0].startswith("Plan p-0a1b2c3d: ")
