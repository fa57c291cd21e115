"""The stand-in API server takes writes as kube-apiserver does, driven by the real client:
PATCH in its three types, PUT and POST, resourceVersion preconditions, dry runs, defaulting,
validation, generations, subresources, RBAC; and records every write for tests to count."""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.support.fake_kube import USER
from tests.support.kube_fixtures import (
    INCIDENT_DEPLOYMENT,
    INCIDENT_HPA,
    INCIDENT_NS,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    TEST_TOKEN,
)

NS, DEPLOY, HPA = INCIDENT_NS, INCIDENT_DEPLOYMENT, INCIDENT_HPA
SMP, MERGE = STRATEGIC_MERGE_PATCH, MERGE_PATCH
CONFLICT = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": 'Operation cannot be fulfilled on deployments.apps "vllm-server": the object has been modified; '
               "please apply your changes to the latest version and try again",
    "reason": "Conflict", "details": {"name": "vllm-server", "group": "apps", "kind": "deployments"}, "code": 409,
}


def _body(error: ApiException) -> dict[str, Any]:
    return json.loads(error.body)


def _raw(cluster, method: str, path: str, body: Any, content_type: str | None = "application/json",
         query: str = "") -> tuple[int, dict[str, Any]]:
    """A write the official client cannot send as it is (it turns a dict sent as a JSON patch
    into a strategic merge patch)."""
    headers = {"Authorization": f"Bearer {TEST_TOKEN}"}
    if content_type:
        headers["Content-Type"] = content_type
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = urllib3.PoolManager().request(method, f"{cluster.kube.url}{path}{query}", body=data, headers=headers)
    return answer.status, json.loads(answer.data)


def _apps(cluster) -> k8s.AppsV1Api:
    return k8s.AppsV1Api(cluster.api())


def _deployment(cluster) -> k8s.V1Deployment:
    return _apps(cluster).read_namespaced_deployment(DEPLOY, NS)


def _container(deploy: k8s.V1Deployment) -> k8s.V1Container:
    return deploy.spec.template.spec.containers[0]


DEPLOY_PATH = f"/apis/apps/v1/namespaces/{NS}/deployments/{DEPLOY}"


# ---------------------------------------------------------------------- PATCH types


def test_strategic_merge_patch_merges_containers_and_env_by_name(cluster):
    before = _deployment(cluster)
    patched = _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "image": "vllm/vllm-openai:v0.7.0",
         "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]}]}}}},
        _content_type=SMP)
    vllm = _container(patched)
    assert vllm.image == "vllm/vllm-openai:v0.7.0"
    assert [(e.name, e.value) for e in vllm.env] == [
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"), ("HF_TOKEN", "hf_live_secret_value"),
        ("VLLM_USE_V1", "0")]
    assert vllm.args == _container(before).args  # what the patch does not name stays
    assert patched.metadata.generation == before.metadata.generation + 1 == 15
    assert int(patched.metadata.resource_version) > int(before.metadata.resource_version)
    # the patched object is what is stored
    assert _container(_deployment(cluster)).image == "vllm/vllm-openai:v0.7.0"
    [write] = cluster.kube.writes(verb="patch")
    assert (write.content_type, write.status, write.dry_run) == (SMP, 200, False)
    assert write.json()["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.7.0"


def test_the_client_sends_a_dict_as_a_strategic_merge_patch_unless_told(cluster):
    _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"metadata": {"labels": {"owner": "oncall"}}})
    assert [w.content_type for w in cluster.kube.writes()] == [SMP]


def test_merge_patch_replaces_lists_and_null_removes_an_annotation(cluster):
    before = _deployment(cluster)
    patched = _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {
        "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": None}},
        "spec": {"template": {"spec": {"volumes": [{"name": "shm", "emptyDir": {"medium": "Memory",
                                                                                  "sizeLimit": "16Gi"}}]}}}},
        _content_type=MERGE)
    assert patched.metadata.annotations == {"deployment.kubernetes.io/revision": "9"}
    assert [(v.name, v.empty_dir.size_limit) for v in patched.spec.template.spec.volumes] == [("shm", "16Gi")]
    assert patched.metadata.generation == before.metadata.generation + 1
    assert cluster.kube.writes()[0].content_type == MERGE


def test_json_patch_operations_through_the_client(cluster):
    before = _deployment(cluster)
    patched = _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, [
        {"op": "test", "path": "/metadata/resourceVersion", "value": before.metadata.resource_version},
        {"op": "replace", "path": "/spec/replicas", "value": 3},
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--enable-chunked-prefill"},
        {"op": "remove", "path": "/spec/template/spec/containers/0/env/0"},
    ])
    assert patched.spec.replicas == 3
    assert _container(patched).args[-1] == "--enable-chunked-prefill"
    assert [e.name for e in _container(patched).env] == ["VLLM_USE_V1"]
    assert cluster.kube.writes()[0].content_type == JSON_PATCH


def test_a_failed_json_patch_test_is_a_422_and_stores_nothing(cluster):
    before = _deployment(cluster)
    with pytest.raises(ApiException) as refused:
        _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
            {"op": "replace", "path": "/spec/replicas", "value": 5}])
    # patch.go answers NewGenericServerResponse(422): reason Invalid, a generic message, no causes;
    # not 409, although the test was of the resourceVersion
    assert refused.value.status == 422
    assert _body(refused.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server rejected our request due to an error in our request", "reason": "Invalid",
        "details": {}, "code": 422}
    after = _deployment(cluster)
    assert (after.spec.replicas, after.metadata.resource_version) == (2, before.metadata.resource_version)
    assert [w.status for w in cluster.kube.writes()] == [422]


def test_an_object_sent_as_a_json_patch_is_a_400(cluster):
    status, body = _raw(cluster, "PATCH", DEPLOY_PATH, {"spec": {"replicas": 3}}, JSON_PATCH)
    assert status == 400
    assert body["message"] == (
        "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp")
    assert body["reason"] == "BadRequest"


@pytest.mark.parametrize("content_type", ["application/apply-patch+yaml", "application/json", None])
def test_other_patch_types_are_unsupported_media_types(cluster, content_type):
    status, body = _raw(cluster, "PATCH", DEPLOY_PATH, {"spec": {"replicas": 3}}, content_type)
    assert status == 415
    assert body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the body of the request was in an unknown format - accepted media types include: "
                   "application/json-patch+json, application/merge-patch+json, "
                   "application/strategic-merge-patch+json",
        "reason": "UnsupportedMediaType", "code": 415}
    assert _deployment(cluster).spec.replicas == 2


def test_patching_an_object_that_is_not_there_is_not_found(cluster):
    with pytest.raises(ApiException) as refused:
        _apps(cluster).patch_namespaced_deployment("nope", NS, {"spec": {"replicas": 1}})
    assert refused.value.status == 404
    assert _body(refused.value)["message"] == 'deployments.apps "nope" not found'


# ------------------------------------------------- resourceVersion, generation, no-ops


def test_a_stale_resource_version_in_a_patch_or_put_is_a_conflict(cluster):
    apps = _apps(cluster)
    stale = _deployment(cluster)
    apps.patch_namespaced_deployment(DEPLOY, NS, {"metadata": {"labels": {"owner": "oncall"}}})
    with pytest.raises(ApiException) as patched:
        apps.patch_namespaced_deployment(DEPLOY, NS, {
            "metadata": {"resourceVersion": stale.metadata.resource_version}, "spec": {"replicas": 3}},
            _content_type=MERGE)
    assert patched.value.status == 409 and _body(patched.value) == CONFLICT
    stale.spec.replicas = 3
    with pytest.raises(ApiException) as replaced:
        apps.replace_namespaced_deployment(DEPLOY, NS, stale)
    assert replaced.value.status == 409 and _body(replaced.value) == CONFLICT
    assert _deployment(cluster).spec.replicas == 2
    assert [w.status for w in cluster.kube.writes()] == [200, 409, 409]


def test_put_with_the_current_resource_version_or_none_replaces(cluster):
    apps = _apps(cluster)
    current = _deployment(cluster)
    current.spec.template.spec.containers[0].args.append("--max-num-batched-tokens=4096")
    replaced = apps.replace_namespaced_deployment(DEPLOY, NS, current)
    assert int(replaced.metadata.resource_version) > int(current.metadata.resource_version)
    assert replaced.metadata.generation == current.metadata.generation + 1
    unconditional = apps.read_namespaced_deployment(DEPLOY, NS)
    unconditional.metadata.resource_version = None  # Deployments allow unconditional updates
    unconditional.spec.replicas = 1
    assert apps.replace_namespaced_deployment(DEPLOY, NS, unconditional).spec.replicas == 1


def test_a_write_that_changes_nothing_keeps_the_resource_version_and_generation(cluster):
    before = _deployment(cluster)
    again = _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"replicas": 2}})
    assert (again.metadata.resource_version, again.metadata.generation) == (
        before.metadata.resource_version, before.metadata.generation)
    assert len(cluster.kube.writes()) == 1  # still a write the server received


def test_generation_follows_spec_and_annotations_but_not_labels(cluster):
    apps = _apps(cluster)
    generation = _deployment(cluster).metadata.generation
    labelled = apps.patch_namespaced_deployment(DEPLOY, NS, {"metadata": {"labels": {"owner": "oncall"}}})
    assert labelled.metadata.generation == generation
    # apps/deployment/strategy.go: annotations are copied to ReplicaSets, so they bump it too
    annotated = apps.patch_namespaced_deployment(DEPLOY, NS, {"metadata": {"annotations": {"gpumem/ticket": "7"}}})
    assert annotated.metadata.generation == generation + 1
    scaled = apps.patch_namespaced_deployment(DEPLOY, NS, {"spec": {"replicas": 3}})
    assert scaled.metadata.generation == generation + 2
    assert len({labelled.metadata.resource_version, annotated.metadata.resource_version,
                scaled.metadata.resource_version}) == 3


def test_status_is_the_status_subresources_and_spec_the_objects(cluster):
    apps = _apps(cluster)
    before = _deployment(cluster)
    ignored = apps.patch_namespaced_deployment(DEPLOY, NS, {"status": {"readyReplicas": 0}}, _content_type=MERGE)
    assert ignored.status.ready_replicas == 2
    assert ignored.metadata.resource_version == before.metadata.resource_version  # nothing changed
    status = apps.patch_namespaced_deployment_status(DEPLOY, NS, {"status": {"readyReplicas": 1},
                                                                  "spec": {"replicas": 9}}, _content_type=MERGE)
    assert (status.status.ready_replicas, status.spec.replicas) == (1, 2)
    assert status.metadata.generation == before.metadata.generation
    assert int(status.metadata.resource_version) > int(before.metadata.resource_version)


def test_a_patch_that_renames_or_moves_the_object_is_a_bad_request(cluster):
    status, body = _raw(cluster, "PATCH", DEPLOY_PATH, {"metadata": {"name": "other"}}, MERGE)
    assert (status, body["message"]) == (400, "the name of the object (other) does not match the name on the URL "
                                              "(vllm-server)")
    status, body = _raw(cluster, "PATCH", DEPLOY_PATH, {"metadata": {"namespace": "default"}}, MERGE)
    assert (status, body["message"]) == (
        400, "the namespace of the provided object does not match the namespace sent on the request")


# ------------------------------------------------------------------------ validation


def test_negative_replicas_are_invalid_with_the_real_status_body(cluster):
    with pytest.raises(ApiException) as refused:
        _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"replicas": -1}})
    assert refused.value.status == 422
    assert _body(refused.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Deployment.apps "vllm-server" is invalid: spec.replicas: Invalid value: -1: must be greater '
                   "than or equal to 0",
        "reason": "Invalid",
        "details": {"name": "vllm-server", "group": "apps", "kind": "Deployment", "causes": [
            {"reason": "FieldValueInvalid", "message": "Invalid value: -1: must be greater than or equal to 0",
             "field": "spec.replicas"}]},
        "code": 422}
    assert _deployment(cluster).spec.replicas == 2


def test_replicas_of_the_wrong_json_type_fail_to_decode(cluster):
    status, body = _raw(cluster, "PATCH", DEPLOY_PATH, {"spec": {"replicas": "3"}}, MERGE)
    assert status == 422
    assert body["message"].startswith(' "" is invalid: patch: Invalid value: "{')
    assert body["message"].endswith(
        ": json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32")
    assert body["details"]["causes"][0]["field"] == "patch"
    status, body = _raw(cluster, "PUT", DEPLOY_PATH, {"metadata": {"name": DEPLOY}, "spec": {"replicas": "3"}})
    assert (status, body["message"]) == (400, 'Deployment in version "v1" cannot be handled as a Deployment: json: '
                                              "cannot unmarshal string into Go struct field "
                                              "DeploymentSpec.spec.replicas of type int32")


def test_switching_to_recreate_needs_the_retain_keys_directive(cluster):
    apps = _apps(cluster)
    with pytest.raises(ApiException) as refused:
        apps.patch_namespaced_deployment(DEPLOY, NS, {"spec": {"strategy": {"type": "Recreate"}}})
    assert _body(refused.value)["message"] == (
        'Deployment.apps "vllm-server" is invalid: spec.strategy.rollingUpdate: Forbidden: may not be specified '
        "when strategy `type` is 'Recreate'")
    recreated = apps.patch_namespaced_deployment(DEPLOY, NS, {
        "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}})
    assert (recreated.spec.strategy.type, recreated.spec.strategy.rolling_update) == ("Recreate", None)


# -------------------------------------------------------------------- create, dry run


def _new_deployment(name: str = "vllm-small", image: str | None = "vllm/vllm-openai:v0.6.6") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "vllm", "args": ["--model=Qwen/Qwen2.5-0.5B-Instruct"]}
    if image is not None:
        container["image"] = image
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}}}


def test_a_dry_run_create_validates_and_answers_but_stores_nothing(cluster):
    apps = _apps(cluster)
    answer = apps.create_namespaced_deployment(NS, _new_deployment(), dry_run="All")
    assert answer.metadata.uid and answer.metadata.creation_timestamp
    assert answer.metadata.resource_version is None and answer.metadata.generation == 1
    # defaulted as a stored object would be
    assert answer.spec.strategy.rolling_update.max_surge == "25%"
    assert (answer.spec.revision_history_limit, answer.spec.progress_deadline_seconds) == (10, 600)
    assert _container(answer).image_pull_policy == "IfNotPresent"
    assert _container(answer).termination_message_path == "/dev/termination-log"
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_deployment("vllm-small", NS)
    assert missing.value.status == 404
    assert cluster.kube.writes() == []
    [dry] = cluster.kube.dry_runs(verb="create")
    assert (dry.query, dry.status, dry.resource) == ({"dryRun": "All"}, 201, "deployments")


def test_a_dry_run_patch_answers_the_result_without_storing_it(cluster):
    before = _deployment(cluster)
    answer = _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"replicas": 4}}, dry_run="All")
    assert (answer.spec.replicas, answer.metadata.generation) == (4, before.metadata.generation + 1)
    assert answer.metadata.resource_version == before.metadata.resource_version
    after = _deployment(cluster)
    assert (after.spec.replicas, after.metadata.generation) == (2, before.metadata.generation)
    assert len(cluster.kube.pods_of(NS, DEPLOY)) == 2  # no controller saw it
    assert (len(cluster.kube.dry_runs()), len(cluster.kube.writes())) == (1, 0)


def test_a_dry_run_is_still_validated(cluster):
    with pytest.raises(ApiException) as refused:
        _apps(cluster).create_namespaced_deployment(NS, _new_deployment(image=None), dry_run="All")
    assert refused.value.status == 422
    assert _body(refused.value)["message"] == (
        'Deployment.apps "vllm-small" is invalid: spec.template.spec.containers[0].image: Required value')


def test_a_dry_run_value_other_than_all_is_invalid(cluster):
    status, body = _raw(cluster, "PATCH", DEPLOY_PATH, {"spec": {"replicas": 4}}, MERGE, "?dryRun=yes")
    assert status == 422
    assert body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"yes"}: supported values: "All"')


def test_create_stores_with_system_fields_and_a_duplicate_already_exists(cluster):
    apps = _apps(cluster)
    created = apps.create_namespaced_deployment(NS, _new_deployment())
    assert created.metadata.generation == 1 and created.metadata.resource_version.isdigit()
    assert apps.read_namespaced_deployment("vllm-small", NS).metadata.uid == created.metadata.uid
    with pytest.raises(ApiException) as duplicate:
        apps.create_namespaced_deployment(NS, _new_deployment())
    assert duplicate.value.status == 409
    assert _body(duplicate.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'deployments.apps "vllm-small" already exists', "reason": "AlreadyExists",
        "details": {"name": "vllm-small", "group": "apps", "kind": "deployments"}, "code": 409}
    assert [w.status for w in cluster.kube.writes(verb="create")] == [201, 409]


def test_create_without_a_name_or_with_a_bad_one_is_invalid(cluster):
    nameless = _new_deployment()
    del nameless["metadata"]["name"]
    with pytest.raises(ApiException) as refused:
        _apps(cluster).create_namespaced_deployment(NS, nameless)
    assert _body(refused.value)["message"] == (
        'Deployment.apps "" is invalid: metadata.name: Required value: name or generateName is required')
    nameless["metadata"]["generateName"] = "vllm-small-"
    generated = _apps(cluster).create_namespaced_deployment(NS, nameless)
    assert generated.metadata.name.startswith("vllm-small-") and len(generated.metadata.name) == len("vllm-small-") + 5
    with pytest.raises(ApiException) as bad:
        _apps(cluster).create_namespaced_deployment(NS, _new_deployment(name="Vllm_Small"))
    assert _body(bad.value)["details"]["causes"][0]["field"] == "metadata.name"


def test_create_a_service_with_defaults_and_an_allocated_cluster_ip(cluster):
    service = k8s.CoreV1Api(cluster.api()).create_namespaced_service(NS, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm-small"},
        "spec": {"selector": {"app": "vllm-small"}, "ports": [{"name": "http", "port": 80}]}})
    assert (service.spec.type, service.spec.session_affinity) == ("ClusterIP", "None")
    assert (service.spec.ports[0].protocol, service.spec.ports[0].target_port) == ("TCP", 80)
    assert service.spec.cluster_ip.startswith("10.96.") and service.spec.cluster_ips == [service.spec.cluster_ip]
    with pytest.raises(ApiException) as bad:
        k8s.CoreV1Api(cluster.api()).create_namespaced_service(NS, {
            "metadata": {"name": "other"}, "spec": {"ports": [{"port": 70000}]}})
    assert _body(bad.value)["message"] == (
        'Service "other" is invalid: spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive')


def test_create_and_patch_a_horizontal_pod_autoscaler(cluster):
    autoscaling = k8s.AutoscalingV2Api(cluster.api())
    created = autoscaling.create_namespaced_horizontal_pod_autoscaler(NS, {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "vllm-small"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-small"},
                 "maxReplicas": 3}})
    assert created.spec.min_replicas == 1  # defaulted
    assert created.spec.metrics[0].resource.target.average_utilization == 80
    before = autoscaling.read_namespaced_horizontal_pod_autoscaler(HPA, NS)
    patched = autoscaling.patch_namespaced_horizontal_pod_autoscaler(HPA, NS, {"spec": {"minReplicas": 3,
                                                                                         "maxReplicas": 4}})
    assert (patched.spec.min_replicas, patched.spec.max_replicas) == (3, 4)
    assert autoscaling.read_namespaced_horizontal_pod_autoscaler(HPA, NS).spec.min_replicas == 3
    assert int(patched.metadata.resource_version) > int(before.metadata.resource_version)
    with pytest.raises(ApiException) as refused:
        autoscaling.patch_namespaced_horizontal_pod_autoscaler(HPA, NS, {"spec": {"minReplicas": 5}})
    assert _body(refused.value)["message"] == (
        'HorizontalPodAutoscaler.autoscaling "vllm-server-queue" is invalid: spec.maxReplicas: Invalid value: 4: '
        "must be greater than or equal to `minReplicas`")


# ---------------------------------------------------------------------------- scale


def test_the_scale_subresource_reads_and_writes_replicas(cluster):
    apps = _apps(cluster)
    scale = apps.read_namespaced_deployment_scale(DEPLOY, NS)
    assert (scale.spec.replicas, scale.status.replicas) == (2, 2)
    assert scale.status.selector == "app=vllm-server,track notin (canary)"
    scaled = apps.patch_namespaced_deployment_scale(DEPLOY, NS, {"spec": {"replicas": 3}})
    assert scaled.spec.replicas == 3 and scaled.kind == "Scale"
    assert _deployment(cluster).spec.replicas == 3
    with pytest.raises(ApiException) as refused:
        apps.patch_namespaced_deployment_scale(DEPLOY, NS, {"spec": {"replicas": -2}})
    assert _body(refused.value)["message"] == (
        'Scale.autoscaling "vllm-server" is invalid: spec.replicas: Invalid value: -2: must be greater than or '
        "equal to 0")
    with pytest.raises(ApiException) as stale:
        apps.replace_namespaced_deployment_scale(DEPLOY, NS, scale)  # its resourceVersion is old now
    assert stale.value.status == 409


# ----------------------------------------------------------------------------- RBAC


def test_rbac_applies_to_writes_with_the_verb_in_the_denial(cluster):
    cluster.kube.grant([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]}], NS)
    apps = _apps(cluster)
    assert apps.read_namespaced_deployment(DEPLOY, NS).spec.replicas == 2
    with pytest.raises(ApiException) as patch:
        apps.patch_namespaced_deployment(DEPLOY, NS, {"spec": {"replicas": 3}}, dry_run="All")
    assert patch.value.status == 403
    assert _body(patch.value)["message"] == (
        f'deployments.apps "vllm-server" is forbidden: User "{USER}" cannot patch resource "deployments" '
        'in API group "apps" in the namespace "llm"')
    with pytest.raises(ApiException) as create:
        apps.create_namespaced_deployment(NS, _new_deployment())
    assert _body(create.value)["message"] == (
        f'deployments.apps is forbidden: User "{USER}" cannot create resource "deployments" in API group "apps" '
        'in the namespace "llm"')
    with pytest.raises(ApiException) as scale:
        apps.patch_namespaced_deployment_scale(DEPLOY, NS, {"spec": {"replicas": 3}})
    assert 'cannot patch resource "deployments/scale"' in _body(scale.value)["message"]
    cluster.kube.grant([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["update"]}], NS)
    current = apps.read_namespaced_deployment(DEPLOY, NS)
    current.spec.replicas = 3
    assert apps.replace_namespaced_deployment(DEPLOY, NS, current).spec.replicas == 3
    assert [(w.verb, w.status) for w in cluster.kube.writes()] == [("create", 403), ("patch", 403), ("update", 200)]


def test_every_write_is_recorded_with_its_body_and_dry_runs_apart(cluster):
    apps = _apps(cluster)
    apps.patch_namespaced_deployment(DEPLOY, NS, {"spec": {"replicas": 3}}, dry_run="All")
    apps.patch_namespaced_deployment(DEPLOY, NS, {"spec": {"replicas": 3}})
    apps.patch_namespaced_deployment(DEPLOY, NS, [{"op": "replace", "path": "/spec/replicas", "value": 4}])
    apps.read_namespaced_deployment(DEPLOY, NS)
    writes = cluster.kube.writes(resource="deployments")
    assert [(w.method, w.content_type, w.json()) for w in writes] == [
        ("PATCH", SMP, {"spec": {"replicas": 3}}),
        ("PATCH", JSON_PATCH, [{"op": "replace", "path": "/spec/replicas", "value": 4}])]
    assert [w.dry_run for w in cluster.kube.calls(method="PATCH")] == [True, False, False]
    assert len(cluster.kube.dry_runs()) == 1


def test_create_with_a_resource_version_is_refused_as_etcd_refuses_it(cluster):
    body = _new_deployment()
    body["metadata"]["resourceVersion"] = "1234"
    status, answer = _raw(cluster, "POST", f"/apis/apps/v1/namespaces/{NS}/deployments", body)
    assert (status, answer) == (500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": "resourceVersion should not be set on objects to be created",
                                      "code": 500})
    body["metadata"]["resourceVersion"] = "0"  # zero (or not a number) is taken and replaced
    status, answer = _raw(cluster, "POST", f"/apis/apps/v1/namespaces/{NS}/deployments", body)
    assert status == 201 and answer["metadata"]["resourceVersion"] != "0"
