"""The writer identity's Role grants what the actuator calls and nothing more: a test fails if the
actuator makes a call deploy/overlays/remediation/rbac-writer.yaml does not grant, and a missing verb is named."""

from __future__ import annotations

import json

import yaml

from bot.main import main
from tests.support.fake_kube_rules import rule_allows
from tests.support.kube_fixtures import WRITER_MANIFEST as MANIFEST
from tests.support.kube_fixtures import rbac_rules, running_scenario

RULES = rbac_rules("Role", MANIFEST)


def test_the_role_grants_no_delete_no_update_and_nothing_outside_its_objects():
    verbs = {v for r in RULES for v in r["verbs"]}
    assert verbs == {"get", "patch", "create"}
    resources = {(g, res) for r in RULES for g in r["apiGroups"] for res in r["resources"]}
    assert resources == {("apps", "deployments"), ("apps", "statefulsets"), ("autoscaling", "horizontalpodautoscalers"),
                         ("", "services")}
    kinds = [d["kind"] for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding"]


def _preview_read(r) -> bool:
    """A plan preview's read of nodes or pods, cluster-wide (the reader's, not the actuator's)."""
    return r.verb == "list" and r.resource in ("nodes", "pods") and r.namespace is None


def test_every_call_of_plan_apply_rollback_is_granted(tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(RULES, namespace="llm")
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        assert main(["plan", "llm/vllm-server", "--set", "max-num-seqs=64", "--json", *common]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert main(["apply", doc["id"], "--yes", "--no-watch", *common]) == 0
        assert main(["rollback", doc["id"], "--yes", *common]) == 0
        calls = sc.kube.calls()
    actuator = [r for r in calls if not _preview_read(r)]
    assert actuator and all(r.status != 403 for r in actuator)
    for r in actuator:
        assert any(rule_allows(rule, r.verb, r.api_group or "", r.resource or "", r.subresource, r.name)
                   for rule in RULES), (r.method, r.path)
    assert {r.verb for r in actuator} == {"get", "patch"}
    # the preview reads nodes and pods with the reader's ClusterRole; this identity has only the
    # writer's Role, so both are refused and the plan says which permission it lacked
    reads = [r for r in calls if _preview_read(r)]
    assert sorted((r.resource, r.status) for r in reads) == [("nodes", 403), ("pods", 403)]
    reader_rules = rbac_rules("ClusterRole")
    assert all(any(rule_allows(rule, r.verb, "", r.resource, None, None) for rule in reader_rules) for r in reads)
    blast = doc["preview"]["blast_radius"]
    assert blast["outcome"] == "not_checked" and blast["restart_pods"] == []
    assert [n["params"]["issue"] for n in doc["preview"]["notes"]] == [
        "missing RBAC: list nodes cluster-wide", "missing RBAC: list pods cluster-wide"]


def test_with_the_reader_role_beside_the_writer_role_nothing_is_refused(tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(RULES, namespace="llm")
        sc.kube.grant(rbac_rules("ClusterRole"))
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        assert main(["plan", "llm/vllm-server", "--set", "max-num-seqs=64", "--json", *common]) == 0
        doc = json.loads(capsys.readouterr().out)
        calls = sc.kube.calls()
    assert calls and [r for r in calls if r.status == 403] == []
    assert sorted(r.resource for r in calls if _preview_read(r)) == ["nodes", "pods"]
    assert doc["preview"]["blast_radius"]["outcome"] == "fits"


def test_a_writer_without_the_role_is_told_the_missing_verb(tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    read_only = [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}]
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(read_only, namespace="llm")
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        assert main(["plan", "llm/vllm-server", "--replicas", "3", "--json", *common]) == 0
        plan = json.loads(capsys.readouterr().out)["id"]
        assert main(["apply", plan, "--yes", "--no-watch", *common]) == 2
        err = capsys.readouterr().err
        refused = [r for r in sc.kube.calls(verb="patch")]
    assert "patch deployments.apps in namespace llm" in err
    assert [r.status for r in refused] == [403], "the dry run was refused; no write was attempted"
