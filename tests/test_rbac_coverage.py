"""deploy/base/rbac-reader.yaml grants exactly what gpumem reads: a full gathering under that role meets no
403, and every request it makes maps to one of the manifest's rules. A new API call without a
rule for it fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from collectors.kube.evidence import snapshot_evidence
from collectors.kube.live import gather_workload
from tests.support import words
from tests.support.fake_kube import Request
from tests.support.fake_kube_rules import rule_allows
from tests.support.kube_fixtures import RBAC_MANIFEST, RBAC_NAMESPACED_MANIFEST, rbac_rules, running_scenario

READ_VERBS = {"get", "list", "watch"}


def _covered(request: Request, rules: list[dict]) -> bool:
    return request.verb is not None and any(
        rule_allows(rule, request.verb, request.api_group or "", request.resource or "", request.subresource,
                    request.name)
        for rule in rules)


def _full_gather(scenario, **kwargs):
    """Every path the collector has: both workload kinds looked up, a restarted pod, nodes."""
    return gather_workload(scenario.api(), "llm", "vllm-server", **kwargs)


@pytest.mark.parametrize("direct", [False, True])
def test_every_call_of_a_full_gather_is_granted_by_the_cluster_role(tmp_path: Path, direct: bool):
    rules = rbac_rules("ClusterRole")
    with running_scenario("vllm-incident", tmp_path, direct=direct) as scenario:
        scenario.kube.grant(rules)
        snap = _full_gather(scenario, direct_metrics=direct)
        recorded = scenario.kube.calls()
    assert [r for r in recorded if r.status == 403] == []
    assert [i for i in snap.issues if i.kind == "forbidden"] == []
    uncovered = [(r.verb, r.api_group, r.resource, r.subresource) for r in recorded if not _covered(r, rules)]
    assert uncovered == []
    # the gathering really went everywhere: logs, proxy (unless direct), nodes, cluster-wide pods
    touched = {(r.resource, r.subresource, r.namespace is None) for r in recorded}
    expected = {("deployments", None, False), ("statefulsets", None, False), ("pods", "log", False),
                ("nodes", None, True), ("pods", None, True), ("events", None, False)}
    if not direct:
        expected.add(("pods", "proxy", False))
    assert expected <= touched
    assert snapshot_evidence(snap).server_metrics.queue_depth == 24.0


def test_tgi_gather_with_its_port_fallback_is_covered_too(tmp_path: Path):
    rules = rbac_rules("ClusterRole")
    with running_scenario("tgi-probes", tmp_path) as scenario:
        scenario.kube.grant(rules)
        gather_workload(scenario.api(), "support-bot", "mistral-7b-tgi")
        recorded = scenario.kube.calls()
    assert [r for r in recorded if not _covered(r, rules)] == []
    assert [r.status for r in recorded if r.status == 403] == []


def test_the_manifest_grants_reads_only_and_names_every_resource_it_is_used_for():
    rules = rbac_rules("ClusterRole")
    assert {verb for rule in rules for verb in rule["verbs"]} <= READ_VERBS
    assert not any("*" in rule["resources"] or "*" in rule["apiGroups"] for rule in rules)
    granted = {(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}
    assert granted == {
        ("apps", "deployments"), ("apps", "statefulsets"), ("apps", "replicasets"),
        ("", "pods"), ("", "pods/log"), ("", "pods/proxy"), ("", "events"), ("", "services"), ("", "nodes"),
        ("autoscaling", "horizontalpodautoscalers"), ("policy", "poddisruptionbudgets"),
        ("networking.k8s.io", "ingresses"), ("argoproj.io", "applications"),
        ("serving.kserve.io", "inferenceservices"), ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    }


def test_the_manifest_binds_the_role_to_the_gpumem_service_account():
    docs = [d for d in yaml.safe_load_all(RBAC_MANIFEST.read_text(encoding="utf-8")) if d]
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    binding = kinds["ClusterRoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": kinds["ClusterRole"]["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpumem", "namespace": "gpumem"}]


def test_namespaced_role_reads_the_workload_and_reports_nodes_as_forbidden(tmp_path: Path):
    rules = rbac_rules("Role", RBAC_NAMESPACED_MANIFEST)
    namespace = next(d for d in yaml.safe_load_all(RBAC_NAMESPACED_MANIFEST.read_text(encoding="utf-8"))
                     if d and d["kind"] == "Role")["metadata"]["namespace"]
    with running_scenario("vllm-incident", tmp_path) as scenario:
        scenario.kube.grant(rules, namespace=namespace)
        snap = _full_gather(scenario)
        recorded = scenario.kube.calls()
    assert {(i.kind, words.message(i)) for i in snap.issues} == {
        ("forbidden", "missing RBAC: get nodes cluster-wide"),
        ("forbidden", "missing RBAC: list pods cluster-wide"),
    }
    denied = {(r.resource, r.namespace) for r in recorded if r.status == 403}
    assert denied == {("nodes", None), ("pods", None)}
    in_namespace = [r for r in recorded if r.namespace == namespace]
    assert in_namespace and all(_covered(r, rules) and r.status != 403 for r in in_namespace)
    ev = snapshot_evidence(snap)
    assert len(ev.pods) == 2 and ev.logs.count("cuda_oom") == 1 and ev.nodes == () and ev.colocated == ()


def test_a_plan_previews_reads_are_granted_by_the_cluster_role_and_named_under_the_namespaced_one(tmp_path: Path):
    from collectors.kube.gpu_room import read_gpu_room
    from collectors.kube.rest import KubeRest

    rules = rbac_rules("ClusterRole")
    with running_scenario("vllm-incident", tmp_path) as scenario:
        scenario.kube.grant(rules)
        room = read_gpu_room(KubeRest(scenario.api()))
        recorded = scenario.kube.calls()
    assert room.issues == () and [r for r in recorded if not _covered(r, rules) or r.status == 403] == []
    assert {n.name for n in room.nodes} == {"gpu-node-03", "gpu-node-05", "cpu-node-01"}
    assert "batch-finetune-28471-abcde" not in {p.name for p in room.pods}  # finished: holds no GPU
    namespaced = rbac_rules("Role", RBAC_NAMESPACED_MANIFEST)
    namespace = next(d for d in yaml.safe_load_all(RBAC_NAMESPACED_MANIFEST.read_text(encoding="utf-8"))
                     if d and d["kind"] == "Role")["metadata"]["namespace"]
    with running_scenario("vllm-incident", tmp_path) as scenario:
        scenario.kube.grant(namespaced, namespace=namespace)
        room = read_gpu_room(KubeRest(scenario.api()))
    assert (room.nodes, room.pods) == (None, None)
    assert words.en(room.issues) == ("missing RBAC: list nodes cluster-wide", "missing RBAC: list pods cluster-wide")
    assert words.zh(room.issues)[0] == "缺少 RBAC 权限：集群范围的 `list nodes`"


@pytest.mark.parametrize("manifest, kind", [(RBAC_MANIFEST, "ClusterRole"), (RBAC_NAMESPACED_MANIFEST, "Role")])
def test_a_triage_of_an_inference_service_and_a_leader_worker_set_is_granted(tmp_path: Path, manifest, kind):
    """`NAMESPACE/isvc/NAME` and `NAMESPACE/lws/NAME`: the custom resource, the Deployment or
    StatefulSet it owns, its pods; every call is one of the role's rules and none is refused."""
    import copy

    from tests.test_crd_schemas import ISVC, LWS

    rules = rbac_rules(kind, manifest)
    with running_scenario("vllm-incident", tmp_path) as scenario:
        dep = scenario.kube.get("Deployment", "llm", "vllm-server")
        dep["metadata"]["ownerReferences"] = [{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                                               "name": "llama", "uid": "u", "controller": True}]
        scenario.kube.add(dep, copy.deepcopy(ISVC), copy.deepcopy(LWS))
        scenario.kube.grant(rules, namespace="llm" if kind == "Role" else None)
        snap = gather_workload(scenario.api(), "llm", "llama", kind="InferenceService")
        with pytest.raises(Exception, match="owns no StatefulSet"):  # the stand-in's LWS made none
            gather_workload(scenario.api(), "llm", "vllm", kind="LeaderWorkerSet")
        recorded = scenario.kube.calls()
    assert snap.spec_owner is not None and snap.name == "vllm-server"
    in_scope = [r for r in recorded if kind == "ClusterRole" or r.namespace == "llm"]
    assert {r.resource for r in in_scope} >= {"inferenceservices", "leaderworkersets", "deployments", "statefulsets"}
    assert [(r.verb, r.resource) for r in in_scope if r.status == 403 or not _covered(r, rules)] == []
