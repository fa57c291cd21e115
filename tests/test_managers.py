"""Who manages a workload (`collectors.kube.managers`): each manager kind from real-shaped
objects (the label and annotation names Argo CD, Flux and Helm write), the sync policy read
from an Application, and any dict in -> a tuple out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.render.i18n import Catalog
from bot.render.managers import manager_line, managers_text, patch_fate, refusal_line
from collectors.kube.managers import (
    Manager,
    application_path,
    blocks_writes,
    managers_of,
    sync_policy,
    with_sync_policy,
)
from runbooks.model.errors import NotPermitted, TargetNotFound


def deployment(labels=None, annotations=None, owners=None, fields=None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "vllm", "namespace": "llm", "labels": labels or {"app": "vllm"}}
    if annotations:
        meta["annotations"] = annotations
    if owners:
        meta["ownerReferences"] = owners
    if fields:
        meta["managedFields"] = fields
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {}}


def field(manager: str, operation: str = "Apply") -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "apiVersion": "apps/v1", "time": "2026-12-01T10:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}


def kinds(obj) -> list[tuple[str, str]]:
    return [(m.kind, m.name) for m in managers_of(obj)]


def test_a_plain_deployment_has_no_manager():
    obj = deployment(fields=[field("kubectl-client-side-apply", "Update"), field("kube-controller-manager", "Update"),
                             field("kubectl", "Apply"), field("gpumem", "Update")])
    assert managers_of(obj) == ()


def test_argocd_annotation_tracking():
    obj = deployment(annotations={"argocd.argoproj.io/tracking-id": "llm-serving:apps/Deployment:llm/vllm"},
                     fields=[field("argocd-controller")])
    (m,) = managers_of(obj)
    assert (m.kind, m.name, m.namespace) == ("argocd", "llm-serving", None)
    assert m.evidence == "annotation argocd.argoproj.io/tracking-id=llm-serving:apps/Deployment:llm/vllm"


def test_argocd_apps_in_any_namespace_name_their_namespace():
    obj = deployment(annotations={"argocd.argoproj.io/tracking-id": "team-a_llm-serving:apps/Deployment:llm/vllm"})
    (m,) = managers_of(obj)
    assert (m.name, m.namespace) == ("llm-serving", "team-a")


def test_the_instance_label_alone_is_not_argocd_but_with_its_manager_it_is():
    assert kinds(deployment(labels={"app.kubernetes.io/instance": "llm-serving"})) == []
    obj = deployment(labels={"app.kubernetes.io/instance": "llm-serving"},
                     fields=[field("argocd-application-controller", "Update")])
    (m,) = managers_of(obj)
    assert (m.kind, m.name) == ("argocd", "llm-serving")
    assert "managedFields manager argocd-application-controller" in m.evidence


def test_argocd_by_its_field_manager_alone_names_no_application():
    assert kinds(deployment(fields=[field("argocd-controller")])) == [("argocd", "?")]


def test_flux_kustomization_and_helmrelease_labels():
    obj = deployment(labels={"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace":
                             "flux-system"}, fields=[field("kustomize-controller")])
    (m,) = managers_of(obj)
    assert (m.kind, m.name, m.namespace, m.owner_kind) == ("flux", "apps", "flux-system", "Kustomization")
    obj = deployment(labels={"helm.toolkit.fluxcd.io/name": "vllm", "helm.toolkit.fluxcd.io/namespace": "llm",
                             "app.kubernetes.io/managed-by": "Helm"},
                     annotations={"meta.helm.sh/release-name": "vllm", "meta.helm.sh/release-namespace": "llm"},
                     fields=[field("helm-controller", "Update")])
    assert [(m.kind, m.name, m.owner_kind) for m in managers_of(obj)] == [("flux", "vllm", "HelmRelease"),
                                                                          ("helm", "vllm", None)]


def test_helm_release():
    obj = deployment(labels={"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": "vllm"},
                     annotations={"meta.helm.sh/release-name": "vllm", "meta.helm.sh/release-namespace": "llm"})
    (m,) = managers_of(obj)
    assert (m.kind, m.name, m.namespace) == ("helm", "vllm", "llm")
    assert m.evidence == ("annotation meta.helm.sh/release-name=vllm, label app.kubernetes.io/managed-by=Helm")


@pytest.mark.parametrize("api_version, kind", [("serving.kserve.io/v1beta1", "InferenceService"),
                                               ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
                                               ("kubeai.org/v1", "Model"), ("ray.io/v1", "RayService")])
def test_a_controller_owner_manages_the_deployment(api_version, kind):
    obj = deployment(owners=[{"apiVersion": api_version, "kind": kind, "name": "llama", "uid": "u1",
                              "controller": True, "blockOwnerDeletion": True}])
    (m,) = managers_of(obj)
    assert (m.kind, m.name, m.owner_kind, m.api_version) == ("controller", "llama", kind, api_version)
    assert blocks_writes(m)


def test_ordinary_and_non_controller_owners_are_not_managers():
    rs = {"kind": "ReplicaSet", "metadata": {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm", "uid": "u", "controller": True}]}}
    assert managers_of(rs) == ()
    obj = deployment(owners=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}])
    assert managers_of(obj) == ()


def test_other_server_side_apply_managers_are_named_but_do_not_block():
    (m,) = managers_of(deployment(fields=[field("platform-operator")]))
    assert (m.kind, m.name) == ("ssa", "platform-operator") and not blocks_writes(m)


def test_sync_policy_shapes():
    assert sync_policy({"spec": {"syncPolicy": {"automated": {"prune": True, "selfHeal": True}}}}) == (True, True)
    assert sync_policy({"spec": {"syncPolicy": {"automated": {}}}}) == (True, False)
    assert sync_policy({"spec": {"syncPolicy": {"automated": {"enabled": False, "selfHeal": True}}}}) == (False, False)
    assert sync_policy({"spec": {}}) == (False, False)


class FakeRest:
    def __init__(self, answers: dict[str, Any]):
        self.answers = answers
        self.paths: list[str] = []

    def get_json(self, where: str, timeout_s: float) -> dict[str, Any]:
        self.paths.append(where)
        answer = self.answers[where]
        if isinstance(answer, Exception):
            raise answer
        return answer


ARGO = Manager("argocd", "llm-serving", "annotation ...")


def test_the_application_is_read_in_the_argocd_namespace_and_self_heal_said():
    rest = FakeRest({application_path("gitops", "llm-serving"):
                     {"spec": {"syncPolicy": {"automated": {"selfHeal": True}}}}})
    (m,) = with_sync_policy((ARGO,), rest, "gitops")
    assert (m.automated, m.self_heal, m.sync_unknown, m.namespace) == (True, True, None, "gitops")
    assert rest.paths == ["/apis/argoproj.io/v1alpha1/namespaces/gitops/applications/llm-serving"]
    cat = Catalog.load("en")
    assert manager_line(cat, m.to_json()) == "managed by Argo CD application llm-serving, self-heal on"
    assert manager_line(Catalog.load("zh"), m.to_json()) == "由Argo CD 应用 llm-serving管理，自愈已开启"
    assert patch_fate(cat, m.to_json()) == "Argo CD will revert this at the next sync; with self-heal on, within minutes."


@pytest.mark.parametrize("error, why, words", [
    (NotPermitted("get", "argoproj.io/applications", "argocd"), "forbidden", "reading the Application is forbidden"),
    (TargetNotFound("Application", "argocd", "llm-serving"), "not_found", "no Application llm-serving in namespace argocd"),
    (TimeoutError("slow"), "unreadable", "could not be read")])
def test_an_unreadable_application_leaves_the_sync_policy_unknown(error, why, words):
    (m,) = with_sync_policy((ARGO,), FakeRest({application_path("argocd", "llm-serving"): error}))
    assert (m.automated, m.self_heal, m.sync_unknown) == (None, None, why)
    line = manager_line(Catalog.load("en"), m.to_json())
    assert line.startswith("managed by Argo CD application llm-serving, sync policy unknown") and words in line
    assert "sync policy could not be read" in patch_fate(Catalog.load("en"), m.to_json())


def test_the_refusal_names_the_manager_and_what_to_do():
    m = Manager("argocd", "llm-serving", "annotation ...", automated=True, self_heal=False).to_json()
    line = refusal_line(Catalog.load("en"), "managed_gitops", {"target": "llm/Deployment/vllm", "managers": [m]})
    assert line == ("gpumem apply: llm/Deployment/vllm is managed by Argo CD application llm-serving, automated sync, "
                    "self-heal off; nothing was written. Change the source of truth instead (the plan's source-of-truth "
                    "file: gpumem plan --out FILE), or allow stop-gaps in namespace llm with "
                    "remediation.stopgap_on_gitops.")
    assert "未写入任何内容" in refusal_line(Catalog.load("zh"), "managed_controller",
                                       {"target": "llm/Deployment/vllm", "managers": [m]})
    assert managers_text(Catalog.load("en"), []).startswith("no manager other than kubectl")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=40),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=40), inner, max_size=5),
                     max_leaves=30)
_keys = st.sampled_from(["metadata", "labels", "annotations", "ownerReferences", "managedFields", "kind", "controller",
                         "manager", "operation", "name", "argocd.argoproj.io/tracking-id", "app.kubernetes.io/instance",
                         "meta.helm.sh/release-name", "app.kubernetes.io/managed-by", "kustomize.toolkit.fluxcd.io/name"])
_shaped = st.recursive(st.none() | st.booleans() | st.just("Apply") | st.just("Helm") | st.text(max_size=20),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=6),
                       max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json, _shaped))
def test_any_value_gives_managers_never_a_traceback(obj):
    out = managers_of(obj)
    assert isinstance(out, tuple) and all(isinstance(m, Manager) for m in out)
    cat = Catalog.load("en")
    for m in out:
        assert isinstance(manager_line(cat, m.to_json()), str) and isinstance(patch_fate(cat, m.to_json()), str)


def test_the_application_read_is_granted_by_the_reader_cluster_role(tmp_path):
    """Under the reader's ClusterRole the read is allowed (the stand-in serves no argoproj.io
    here, so it answers 404: "sync policy unknown", never a guess)."""
    from collectors.kube.rest import KubeRest
    from tests.support.fake_kube_rules import rule_allows
    from tests.support.kube_fixtures import rbac_rules, running_scenario

    rules = rbac_rules("ClusterRole")
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(rules)
        (m,) = with_sync_policy((ARGO,), KubeRest(sc.api()))
        (call,) = [r for r in sc.kube.calls() if r.resource == "applications"]
    assert (call.verb, call.api_group, call.namespace, call.name) == ("get", "argoproj.io", "argocd", "llm-serving")
    assert any(rule_allows(rule, "get", "argoproj.io", "applications", None, "llm-serving") for rule in rules)
    assert call.status == 404 and m.sync_unknown == "not_found"
