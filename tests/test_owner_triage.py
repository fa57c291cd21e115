"""Live triage of NAMESPACE/KIND/NAME targets through the real client against the stand-in API
server: an InferenceService is followed to the Deployment its controller wrote (by owner
reference) and its flags are read from the InferenceService's own spec; a Deployment an
InferenceService owns names the InferenceService as where its spec is declared; Argo CD's sync
policy is read from the Application (403 / 404: unknown, and said so)."""

from __future__ import annotations

import copy
import json

import pytest

from bot.main import main
from runbooks.model.phrases import Phrase
from tests.support.kube_fixtures import running_scenario
from tests.test_crd_schemas import APP, ISVC

OWNER = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "name": "llama", "uid": "u-1",
         "controller": True, "blockOwnerDeletion": True}
TRACKED = {"argocd.argoproj.io/tracking-id": "llm-serving:apps/Deployment:llm/vllm-server"}


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        dep = sc.kube.get("Deployment", "llm", "vllm-server")
        dep["metadata"]["ownerReferences"] = [OWNER]
        sc.kube.add(dep)
        isvc = copy.deepcopy(ISVC)
        isvc["spec"]["predictor"]["model"]["args"] = ["--max-num-seqs=48", "--gpu-memory-utilization=0.85"]
        sc.kube.add(isvc)
        yield sc


def triage(capsys, sc, target: str, lang: str = "en", as_json: bool = True):
    argv = ["triage", target, "--kubeconfig", str(sc.kubeconfig), "--context", "prod", "--lang", lang]
    rc = main([*argv, "--json"] if as_json else argv)
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if as_json else out.out + out.err)


def test_an_inference_service_is_followed_to_its_deployment_and_its_flags_read_from_its_spec(cluster, capsys,
                                                                                              tmp_path):
    from datetime import UTC, datetime

    from collectors.live import LiveOptions, collect_live

    collection = collect_live("llm", "llama", LiveOptions(kind="InferenceService"), datetime.now(UTC),
                              api=cluster.api("prod"))
    ev = collection.evidence
    assert ev.target == "llm/inferenceservice/llama"
    assert (ev.workload.kind, ev.workload.name) == ("Deployment", "vllm-server")  # the pods' own object
    assert (ev.server_config.max_num_seqs, ev.server_config.memory_fraction) == (48, 0.85)  # the ISVC's spec
    assert ev.server_config.source == "inferenceservice.yaml"
    assert len(ev.pods) >= 1
    assert "inferenceservice.yaml" in collection.files and "deployment.yaml" in collection.files
    from bot.service.triage import write_bundle
    from collectors.bundle import load_bundle

    write_bundle(tmp_path / "bundle", collection)  # replayed, the bundle reads the flags from the same spec
    replay = load_bundle(tmp_path / "bundle")
    assert replay.server_config.max_num_seqs == 48 and replay.server_config.source == "inferenceservice.yaml"
    assert replay.target == ev.target
    _rc, doc = triage(capsys, cluster, "llm/isvc/llama")
    assert doc["target"] == "llm/inferenceservice/llama"
    assert [(m["kind"], m["name"], m.get("owner_kind")) for m in doc["managers"]] == [
        ("controller", "llama", "InferenceService")]
    gets = [r.path for r in cluster.kube.calls(verb="get")]
    assert any("/inferenceservices/llama" in p for p in gets)
    assert cluster.kube.writes() == []


def test_a_deployment_an_inference_service_owns_names_where_its_spec_is_declared(cluster, capsys):
    _rc, text = triage(capsys, cluster, "llm/vllm-server", as_json=False)
    assert "managed by its controller owner InferenceService llama" in text
    assert "the spec is declared in InferenceService llama: gpumem plan writes a flag there" in text
    _rc, text = triage(capsys, cluster, "llm/vllm-server", lang="zh", as_json=False)
    assert "规格声明在 InferenceService llama 中" in text


def test_an_owner_that_is_not_there_is_not_found(cluster, capsys):
    rc, text = triage(capsys, cluster, "llm/lws/nope", as_json=False)
    assert rc == 2 and "LeaderWorkerSet llm/nope not found" in text


def test_an_owner_with_no_deployment_says_so(cluster, capsys):
    other = copy.deepcopy(ISVC)
    other["metadata"]["name"] = "serverless"
    cluster.kube.add(other)
    rc, text = triage(capsys, cluster, "llm/isvc/serverless", as_json=False)
    assert rc == 3 and "InferenceService llm/serverless owns no Deployment in namespace llm" in text
    assert "serverless mode" in text


@pytest.mark.parametrize("app, words", [
    (APP, "self-heal on"),
    (None, "sync policy unknown: no Application llm-serving in namespace argocd"),
])
def test_triage_reads_the_argo_cd_application_sync_policy(cluster, capsys, app, words):
    dep = cluster.kube.get("Deployment", "llm", "vllm-server")
    dep["metadata"]["annotations"].update(TRACKED)
    cluster.kube.add(dep)
    if app is not None:
        cluster.kube.add(copy.deepcopy(app))
    _rc, text = triage(capsys, cluster, "llm/vllm-server", as_json=False)
    assert f"managed by Argo CD application llm-serving, {words}" in text, text
    assert "sync policy not read here" not in text
    assert any("/applications/llm-serving" in r.path for r in cluster.kube.calls(verb="get"))


def test_a_forbidden_application_is_unknown_never_a_guess(cluster, capsys):
    dep = cluster.kube.get("Deployment", "llm", "vllm-server")
    dep["metadata"]["annotations"].update(TRACKED)
    cluster.kube.add(dep)
    cluster.kube.add(copy.deepcopy(APP))
    cluster.kube.fail(r"/applications/llm-serving", 403)
    _rc, text = triage(capsys, cluster, "llm/vllm-server", as_json=False)
    assert "managed by Argo CD application llm-serving, sync policy unknown" in text
    assert "self-heal on" not in text


def _sts(name: str, owner_kind: str, owner: str, args: list[str]) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "llm",
                         "ownerReferences": [{"apiVersion": "v1", "kind": owner_kind, "name": owner, "uid": f"u-{owner}",
                                              "controller": True}]},
            "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": {"sts": name}},
                     "template": {"metadata": {"labels": {"sts": name}},
                                  "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5",
                                                           "args": args}]}}}}


def test_a_leader_worker_set_is_followed_to_its_leader_and_its_workers_to_it(tmp_path, capsys):
    from datetime import UTC, datetime

    from collectors.live import LiveOptions, collect_live
    from tests.test_crd_schemas import LWS

    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(copy.deepcopy(LWS),
                    _sts("vllm", "LeaderWorkerSet", "vllm", ["--max-num-seqs", "12"]),
                    _sts("vllm-0", "Pod", "vllm-0", ["--max-num-seqs", "12"]),
                    {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "vllm-0", "namespace": "llm", "labels": {"sts": "vllm"},
                                  "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm",
                                                       "uid": "u-vllm", "controller": True}]},
                     "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5"}]}})
        ev = collect_live("llm", "vllm", LiveOptions(kind="LeaderWorkerSet"), datetime.now(UTC),
                          api=sc.api("prod")).evidence
        assert (ev.workload.kind, ev.workload.name) == ("StatefulSet", "vllm")
        assert ev.server_config.max_num_seqs == 128  # the LeaderWorkerSet's leader template, not the StatefulSet
        worker = collect_live("llm", "vllm-0", LiveOptions(kind="StatefulSet"), datetime.now(UTC),
                              api=sc.api("prod")).evidence
        assert [(m.kind, m.owner_kind, m.name) for m in worker.workload.managers] == [
            ("controller", "LeaderWorkerSet", "vllm")]
        assert "owner references of the pods lead to LeaderWorkerSet/vllm" in worker.workload.managers[0].evidence
        assert sc.kube.writes() == []


def test_a_triage_of_an_inference_service_is_recorded_and_its_action_planned_on_it(cluster, tmp_path, capsys):
    config = tmp_path / "gpumem.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'gpumem.db'}\n", encoding="utf-8")
    argv = ["--kubeconfig", str(cluster.kubeconfig), "--context", "prod", "--config", str(config), "--lang", "en"]
    assert main(["plan", "llm/isvc/llama", "--set", "max-num-seqs=40", "--json", *argv]) == 0  # makes the store
    capsys.readouterr()
    main(["triage", "llm/isvc/llama", "--json", *argv])
    doc = json.loads(capsys.readouterr().out)
    flags_only = [a for a in doc["actions"] if a.get("changes") and all(c["kind"] == "set_arg" for c in a["changes"])]
    scaled = [a for a in doc["actions"] if any(c["kind"] == "scale" for c in a.get("changes") or ())]
    assert flags_only and scaled, [a["id"] for a in doc["actions"]]
    assert main(["plan", "llm/isvc/llama", "--action", scaled[0]["id"], "--json", *argv]) == 2  # flags only
    assert "takes server flags only" in capsys.readouterr().err
    assert main(["plan", "llm/isvc/llama", "--action", flags_only[0]["id"], "--json", *argv]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["target"]["kind"], plan["target"]["name"]) == ("InferenceService", "llama")
    assert all(op["path"].startswith("/spec/predictor/model/") or op["path"].startswith("/metadata")
               for op in plan["patch"])
    assert cluster.kube.writes() == []


def _watch(cluster, tmp_path, capsys, controller_rewrites: bool):
    """Plan and apply on the InferenceService, then the watch with a stand-in KServe controller
    that (or not) rewrites the Deployment from the InferenceService at the first look's wait."""
    from bot.service import remediate
    from bot.store.db import Store
    from tests.support.kube_fixtures import manual_clock, run_cli

    clock = manual_clock(cluster, ready_after_s=30.0)
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", "llm/isvc/llama", "--set", "max-num-seqs=40", "--json")
    assert rc == 0 and plan["workload"]["name"] == "vllm-server", plan
    rc, text = run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")
    assert rc == 0, text
    before = cluster.kube.get("Deployment", "llm", "vllm-server")["metadata"]["generation"]
    writer = remediate.writer_for(str(cluster.kubeconfig), "prod")
    done = []

    def sleep(seconds: float) -> None:
        if controller_rewrites and not done:  # kserve-controller carries the new args into the Deployment
            dep = cluster.kube.get("Deployment", "llm", "vllm-server")
            args = dep["spec"]["template"]["spec"]["containers"][0].get("args") or []
            writer.patch("Deployment", "llm", "vllm-server",
                         {"spec": {"template": {"metadata": {"annotations": {"serving.kserve.io/args": "40"}},
                                                "spec": {"containers": [{"name": "vllm", "args": args}]}}}},
                         "application/strategic-merge-patch+json")
            done.append(True)
        clock.advance(seconds)

    s = Store.open(store)
    try:
        stored, seen = remediate.watch_after(s, writer, plan["id"], 300, poll_s=30, clock=clock, sleep=sleep)
    finally:
        s.close()
    return before, stored, seen


def test_the_watch_of_an_inference_service_plan_waits_for_its_controller_to_rewrite_the_deployment(
        cluster, tmp_path, capsys):
    before, stored, seen = _watch(cluster, tmp_path, capsys, controller_rewrites=True)
    assert seen.outcome == "held" and stored.state == "watched", seen.notes
    assert seen.observed_generation > before


def test_a_controller_that_never_rewrites_the_deployment_is_not_held(cluster, tmp_path, capsys):
    _before, stored, seen = _watch(cluster, tmp_path, capsys, controller_rewrites=False)
    assert seen.outcome == "failed" and seen.notes[-1] == Phrase("watch.not_rolled_out")
    assert stored.state == "failed"


def test_collect_takes_the_same_target_and_keeps_the_owner_in_the_bundle(cluster, tmp_path, capsys):
    out = tmp_path / "bundle"
    rc = main(["collect", "llm/isvc/llama", "--out", str(out), "--kubeconfig", str(cluster.kubeconfig),
               "--context", "prod", "--lang", "en"])
    capsys.readouterr()
    assert rc == 0
    assert (out / "inferenceservice.yaml").is_file() and (out / "deployment.yaml").is_file()
    assert "--max-num-seqs=48" in (out / "inferenceservice.yaml").read_text(encoding="utf-8")
