"""The plan headline names the object the plan writes: NAMESPACE/NAME for a Deployment,
NAMESPACE/KIND/NAME otherwise, in Slack and at the terminal, in en and zh."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from bot.render import slack_remediation as P
from bot.render.i18n import Catalog
from bot.render.remediation import headline_lines
from bot.store.db import StoredPlan
from runbooks.model.changes import SetArg
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support.kube_fixtures import run_cli, running_scenario
from tests.test_crd_schemas import ISVC

T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)


def _stored(kind: str, name: str, state: str = "proposed") -> StoredPlan:
    plan = Plan("p-0a1b2c3d", PlanTarget("prod", "llm", kind, name), "cap_max_model_len",
                (SetArg("kserve-container", "max-model-len", 8192, 4096),), "41", 7, (),
                "application/json-patch+json", "U0ONCALL", T0, T0 + timedelta(minutes=15), 1, "triage")
    return StoredPlan(plan, state, "C0INCIDENT", "1700000000.000100", (), T0)


@pytest.mark.parametrize("kind, name, shown", [
    ("InferenceService", "llama", "llm/inferenceservice/llama"),
    ("LeaderWorkerSet", "vllm", "llm/leaderworkerset/vllm"),
    ("StatefulSet", "vllm", "llm/statefulset/vllm"),
    ("Deployment", "vllm-server", "llm/vllm-server"),
])
def test_the_slack_headline_names_kind_and_name_unless_a_deployment(kind, name, shown):
    en, zh = Catalog.load("en"), Catalog.load("zh")
    # Slack mrkdwn: the arrow is escaped as Slack wants it
    assert P.headline(en, _stored(kind, name), "proposed") == f"Approve `--max-model-len 8192 -&gt; 4096` on {shown}?"
    assert P.headline(en, _stored(kind, name, "watched"), "held") == f"`--max-model-len 8192 -&gt; 4096` on {shown}"
    assert P.headline(zh, _stored(kind, name), "proposed") == f"批准在 {shown} 上执行 `--max-model-len 8192 -&gt; 4096`？"
    assert P.headline(en, _stored(kind, name), "proposed", approvers=("U0A",)).startswith(
        f"Approve `--max-model-len 8192 -&gt; 4096` on {shown}? (needs 1 of: <@U0A>)")


def test_the_terminal_headline_names_kind_and_name(tmp_path):
    en, zh = Catalog.load("en"), Catalog.load("zh")
    assert headline_lines(en, _stored("InferenceService", "llama")) == [
        "Approve `--max-model-len 8192 -> 4096` on llm/inferenceservice/llama? (needs 1 approval: "
        "gpumem apply p-0a1b2c3d --yes)"]
    assert "llm/inferenceservice/llama" in headline_lines(zh, _stored("InferenceService", "llama"))[0]
    assert headline_lines(en, _stored("Deployment", "vllm-server"))[0].startswith(
        "Approve `--max-model-len 8192 -> 4096` on llm/vllm-server? ")


def test_gpumem_plan_on_an_inference_service_leads_with_its_kind(tmp_path, capsys):
    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(copy.deepcopy(ISVC))
        rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/isvc/llama", "--set", "max-num-seqs=64")
    assert rc == 0, text
    assert "Approve `--max-num-seqs 128 -> 64` on llm/inferenceservice/llama? " in text
