"""The stand-in API server serves KServe's InferenceService, the LeaderWorkerSet and Argo CD's
Application as kube-apiserver serves a custom resource, through the official client: get, list,
JSON and merge patch (strategic merge is 415), dryRun=All, the resourceVersion precondition (409)
and a write the CRD's schema refuses (422 naming the field), each counted as the writes received."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.support.kube_fixtures import JSON_PATCH, STRATEGIC_MERGE_PATCH, running_scenario
from tests.test_crd_schemas import APP, ISVC, LWS

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"


@pytest.fixture
def sc(tmp_path):
    with running_scenario(None, tmp_path) as scenario:
        scenario.kube.managed_fields = True
        scenario.kube.add(copy.deepcopy(ISVC), copy.deepcopy(LWS), copy.deepcopy(APP))
        yield scenario


def _api(sc) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(sc.api())


def _isvc(sc) -> dict:
    return _api(sc).get_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama")


def _writes(sc) -> list:
    return [r for r in sc.kube.writes() if r.resource == PLURAL]




def test_each_custom_kind_is_read_and_listed_as_stored(sc):
    api = _api(sc)
    assert _isvc(sc)["spec"]["predictor"]["model"]["args"] == ISVC["spec"]["predictor"]["model"]["args"]
    lws = api.get_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", "llm", "leaderworkersets", "vllm")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    apps = api.list_namespaced_custom_object("argoproj.io", "v1alpha1", "argocd", "applications")
    assert [a["metadata"]["name"] for a in apps["items"]] == ["llm-serving"]
    assert _isvc(sc)["metadata"]["resourceVersion"]


def test_a_json_patch_with_a_test_op_writes_and_bumps_the_resource_version(sc):
    before = _isvc(sc)
    path = "/spec/predictor/model/args/0"
    out = _api(sc).patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama", [
        {"op": "test", "path": path, "value": "--max-num-seqs=128"},
        {"op": "replace", "path": path, "value": "--max-num-seqs=64"}], _content_type=JSON_PATCH)
    assert out["spec"]["predictor"]["model"]["args"][0] == "--max-num-seqs=64"
    assert int(out["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert _isvc(sc)["spec"]["predictor"]["model"]["args"][0] == "--max-num-seqs=64"
    assert len(_writes(sc)) == 1


def test_a_merge_patch_is_taken_and_a_strategic_merge_patch_is_415_with_nothing_written(sc):
    api = _api(sc)
    api.patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama",
                                       {"spec": {"predictor": {"minReplicas": 2}}})  # merge patch by default
    assert _isvc(sc)["spec"]["predictor"]["minReplicas"] == 2
    with pytest.raises(ApiException) as refused:
        api.patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama",
                                           {"spec": {"predictor": {"minReplicas": 3}}},
                                           _content_type=STRATEGIC_MERGE_PATCH)
    assert refused.value.status == 415
    assert "application/merge-patch+json" in json.loads(refused.value.body)["message"]
    assert _isvc(sc)["spec"]["predictor"]["minReplicas"] == 2
    assert [r.status for r in _writes(sc)] == [200, 415]


def test_a_failed_test_op_and_a_stale_resource_version_change_nothing(sc):
    api = _api(sc)
    before = _isvc(sc)
    with pytest.raises(ApiException) as failed:
        api.patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama", [
            {"op": "test", "path": "/spec/predictor/model/args/0", "value": "--max-num-seqs=256"},
            {"op": "replace", "path": "/spec/predictor/model/args/0", "value": "--max-num-seqs=64"}],
            _content_type=JSON_PATCH)
    assert failed.value.status == 422
    api.patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApiException) as stale:
        api.patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama", {
            "metadata": {"resourceVersion": before["metadata"]["resourceVersion"]},
            "spec": {"predictor": {"minReplicas": 5}}})
    assert stale.value.status == 409
    after = _isvc(sc)
    assert after["spec"] == before["spec"]


def test_a_dry_run_answers_the_result_and_stores_nothing(sc):
    out = _api(sc).patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama",
                                                  {"spec": {"predictor": {"minReplicas": 4}}}, dry_run="All")
    assert out["spec"]["predictor"]["minReplicas"] == 4
    assert _isvc(sc)["spec"]["predictor"]["minReplicas"] == 1
    assert _writes(sc) == [] and [r.resource for r in sc.kube.dry_runs()] == [PLURAL]


@pytest.mark.parametrize(("patch", "field"), [
    ({"spec": {"predictor": {"model": {"args": "--max-num-seqs=64"}}}}, "spec.predictor.model.args"),
    ({"spec": {"predictor": {"minReplicas": "two"}}}, "spec.predictor.minReplicas"),
    ({"spec": {"predictor": {"model": {"modelFormat": {"name": None}}}}}, "spec.predictor.model.modelFormat.name"),
])
def test_a_write_the_crd_schema_refuses_is_422_naming_the_field_and_stores_nothing(sc, patch, field):
    before = _isvc(sc)
    with pytest.raises(ApiException) as refused:
        _api(sc).patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama", patch)
    assert refused.value.status == 422
    body = json.loads(refused.value.body)
    assert [c["field"] for c in body["details"]["causes"]] == [field]
    assert body["details"]["kind"] == "InferenceService"
    assert _isvc(sc) == before


def test_a_leaderworkerset_without_a_worker_template_is_refused(sc):
    with pytest.raises(ApiException) as refused:
        _api(sc).patch_namespaced_custom_object(
            "leaderworkerset.x-k8s.io", "v1", "llm", "leaderworkersets", "vllm",
            [{"op": "remove", "path": "/spec/leaderWorkerTemplate/workerTemplate"}], _content_type=JSON_PATCH)
    assert refused.value.status == 422
    causes = json.loads(refused.value.body)["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.leaderWorkerTemplate.workerTemplate"]


def test_discovery_names_the_custom_groups_and_their_resources(sc):
    api = sc.api()
    groups = {g.name: g.preferred_version.version for g in k8s.ApisApi(api).get_api_versions().groups}
    assert groups["serving.kserve.io"] == "v1beta1" and groups["leaderworkerset.x-k8s.io"] == "v1"
    assert groups["argoproj.io"] == "v1alpha1" and groups["apps"] == "v1"
    listing = _api(sc).get_api_resources(GROUP, VERSION)
    assert [(r.name, r.kind, r.namespaced) for r in listing.resources] == [(PLURAL, "InferenceService", True)]
    apps = k8s.AppsV1Api(api).get_api_resources()
    assert {"statefulsets", "statefulsets/scale", "deployments"} <= {r.name for r in apps.resources}


def test_managed_fields_move_a_changed_field_to_its_writer_with_the_time(sc):
    from tests.support.fake_kube_rules import owner_of_field

    api = _api(sc)
    api.patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama",
                                       {"spec": {"predictor": {"model": {"args": ["--max-num-seqs=64"]}}}},
                                       field_manager="gpumem")
    first = _isvc(sc)["metadata"]["managedFields"]
    args = ("spec", "predictor", "model", "args")
    assert owner_of_field(first, args) == ("gpumem", first[0]["time"])
    assert owner_of_field(first, ("spec", "predictor", "minReplicas")) is None
    api.patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama",
                                       {"spec": {"predictor": {"model": {"args": ["--max-num-seqs=128"]}}}},
                                       field_manager="kserve-controller")
    after = _isvc(sc)["metadata"]["managedFields"]
    assert [e["manager"] for e in after] == ["kserve-controller"]  # gpumem's entry owned only args: dropped
    assert owner_of_field(after, args)[0] == "kserve-controller"
    assert after[0]["operation"] == "Update" and after[0]["apiVersion"] == "serving.kserve.io/v1beta1"
    # a write that changes nothing moves nothing
    api.patch_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, "llama",
                                       {"spec": {"predictor": {"model": {"args": ["--max-num-seqs=128"]}}}},
                                       field_manager="gpumem")
    assert _isvc(sc)["metadata"]["managedFields"] == after
