"""Fail closed on managed objects: `gpumem plan` still plans, `gpumem apply --yes` refuses a
Deployment Argo CD, Flux, Helm or a controller owner manages, with the number of writes the
stand-in API server received (0); `remediation.stopgap_on_gitops` allows exactly one write to a
GitOps-managed one (and records it as drift), never to a controller-owned one."""

from __future__ import annotations

import pytest

from bot.store.db import Store
from tests.support.kube_fixtures import run_cli, running_scenario

TARGET = "llm/vllm-server"

ARGO = {"annotations": {"argocd.argoproj.io/tracking-id": "llm-serving:apps/Deployment:llm/vllm-server"},
        "labels": {"app.kubernetes.io/instance": "llm-serving"},
        "managedFields": [{"manager": "argocd-controller", "operation": "Apply", "apiVersion": "apps/v1",
                           "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]}
FLUX = {"labels": {"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}}
HELM = {"labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "vllm", "meta.helm.sh/release-namespace": "llm"}}
KSERVE = {"ownerReferences": [{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                               "name": "llama", "uid": "6b0c", "controller": True, "blockOwnerDeletion": True}]}


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def managed(sc, meta: dict) -> None:
    obj = sc.kube.get("Deployment", "llm", "vllm-server")
    for key, value in meta.items():
        if isinstance(value, dict):
            obj["metadata"].setdefault(key, {}).update(value)
        else:
            obj["metadata"][key] = value
    sc.kube.add(obj)


def config(tmp_path, namespaces: list[str]) -> str:
    path = tmp_path / "gpumem.yaml"
    path.write_text("remediation:\n  stopgap_on_gitops: [" + ", ".join(f"'{n}'" for n in namespaces) + "]\n")
    return str(path)


def plan_and_apply(capsys, sc, tmp_path, *extra: str):
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, sc, store, "plan", TARGET, "--set", "max-num-seqs=64", "--json", *extra)
    assert rc == 0 and plan["state"] == "proposed", plan
    rc, text = run_cli(capsys, sc, store, "apply", plan["id"], "--yes", "--no-watch", *extra)
    return rc, text, plan, store


@pytest.mark.parametrize("meta, words", [
    (ARGO, "managed by Argo CD application llm-serving, sync policy unknown: no Application llm-serving in "
           "namespace argocd"),
    (FLUX, "managed by Flux Kustomization flux-system/apps"),
    (HELM, "managed by Helm release vllm"),
    (KSERVE, "managed by its controller owner InferenceService llama")])
def test_apply_refuses_a_managed_deployment_with_no_write(cluster, tmp_path, capsys, meta, words):
    managed(cluster, meta)
    rc, text, plan, store = plan_and_apply(capsys, cluster, tmp_path)
    assert rc == 2, text
    assert words in text and "nothing was written" in text
    assert cluster.kube.writes() == [] and cluster.kube.dry_runs() == []
    stored = Store.open(store).get(plan["id"])
    assert stored.state == "failed"
    assert [r.event for r in Store.open(store).audit()][-1] == "failed"


def test_the_refusal_says_what_to_do(cluster, tmp_path, capsys):
    managed(cluster, ARGO)
    _, text, _, _ = plan_and_apply(capsys, cluster, tmp_path)
    assert "gpumem plan --out FILE" in text and "remediation.stopgap_on_gitops" in text
    managed(cluster, KSERVE)
    (tmp_path / "again").mkdir()
    _, text, _, _ = plan_and_apply(capsys, cluster, tmp_path / "again")
    assert "never patched by gpumem: change the owner instead" in text
    assert cluster.kube.writes() == []


def test_the_switch_allows_exactly_one_write_to_a_gitops_object_and_records_the_drift(cluster, tmp_path, capsys):
    managed(cluster, ARGO)
    rc, text, plan, store = plan_and_apply(capsys, cluster, tmp_path, "--config", config(tmp_path, ["llm"]))
    assert rc == 0, text
    assert len(cluster.kube.writes(verb="patch")) == 1 and len(cluster.kube.writes()) == 1
    rows = [r for r in Store.open(store).audit() if r.event == "stopgap_on_gitops"]
    assert len(rows) == 1
    assert rows[0].detail["plan"] == plan["id"] and rows[0].detail["managers"][0]["name"] == "llm-serving"


def test_the_switch_for_another_namespace_still_refuses(cluster, tmp_path, capsys):
    managed(cluster, FLUX)
    rc, text, _, _ = plan_and_apply(capsys, cluster, tmp_path, "--config", config(tmp_path, ["other"]))
    assert rc == 2 and "managed by Flux" in text and cluster.kube.writes() == []


def test_the_switch_never_allows_a_controller_owned_object(cluster, tmp_path, capsys):
    managed(cluster, {**KSERVE, **ARGO})
    rc, text, _, _ = plan_and_apply(capsys, cluster, tmp_path, "--config", config(tmp_path, ["*"]))
    assert rc == 2 and "InferenceService llama" in text and cluster.kube.writes() == []


def test_a_bad_switch_names_the_field(tmp_path, capsys):
    from bot.config.settings import load_settings
    from bot.config.yaml_io import SettingsError

    path = config(tmp_path, ["LLM_Prod"])
    with pytest.raises(SettingsError, match=r"gpumem.yaml:2: remediation.stopgap_on_gitops.0: 'LLM_Prod' is not a "
                                            r"namespace name"):
        load_settings(path, {})


def test_the_plan_names_the_manager_and_what_will_happen_to_a_patch(cluster, tmp_path, capsys):
    managed(cluster, ARGO)
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0 and [(m["kind"], m["name"], m["sync_unknown"]) for m in plan["managers"]] == [
        ("argocd", "llm-serving", "not_found")]
    assert plan["managers"][0]["evidence"].startswith("annotation argocd.argoproj.io/tracking-id=llm-serving:")
    assert "sync policy could not be read" in plan["managers"][0]["patch_fate"]
    rc, text = run_cli(capsys, cluster, tmp_path / "b.db", "plan", TARGET, "--set", "max-num-seqs=64")
    assert rc == 0
    assert "Managed by:\n  - managed by Argo CD application llm-serving, sync policy unknown" in text
    assert "gpumem apply refuses this plan unless remediation.stopgap_on_gitops names namespace llm" in text
    assert cluster.kube.writes() == []


def test_a_plain_deployment_plan_has_no_managers(cluster, tmp_path, capsys):
    rc, plan = run_cli(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0 and plan["managers"] == []


@pytest.mark.parametrize("meta, expected", [
    (ARGO, ["# A kustomize JSON6902 patch.", "#       target: {group: apps, version: v1, kind: Deployment, "
                                           "name: vllm-server, namespace: llm}"]),
    (HELM, ["# A Helm release renders this object: the chart's values path for these fields is not known",
            "#   /spec/template/spec/containers/0/args/3: \"--max-num-seqs=64\""]),
    (KSERVE, ["# InferenceService llm/llama writes this Deployment: change its spec.predictor.model.args",
              "kind: InferenceService", "      args: ["])])
def test_plan_out_writes_the_change_for_the_source_of_truth(cluster, tmp_path, capsys, meta, expected):
    import yaml

    managed(cluster, meta)
    out = tmp_path / "change.yaml"
    rc, text = run_cli(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, "--set", "max-num-seqs=64",
                       "--out", str(out))
    assert rc == 0 and f"is in {out}" in text
    body = out.read_text(encoding="utf-8")
    for line in expected:
        assert line in body, body
    doc = yaml.safe_load(body)  # valid YAML: the ops list, or the owner's object
    if meta is KSERVE:
        assert doc["spec"]["predictor"]["model"]["args"] == ["--max-num-seqs=64"]
    else:
        assert [o["op"] for o in doc] == ["replace"]  # the live values' tests left out
        assert "/args/" in doc[0]["path"] and doc[0]["value"] == "--max-num-seqs=64"
    assert cluster.kube.writes() == []


def test_triage_names_the_manager_in_the_terminal_and_in_json(cluster, tmp_path, capsys):
    import json

    from bot.main import main

    managed(cluster, {**ARGO, "labels": {"app.kubernetes.io/instance": "llm-serving",
                                         "argocd.argoproj.io/instance": "llm-serving"}})
    argv = ["triage", TARGET, "--kubeconfig", str(cluster.kubeconfig), "--context", "prod"]
    main([*argv, "--json", "--lang", "en"])
    doc = json.loads(capsys.readouterr().out)
    assert [(m["kind"], m["name"]) for m in doc["managers"]] == [("argocd", "llm-serving")]
    assert doc["managers"][0]["text"].startswith("managed by Argo CD application llm-serving")
    main([*argv, "--lang", "zh"])
    out = capsys.readouterr().out
    assert "由Argo CD 应用 llm-serving管理" in out
    assert cluster.kube.writes() == []


def test_triage_of_a_plain_deployment_says_no_manager_was_found(cluster, tmp_path, capsys):
    import json

    from bot.main import main

    main(["triage", TARGET, "--kubeconfig", str(cluster.kubeconfig), "--context", "prod", "--json", "--lang", "en"])
    assert json.loads(capsys.readouterr().out)["managers"] == []


def test_the_handover_lists_an_applied_stopgap_as_drift_until_it_is_rolled_back(cluster, tmp_path, capsys):
    from bot.render.handover import handover_json, handover_text
    from bot.service.handover import build_handover

    managed(cluster, ARGO)
    rc, text, plan, store_path = plan_and_apply(capsys, cluster, tmp_path, "--config", config(tmp_path, ["llm"]))
    assert rc == 0, text
    store = Store.open(store_path)
    h = build_handover(store)
    (d,) = h.drift
    assert (d.plan, d.target, d.state) == (plan["id"], "llm/vllm-server", "applied")
    assert [(m["kind"], m["name"]) for m in d.managers] == [("argocd", "llm-serving")]
    assert handover_json(h)["drift"][0]["managers"] == ["argocd llm-serving"]
    assert d.changes == ("--max-num-seqs 128 -> 64",)
    assert handover_json(h)["drift"][0]["plan"] == plan["id"]
    assert "Stop-gaps on GitOps-managed objects, drift to fold back" in handover_text(h, "en")
    rc, _ = run_cli(capsys, cluster, store_path, "rollback", plan["id"], "--yes", "--config", config(tmp_path, ["llm"]))
    assert rc == 0 and build_handover(Store.open(store_path)).drift == ()


def test_plan_reads_the_application_in_the_configured_argocd_namespace(cluster, tmp_path, capsys):
    managed(cluster, ARGO)
    path = tmp_path / "gpumem.yaml"
    path.write_text("remediation:\n  argocd_namespace: gitops\n")
    rc, plan = run_cli(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, "--set", "max-num-seqs=64", "--json",
                       "--config", str(path))
    assert rc == 0 and plan["managers"][0]["namespace"] == "gitops"
    (call,) = [r for r in cluster.kube.calls() if r.resource == "applications"]
    assert (call.verb, call.api_group, call.namespace, call.name) == ("get", "argoproj.io", "gitops", "llm-serving")
