"""From a pod to the object that owns its spec, by controller ownerReferences, through the stand-in
API server: Pod -> ReplicaSet -> Deployment -> InferenceService; Pod -> StatefulSet ->
LeaderWorkerSet (a worker through its leader pod); a plain Deployment stops at itself."""

from __future__ import annotations

import pytest

from collectors.kube.owners import owner_chain_of_pod, spec_owner_of_pod, workload_of_pod
from collectors.kube.rest import KubeRest
from runbooks.model import errors
from tests.support.kube_fixtures import running_scenario


def _owned(kind: str, name: str, owner: tuple[str, str, str] | None, api_version: str = "apps/v1",
           **extra) -> dict:
    meta: dict = {"name": name, "namespace": "llm"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": owner[2], "uid": f"u-{owner[2]}",
                                    "controller": True}]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **extra}


def _pod(name: str, owner: tuple[str, str, str] | None) -> dict:
    return _owned("Pod", name, owner, "v1", spec={"containers": [{"name": "c", "image": "x"}]})


@pytest.fixture
def kube(tmp_path):
    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(
            _pod("isvc-pod", ("apps/v1", "ReplicaSet", "llama-predictor-7d9c")),
            _owned("ReplicaSet", "llama-predictor-7d9c", ("apps/v1", "Deployment", "llama-predictor")),
            _pod("lws-leader", ("apps/v1", "StatefulSet", "vllm")),
            _pod("lws-worker", ("apps/v1", "StatefulSet", "vllm-0")),
            _pod("bare", None),
        )
        # owners stored raw (no controller of the stand-in acts on them in these reads)
        for kind, name, owner in (("Deployment", "llama-predictor",
                                   ("serving.kserve.io/v1beta1", "InferenceService", "llama")),
                                  ("StatefulSet", "vllm", ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm")),
                                  ("StatefulSet", "vllm-0", ("v1", "Pod", "lws-leader"))):
            sc.kube._store(kind, _owned(kind, name, owner))
        yield sc


def test_an_inference_service_pod_is_followed_to_its_inference_service(kube):
    rest = KubeRest(kube.api())
    assert owner_chain_of_pod(rest, "llm", "isvc-pod") == (
        ("ReplicaSet", "llama-predictor-7d9c"), ("Deployment", "llama-predictor"), ("InferenceService", "llama"))
    assert spec_owner_of_pod(rest, "llm", "isvc-pod") == ("InferenceService", "llama")
    assert workload_of_pod(rest, "llm", "isvc-pod") == ("Deployment", "llama-predictor")  # unchanged


def test_a_leader_and_a_worker_pod_are_followed_to_their_leaderworkerset(kube):
    rest = KubeRest(kube.api())
    assert spec_owner_of_pod(rest, "llm", "lws-leader") == ("LeaderWorkerSet", "vllm")
    assert owner_chain_of_pod(rest, "llm", "lws-worker") == (
        ("StatefulSet", "vllm-0"), ("Pod", "lws-leader"), ("StatefulSet", "vllm"), ("LeaderWorkerSet", "vllm"))
    assert spec_owner_of_pod(rest, "llm", "lws-worker") == ("LeaderWorkerSet", "vllm")
    gets = [(r.resource, r.name) for r in kube.kube.calls() if r.verb == "get"]
    assert ("leaderworkersets", "vllm") not in gets  # the owner is named, not read


def test_a_bare_pod_has_no_spec_owner_and_a_missing_one_is_target_not_found(kube):
    rest = KubeRest(kube.api())
    assert owner_chain_of_pod(rest, "llm", "bare") == ()
    assert spec_owner_of_pod(rest, "llm", "bare") is None
    with pytest.raises(errors.TargetNotFound):
        spec_owner_of_pod(rest, "llm", "nope")
