"""Other managers in the stand-in API server: a controller that puts back a field it derives (the
KServe controller rewriting the Deployment's args from its InferenceService) and a GitOps tool
re-applying its manifest on its next sync, each N seconds after someone else's write, under its
own field manager in managedFields."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.support.fake_kube import Reverter
from tests.support.fake_kube_rules import owner_of_field
from tests.support.kube_fixtures import INCIDENT_DEPLOYMENT, INCIDENT_NS, manual_clock

ARGS = ("spec", "template", "spec", "containers", 0, "args")


def _args(cluster) -> list[str]:
    d = k8s.AppsV1Api(cluster.api()).read_namespaced_deployment(INCIDENT_DEPLOYMENT, INCIDENT_NS)
    return d.spec.template.spec.containers[0].args


def _patch_args(cluster, args: list[str]) -> None:
    k8s.AppsV1Api(cluster.api()).patch_namespaced_deployment(INCIDENT_DEPLOYMENT, INCIDENT_NS, [
        {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args}],
        field_manager="gpumem", _content_type="application/json-patch+json")


def test_the_controller_puts_the_args_back_after_its_delay_and_owns_them(cluster):
    clock = manual_clock(cluster)
    cluster.kube.managed_fields = True
    original = _args(cluster)
    kserve = Reverter("Deployment", INCIDENT_NS, INCIDENT_DEPLOYMENT, ARGS, list(original), "kserve-controller",
                      after_s=15)
    cluster.kube.reverters.append(kserve)
    _patch_args(cluster, [*original, "--max-num-seqs", "64"])
    clock.advance(14)
    assert _args(cluster)[-1] == "64"  # not yet
    clock.advance(2)
    assert _args(cluster) == original and kserve.reverts == 1
    raw = cluster.kube.get("Deployment", INCIDENT_NS, INCIDENT_DEPLOYMENT)
    manager, time = owner_of_field(raw["metadata"]["managedFields"], ("spec", "template", "spec", "containers"))
    assert manager == "kserve-controller" and time == cluster.kube.wall(cluster.kube.now())
    clock.advance(60)
    assert kserve.reverts == 1  # nothing changed since: nothing to put back


def test_a_gitops_sync_reapplies_its_manifest_on_its_next_sync(cluster):
    clock = manual_clock(cluster)
    original = _args(cluster)
    argocd = Reverter("Deployment", INCIDENT_NS, INCIDENT_DEPLOYMENT, ARGS, list(original), "argocd-controller",
                      after_s=180)
    cluster.kube.reverters.append(argocd)
    _patch_args(cluster, [*original, "--max-num-seqs", "64"])
    clock.advance(181)
    assert _args(cluster) == original and argocd.reverts == 1
    assert [r.resource for r in cluster.kube.writes()] == ["deployments"]  # the revert is the server's, not a request
