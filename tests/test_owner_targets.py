"""NAMESPACE/KIND/NAME targets end to end through the real client against the stand-in API server:
`gpumem plan` and `gpumem apply` on an InferenceService (its model args, or its predictor
containers), a LeaderWorkerSet (leader and worker templates in one JSON patch) and a StatefulSet;
a Deployment an InferenceService owns is planned on the InferenceService; each guard refusing
with the writes the stand-in received counted per verb."""

from __future__ import annotations

import copy

import pytest

from bot.store.db import Store
from tests.support.kube_fixtures import run_cli, running_scenario
from tests.test_crd_schemas import CONTAINER, ISVC, ISVC_CONTAINERS, LWS


@pytest.fixture
def sc(tmp_path):
    with running_scenario(None, tmp_path) as scenario:
        yield scenario


def _deployment(name: str, owner: dict | None = None) -> dict:
    meta = {"name": name, "namespace": "llm"}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": "u-1", "controller": True}]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "kserve-container",
                                                           "image": "kserve/huggingfaceserver:v0.15.0",
                                                           "args": ["--model_name=llama"]}]}}}}


def plan(capsys, sc, tmp_path, target: str, *sets: str, db: str = "gpumem.db"):
    argv = ["plan", target, *[a for s in sets for a in ("--set", s)], "--json"]
    return run_cli(capsys, sc, tmp_path / db, *argv)


def apply(capsys, sc, tmp_path, plan_id: str, db: str = "gpumem.db"):
    return run_cli(capsys, sc, tmp_path / db, "apply", plan_id, "--yes", "--no-watch")


def verbs(sc) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in sc.kube.writes():
        out[r.verb] = out.get(r.verb, 0) + 1
    return out


def test_an_inference_service_model_args_are_planned_and_written_by_json_patch(sc, tmp_path, capsys):
    sc.kube.add(copy.deepcopy(ISVC))
    rc, p = plan(capsys, sc, tmp_path, "llm/isvc/llama", "max-num-seqs=64")
    assert rc == 0, p
    assert p["target"]["kind"] == "InferenceService" and p["patch_type"] == "application/json-patch+json"
    assert {"op": "replace", "path": "/spec/predictor/model/args/0", "value": "--max-num-seqs=64"} in p["patch"]
    assert sc.kube.writes() == []
    rc, text = apply(capsys, sc, tmp_path, p["id"])
    assert rc == 0, text
    assert verbs(sc) == {"patch": 1} and len(sc.kube.dry_runs()) == 1
    write = sc.kube.writes()[0]
    assert write.resource == "inferenceservices" and write.content_type == "application/json-patch+json"
    stored = sc.kube.get("InferenceService", "llm", "llama")
    assert stored["spec"]["predictor"]["model"]["args"] == ["--max-num-seqs=64", "--gpu-memory-utilization=0.9"]
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "rollback", p["id"], "--yes")
    assert rc == 0, text
    assert sc.kube.get("InferenceService", "llm", "llama")["spec"]["predictor"]["model"]["args"] == \
        ISVC["spec"]["predictor"]["model"]["args"]
    assert verbs(sc) == {"patch": 2}


def test_predictor_containers_are_edited_where_they_are(sc, tmp_path, capsys):
    sc.kube.add(copy.deepcopy(ISVC_CONTAINERS))
    rc, p = plan(capsys, sc, tmp_path, "llm/InferenceService/llama", "max-num-seqs=64")
    assert rc == 0, p
    assert [op["path"] for op in p["patch"]] == ["/spec/predictor/containers/0/args/3"] * 2
    rc, text = apply(capsys, sc, tmp_path, p["id"])
    assert rc == 0, text
    assert sc.kube.get("InferenceService", "llm", "llama")["spec"]["predictor"]["containers"][0]["args"] == [
        "--model", "/mnt/models", "--max-num-seqs", "64"]
    assert verbs(sc) == {"patch": 1}


def _lws(leader_seqs: str = "128", worker_seqs: str = "128", worker_serves: bool = True) -> dict:
    lws = copy.deepcopy(LWS)
    lwt = lws["spec"]["leaderWorkerTemplate"]
    lwt["leaderTemplate"]["spec"]["containers"][0]["args"][3] = leader_seqs
    if worker_serves:
        lwt["workerTemplate"]["spec"]["containers"][0]["args"][3] = worker_seqs
    else:
        lwt["workerTemplate"]["spec"]["containers"][0] = {"name": "ray-worker", "image": "rayproject/ray:2.9.0",
                                                          "command": ["ray", "start", "--block"]}
    return lws


def test_a_leader_worker_set_changes_leader_and_worker_in_one_patch(sc, tmp_path, capsys):
    sc.kube.add(_lws())
    rc, p = plan(capsys, sc, tmp_path, "llm/lws/vllm", "max-num-seqs=64")
    assert rc == 0, p
    assert sorted({op["path"] for op in p["patch"]}) == [
        "/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/args/3",
        "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/args/3"]
    assert [(c["flag"], c["old"], c["new"]) for c in p["changes"]] == [("max-num-seqs", "128", 64)]
    rc, text = run_cli(capsys, sc, tmp_path / "text.db", "plan", "llm/lws/vllm", "--set", "max-num-seqs=64")
    assert "Each change goes to the leader template and the worker template alike, in this one patch." in text
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "apply", p["id"], "--yes")  # the watch: not for an LWS
    assert rc == 0, text
    assert "not watched" in text
    assert verbs(sc) == {"patch": 1}
    lwt = sc.kube.get("LeaderWorkerSet", "llm", "vllm")["spec"]["leaderWorkerTemplate"]
    assert lwt["leaderTemplate"]["spec"]["containers"][0]["args"][3] == "64"
    assert lwt["workerTemplate"]["spec"]["containers"][0]["args"][3] == "64"
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "rollback", p["id"], "--yes")
    assert rc == 0, text
    lwt = sc.kube.get("LeaderWorkerSet", "llm", "vllm")["spec"]["leaderWorkerTemplate"]
    assert lwt == LWS["spec"]["leaderWorkerTemplate"]
    assert verbs(sc) == {"patch": 2}


def test_templates_that_disagree_on_the_flag_are_refused_with_no_write(sc, tmp_path, capsys):
    sc.kube.add(_lws(worker_seqs="96"))
    rc, text = plan(capsys, sc, tmp_path, "llm/lws/vllm", "max-num-seqs=64")
    assert rc == 2
    assert "disagree on --max-num-seqs before the edit (leader: 128; worker: 96)" in text
    assert sc.kube.writes() == [] and sc.kube.dry_runs() == []


def test_a_worker_that_runs_no_server_is_left_as_it_is(sc, tmp_path, capsys):
    sc.kube.add(_lws(worker_serves=False))
    rc, p = plan(capsys, sc, tmp_path, "llm/lws/vllm", "max-num-seqs=64")
    assert rc == 0, p
    assert {op["path"] for op in p["patch"]} == {"/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/args/3"}


def test_a_stateful_set_is_planned_and_written(sc, tmp_path, capsys):
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "vllm", "namespace": "llm"},
           "spec": {"replicas": 1, "serviceName": "vllm", "selector": {"matchLabels": {"app": "vllm"}},
                    "template": {"metadata": {"labels": {"app": "vllm"}}, "spec": {"containers": [copy.deepcopy(CONTAINER)]}}}}
    sc.kube.add(sts)
    rc, p = plan(capsys, sc, tmp_path, "llm/sts/vllm", "max-num-seqs=64")
    assert rc == 0, p
    assert p["target"]["kind"] == "StatefulSet"
    rc, text = apply(capsys, sc, tmp_path, p["id"])
    assert rc == 0, text
    assert verbs(sc) == {"patch": 1}
    assert sc.kube.get("StatefulSet", "llm", "vllm")["spec"]["template"]["spec"]["containers"][0]["args"][3] == "64"


def test_a_deployment_an_inference_service_owns_is_planned_on_the_inference_service(sc, tmp_path, capsys):
    sc.kube.add(copy.deepcopy(ISVC), _deployment("llama-predictor", ISVC))
    rc, p = plan(capsys, sc, tmp_path, "llm/llama-predictor", "max-num-seqs=64")
    assert rc == 0, p
    assert (p["target"]["kind"], p["target"]["name"]) == ("InferenceService", "llama")
    assert (p["workload"]["kind"], p["workload"]["name"]) == ("Deployment", "llama-predictor")
    stored = Store.open(tmp_path / "gpumem.db").get(p["id"]).plan
    assert "is written by InferenceService llama, so the plan writes InferenceService llama" in stored.origin
    rc, text = run_cli(capsys, sc, tmp_path / "b.db", "plan", "llm/llama-predictor", "--set", "max-num-seqs=64")
    assert "Writes InferenceService llm/llama, where the pods are declared: its controller writes Deployment " \
           "llm/llama-predictor from it" in text
    rc, text = apply(capsys, sc, tmp_path, p["id"])
    assert rc == 0, text
    assert [(r.verb, r.resource) for r in sc.kube.writes()] == [("patch", "inferenceservices")]
    assert sc.kube.get("Deployment", "llm", "llama-predictor")["spec"]["template"]["spec"]["containers"][0][
        "args"] == ["--model_name=llama"]


def test_a_deployment_owned_by_a_controller_gpumem_does_not_write_is_still_refused(sc, tmp_path, capsys):
    kubeai = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "llama"}}
    dep = _deployment("llama", kubeai)
    dep["spec"]["template"]["spec"]["containers"][0] = copy.deepcopy(CONTAINER)
    sc.kube.add(dep)
    rc, p = plan(capsys, sc, tmp_path, "llm/llama", "max-num-seqs=64")
    assert rc == 0 and p["target"]["kind"] == "Deployment", p
    rc, text = apply(capsys, sc, tmp_path, p["id"])
    assert rc == 2 and "its controller owner Model llama" in text and "nothing was written" in text
    assert sc.kube.writes() == [] and sc.kube.dry_runs() == []


def test_an_inference_service_argo_cd_syncs_is_refused_with_no_write(sc, tmp_path, capsys):
    isvc = copy.deepcopy(ISVC)
    isvc["metadata"]["annotations"] = {
        "argocd.argoproj.io/tracking-id": "llm-serving:serving.kserve.io/InferenceService:llm/llama"}
    sc.kube.add(isvc)
    rc, p = plan(capsys, sc, tmp_path, "llm/isvc/llama", "max-num-seqs=64")
    assert rc == 0, p
    rc, text = apply(capsys, sc, tmp_path, p["id"])
    assert rc == 2 and "Argo CD application llm-serving" in text
    assert sc.kube.writes() == [] and sc.kube.dry_runs() == []
    assert Store.open(tmp_path / "gpumem.db").get(p["id"]).state == "failed"


def test_an_inference_service_changed_since_planned_is_refused_before_the_dry_run(sc, tmp_path, capsys):
    sc.kube.add(copy.deepcopy(ISVC))
    rc, p = plan(capsys, sc, tmp_path, "llm/isvc/llama", "max-num-seqs=64")
    moved = sc.kube.get("InferenceService", "llm", "llama")
    moved["spec"]["predictor"]["minReplicas"] = 2
    sc.kube.add(moved)
    sc.kube.objects[("serving.kserve.io", "inferenceservices")][("llm", "llama")]["metadata"]["resourceVersion"] = "9"
    rc, text = apply(capsys, sc, tmp_path, p["id"])
    assert rc == 2 and "changed since plan" in text
    assert sc.kube.writes() == [] and sc.kube.dry_runs() == []


def test_a_write_the_crd_schema_refuses_fails_at_the_dry_run_with_no_write(sc, tmp_path, capsys):
    sc.kube.add(copy.deepcopy(ISVC))
    rc, p = plan(capsys, sc, tmp_path, "llm/isvc/llama", "max-num-seqs=64")
    assert rc == 0, p
    sc.kube.fail(r"inferenceservices/llama\?.*dryRun=All", 422)
    rc, text = apply(capsys, sc, tmp_path, p["id"])
    assert rc == 2, text
    assert sc.kube.writes() == []


def test_a_rollback_after_someone_changed_the_model_args_is_refused(sc, tmp_path, capsys):
    sc.kube.add(copy.deepcopy(ISVC))
    rc, p = plan(capsys, sc, tmp_path, "llm/isvc/llama", "max-num-seqs=64")
    rc, text = apply(capsys, sc, tmp_path, p["id"])
    assert rc == 0, text
    now = sc.kube.get("InferenceService", "llm", "llama")
    now["spec"]["predictor"]["model"]["args"][0] = "--max-num-seqs=32"
    sc.kube.add(now)
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "rollback", p["id"], "--yes")
    assert rc == 2 and "/spec/predictor/model/args/0" in text
    assert verbs(sc) == {"patch": 1}


def test_other_changes_on_an_owner_are_refused_by_name(sc, tmp_path, capsys):
    sc.kube.add(copy.deepcopy(ISVC))
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/isvc/llama", "--replicas", "3")
    assert rc == 2 and "InferenceService llm/llama takes server flags only" in text and "scale" in text
    assert sc.kube.writes() == []


def test_a_kind_gpumem_does_not_take_is_a_usage_error_naming_the_kinds(sc, tmp_path, capsys):
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/daemonset/x", "--set", "max-num-seqs=8")
    assert rc == 2
    assert "daemonset is not a kind gpumem takes" in text and "inferenceservice (isvc), leaderworkerset (lws)" in text
    assert sc.kube.requests == []


def test_namespace_name_with_kind_statefulset_still_plans_the_stateful_set(sc, tmp_path, capsys):
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "vllm", "namespace": "llm"},
           "spec": {"replicas": 1, "serviceName": "vllm", "selector": {"matchLabels": {"app": "vllm"}},
                    "template": {"metadata": {"labels": {"app": "vllm"}},
                                 "spec": {"containers": [copy.deepcopy(CONTAINER)]}}}}
    sc.kube.add(sts)
    rc, p = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/vllm", "--kind", "StatefulSet", "--set",
                    "max-num-seqs=64", "--json")
    assert rc == 0 and p["target"]["kind"] == "StatefulSet", p


def test_slack_plans_a_leader_worker_set_and_says_after_approve_that_its_rollout_is_not_watched(tmp_path):
    from tests.test_slack_remediation import (
        APPROVER,
        _click,
        _command,
        _top_level_plan,
        _wait_edit,
        remediation_bot,
    )

    with remediation_bot(tmp_path) as (kube_sc, fake, bot):
        kube_sc.kube.add(_lws())
        ack = _command(bot, fake, "plan llm/lws/vllm --set max-num-seqs=64 --context prod", n=201)
        assert ack["text"].startswith("On it: a plan for llm/leaderworkerset/vllm")
        plan_id, plan_ts = _top_level_plan(fake)
        assert kube_sc.kube.writes() == []
        _click(bot, fake, "gpumem_plan_approve", plan_id, plan_ts, APPROVER, n=202)
        _wait_edit(fake, plan_ts, "not judged")
        assert [(r.verb, r.resource) for r in kube_sc.kube.writes()] == [("patch", "leaderworkersets")]


@pytest.mark.parametrize("field, value, status", [
    (("model", "args", 0), "--max-num-seqs=100", 422),  # the `test` op on the old element
    (("minReplicas",), 2, 409),                          # the resourceVersion precondition
])
def test_a_change_between_the_dry_run_and_the_write_is_refused_by_the_precondition(sc, tmp_path, capsys, field,
                                                                                   value, status):
    """Someone edits the InferenceService right after the dry run passed: the write's `test` ops
    (a changed element) or its resourceVersion precondition (any other change) make the API
    server refuse it, nothing is overwritten, and the plan is failed: one write received, refused."""
    from bot.service import remediate
    from runbooks.model.errors import ChangedSincePlanned

    sc.kube.add(copy.deepcopy(ISVC))
    rc, p = plan(capsys, sc, tmp_path, "llm/isvc/llama", "max-num-seqs=64")
    assert rc == 0, p
    store = Store.open(tmp_path / "gpumem.db")
    writer = remediate.writer_for(str(sc.kubeconfig), "prod")

    def someone_edits() -> None:
        now = sc.kube.get("InferenceService", "llm", "llama")
        node = now["spec"]["predictor"]
        for key in field[:-1]:
            node = node[key]
        node[field[-1]] = value
        now["metadata"]["resourceVersion"] = str(int(now["metadata"]["resourceVersion"]) + 50)
        sc.kube.add(now)

    try:
        store.approve(p["id"], "U1", store.get(p["id"]).plan.content_hash)
        with pytest.raises(ChangedSincePlanned):
            remediate.apply_approved(store, writer, p["id"], "U1", on_dry_run=someone_edits)
        assert store.get(p["id"]).state == "failed"
    finally:
        store.close()
    assert [(r.verb, r.status) for r in sc.kube.writes()] == [("patch", status)]
    after = sc.kube.get("InferenceService", "llm", "llama")["spec"]["predictor"]
    assert after["model"]["args"][0] == ("--max-num-seqs=100" if status == 422 else "--max-num-seqs=128")


@pytest.mark.parametrize("obj, target, group", [
    (ISVC, "llm/isvc/llama", "{group: serving.kserve.io, version: v1beta1, kind: InferenceService, name: llama"),
    (LWS, "llm/lws/vllm", "{group: leaderworkerset.x-k8s.io, version: v1, kind: LeaderWorkerSet, name: vllm"),
])
def test_plan_out_names_the_owners_api_group_for_kustomize(sc, tmp_path, capsys, obj, target, group):
    sc.kube.add(copy.deepcopy(obj))
    out = tmp_path / "change.yaml"
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", target, "--set", "max-num-seqs=64", "--out", str(out))
    assert rc == 0, text
    assert group in out.read_text(encoding="utf-8")


def test_slack_triages_an_inference_service_and_its_plan_button_plans_on_it(tmp_path):
    """`/gpumem triage llm/isvc/llama`: the diagnosis names where the spec is declared, and a
    Plan button under it makes a plan whose target is the InferenceService (nothing written)."""
    import json as _json

    from tests.support.slack_kit import CHANNEL, dispatch_command, is_diagnosis
    from tests.test_slack_remediation import _click, _plan_posted, remediation_bot

    with remediation_bot(tmp_path) as (kube_sc, fake, bot):
        dep = kube_sc.kube.get("Deployment", "llm", "vllm-server")
        dep["metadata"]["ownerReferences"] = [{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                                               "name": "llama", "uid": "u-1", "controller": True}]
        isvc = copy.deepcopy(ISVC)
        isvc["spec"]["predictor"]["model"]["args"] = ["--max-num-seqs=48", "--gpu-memory-utilization=0.85"]
        kube_sc.kube.add(dep, isvc)
        dispatch_command(bot, fake, "triage llm/isvc/llama --context prod")
        diagnosis = fake.wait_for("chat.update", where=is_diagnosis, timeout=60)[0].args
        text = _json.dumps(diagnosis["blocks"])
        assert "InferenceService" in text and "llm/inferenceservice/llama" in text
        block = next(b for b in diagnosis["blocks"] if b.get("block_id") == "gpumem_plans")
        values = [_json.loads(e["value"]) for e in block["elements"]]
        assert {v["t"] for v in values} == {"llm/inferenceservice/llama"}
        flags_only = [e for e, v in zip(block["elements"], values, strict=True)
                      if all(c[0] == "set_arg" for c in v["ch"])]
        assert flags_only, values
        _click(bot, fake, flags_only[0]["action_id"], flags_only[0]["value"], diagnosis["ts"], "U0REQUESTER")
        plan_id, _ts = _plan_posted(fake, diagnosis["ts"])
        assert plan_id.startswith("p-") and kube_sc.kube.writes() == []
        posted = _json.dumps([c.args for c in fake.thread(CHANNEL, diagnosis["ts"])])
        assert "InferenceService llm/llama" in posted
