"""Managed objects in Slack: a plan for a Deployment Argo CD tracks says so in its thread with
the change for the source of truth as a file; Approve refuses it with the number of writes the
stand-in API server received (0); `remediation.stopgap_on_gitops` lets exactly one through."""

from __future__ import annotations

from bot.store.db import Store
from tests.test_managers_apply import ARGO, KSERVE, managed
from tests.test_slack_remediation import (
    APPROVER,
    P,
    _click,
    _command,
    _top_level_plan,
    _wait_edit,
    remediation_bot,
)


def _plan_and_approve(sc, fake, bot, meta):
    managed(sc, meta)
    _command(bot, fake, "plan llm/vllm-server --set max-num-seqs=64 --context prod", n=101)
    plan_id, plan_ts = _top_level_plan(fake)
    return plan_id, plan_ts


def test_approve_refuses_a_deployment_argocd_tracks_and_the_thread_has_its_source_change(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        plan_id, plan_ts = _plan_and_approve(sc, fake, bot, ARGO)
        said = fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == plan_ts
                             and "Managed by:" in (c.args.get("text") or ""), timeout=20)[-1].args["text"]
        assert "managed by Argo CD application llm-serving" in said
        assert "gpumem apply refuses this plan unless remediation.stopgap_on_gitops names namespace llm" in said
        fake.wait_for("files.completeUploadExternal", timeout=20)
        (upload,) = fake.uploads.values()
        assert upload["filename"] == f"gpumem-{plan_id}-vllm-server.yaml"
        assert b"# A kustomize JSON6902 patch." in upload["data"]
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=plan_ts, n=102)
        refused = _wait_edit(fake, plan_ts, "Not applied, nothing was written")
        assert "managed by Argo CD application llm-serving" in refused and "gpumem apply" not in refused
        assert sc.kube.writes() == [] and sc.kube.dry_runs() == []
        assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "failed"


def test_the_switch_lets_exactly_one_write_through_in_slack(tmp_path):
    with remediation_bot(tmp_path, extra="  stopgap_on_gitops: [llm]\n") as (sc, fake, bot):
        plan_id, plan_ts = _plan_and_approve(sc, fake, bot, ARGO)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=plan_ts, n=102)
        _wait_edit(fake, plan_ts, "Held:", timeout=60)
        assert len(sc.kube.writes(verb="patch")) == 1 and len(sc.kube.writes()) == 1
        store = Store.open(tmp_path / "gpumem.db")
        assert [r.detail["plan"] for r in store.audit() if r.event == "stopgap_on_gitops"] == [plan_id]


def test_the_switch_never_lets_a_write_to_a_controller_owned_object_through_in_slack(tmp_path):
    with remediation_bot(tmp_path, extra="  stopgap_on_gitops: ['*']\n") as (sc, fake, bot):
        plan_id, plan_ts = _plan_and_approve(sc, fake, bot, KSERVE)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=plan_ts, n=102)
        refused = _wait_edit(fake, plan_ts, "Not applied, nothing was written")
        assert "InferenceService llama" in refused and sc.kube.writes() == [] and sc.kube.dry_runs() == []
