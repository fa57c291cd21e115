"""The stand-in API server speaks the Kubernetes REST API as the official client expects."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.support.fake_engines import FakeEngine
from tests.support.fake_kube import USER, FakeKube, parse_request
from tests.support.kube_fixtures import (
    INCIDENT_NS,
    INCIDENT_POD_A,
    INCIDENT_POD_B,
    TEST_TOKEN,
)

NS, POD_A, POD_B = INCIDENT_NS, INCIDENT_POD_A, INCIDENT_POD_B


def _body(error: ApiException) -> dict:
    return json.loads(error.body)


def _raw_get(url: str, token: str | None = TEST_TOKEN) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# ------------------------------------------------------------------ objects and lists


def test_get_returns_the_object_with_its_kind_and_api_version(cluster):
    deploy = k8s.AppsV1Api(cluster.api()).read_namespaced_deployment("vllm-server", NS)
    assert deploy.metadata.name == "vllm-server"
    assert deploy.spec.replicas == 2
    assert deploy.metadata.uid == "4f6d1a52-0000-4000-8000-00000000d001"


def test_missing_object_is_a_not_found_status_with_the_api_servers_wording(cluster):
    with pytest.raises(ApiException) as caught:
        k8s.AppsV1Api(cluster.api()).read_namespaced_deployment("nope", NS)
    assert caught.value.status == 404
    assert _body(caught.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'deployments.apps "nope" not found', "reason": "NotFound",
        "details": {"name": "nope", "group": "apps", "kind": "deployments"}, "code": 404,
    }


def test_list_is_a_typed_list_with_a_resource_version_and_items_without_kind(cluster):
    status, raw = _raw_get(f"{cluster.kube.url}/api/v1/namespaces/{NS}/services")
    doc = json.loads(raw)
    assert status == 200
    assert doc["kind"] == "ServiceList" and doc["apiVersion"] == "v1"
    assert doc["metadata"]["resourceVersion"].isdigit()
    assert sorted(item["metadata"]["name"] for item in doc["items"]) == [
        "manual-endpoints", "vllm-server", "vllm-server-canary"]
    assert all("kind" not in item for item in doc["items"])


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=vllm-server,track=stable", [POD_A, POD_B]),
    ("app==vllm-server,track!=stable", ["vllm-server-canary-6c5d4-zz9k1"]),
    ("track in (canary, other)", ["vllm-server-canary-6c5d4-zz9k1"]),
    ("app=vllm-server,track notin (canary)", [POD_A, POD_B]),
    ("pod-template-hash", [POD_A, POD_B, "vllm-server-canary-6c5d4-zz9k1"]),
    ("app,!pod-template-hash", []),
])
def test_label_selectors_equality_set_based_and_exists(cluster, selector, expected):
    pods = k8s.CoreV1Api(cluster.api()).list_namespaced_pod(NS, label_selector=selector)
    assert sorted(p.metadata.name for p in pods.items) == sorted(expected)


def test_field_selectors_on_node_phase_and_involved_object(cluster):
    core = k8s.CoreV1Api(cluster.api())
    on_node = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-node-05,status.phase!=Succeeded")
    assert sorted(p.metadata.name for p in on_node.items) == [
        "embedder-84c6d-t7xq2", "node-exporter-5kq2x", POD_B, "vllm-server-canary-6c5d4-zz9k1"]
    events = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={POD_B},involvedObject.kind=Pod")
    assert sorted(e.reason for e in events.items) == ["BackOff", "Unhealthy"]
    by_ns = core.list_pod_for_all_namespaces(field_selector="metadata.namespace=search")
    assert [p.metadata.name for p in by_ns.items] == ["embedder-84c6d-t7xq2"]


def test_unsupported_field_selector_is_a_bad_request(cluster):
    with pytest.raises(ApiException) as caught:
        k8s.CoreV1Api(cluster.api()).list_namespaced_pod(NS, field_selector="spec.hostname=x")
    assert caught.value.status == 400
    assert _body(caught.value)["message"] == "field label not supported: spec.hostname"


def test_cluster_wide_and_cluster_scoped_lists(cluster):
    core = k8s.CoreV1Api(cluster.api())
    assert len(core.list_pod_for_all_namespaces().items) == 6
    assert sorted(n.metadata.name for n in core.list_node().items) == ["cpu-node-01", "gpu-node-03", "gpu-node-05"]


def test_unknown_resource_and_disabled_api_version_are_not_found(cluster):
    status, raw = _raw_get(f"{cluster.kube.url}/apis/batch/v1/namespaces/{NS}/jobs")
    assert status == 404 and json.loads(raw)["message"] == "the server could not find the requested resource"
    cluster.kube.disabled_versions.add("policy/v1")
    with pytest.raises(ApiException) as caught:
        k8s.PolicyV1Api(cluster.api()).list_namespaced_pod_disruption_budget(NS)
    assert caught.value.status == 404


def test_a_wrong_token_is_unauthorized(cluster):
    status, raw = _raw_get(f"{cluster.kube.url}/api/v1/nodes", token="wrong")
    assert status == 401 and json.loads(raw)["reason"] == "Unauthorized"


# --------------------------------------------------------------------------------- logs


def test_log_tail_lines_and_timestamps(cluster):
    core = k8s.CoreV1Api(cluster.api())
    text = core.read_namespaced_pod_log(POD_B, NS, container="vllm", previous=True, tail_lines=2,
                                        _preload_content=False).data.decode()
    assert text.splitlines() == [
        "ERROR 03-09 20:21:05 async_llm_engine.py:65] torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 1.75 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free. Process 1 has "
        "78.12 GiB memory in use.",
        "INFO 03-09 20:21:06 server.py:91] Shutting down",
    ]
    stamped = core.read_namespaced_pod_log(POD_B, NS, container="vllm", tail_lines=1, timestamps=True,
                                           _preload_content=False).data.decode()
    assert stamped.startswith("2026-03-09T20:26:05.000000000Z INFO 03-09 20:26:05 metrics.py:349]")


def test_previous_log_of_a_container_that_never_terminated_is_a_bad_request(cluster):
    with pytest.raises(ApiException) as caught:
        k8s.CoreV1Api(cluster.api()).read_namespaced_pod_log(POD_A, NS, container="vllm", previous=True)
    assert caught.value.status == 400
    assert _body(caught.value)["message"] == (
        f'previous terminated container "vllm" in pod "{POD_A}" not found')
    assert _body(caught.value)["reason"] == "BadRequest"


def test_log_of_an_unknown_container_is_a_bad_request(cluster):
    with pytest.raises(ApiException) as caught:
        k8s.CoreV1Api(cluster.api()).read_namespaced_pod_log(POD_A, NS, container="sidecar")
    assert _body(caught.value)["message"] == f"container sidecar is not valid for pod {POD_A}"


# -------------------------------------------------------------------------------- proxy


def test_pod_proxy_with_a_port_forwards_to_the_pods_server(cluster):
    text = k8s.CoreV1Api(cluster.api()).connect_get_namespaced_pod_proxy_with_path(
        f"{POD_A}:8000", NS, "metrics", _preload_content=False).data.decode()
    assert 'vllm:num_requests_waiting{model_name="qwen2.5-7b"} 18.0' in text
    assert cluster.engines[POD_A].hits == ["/metrics"]


def test_pod_proxy_to_a_port_nothing_listens_on_is_service_unavailable(cluster):
    with pytest.raises(ApiException) as caught:
        k8s.CoreV1Api(cluster.api()).connect_get_namespaced_pod_proxy_with_path(f"{POD_A}:9000", NS, "metrics")
    assert caught.value.status == 503
    assert _body(caught.value)["message"] == (
        "error trying to reach service: dial tcp 10.4.3.17:9000: connect: connection refused")


def test_pod_proxy_passes_the_upstream_status_through(cluster):
    status, _ = _raw_get(f"{cluster.kube.url}/api/v1/namespaces/{NS}/pods/{POD_A}:8000/proxy/nope")
    assert status == 404


def test_pod_proxy_without_a_port_uses_port_80():
    with FakeKube() as kube, _engine("tgi_queue_size 2\n") as engine:
        kube.add({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "tgi-0", "namespace": "a"}})
        kube.set_upstream("a", "tgi-0", 80, engine.url)
        status, raw = _raw_get(f"{kube.url}/api/v1/namespaces/a/pods/tgi-0/proxy/metrics", token=None)
    assert status == 200 and raw == b"tgi_queue_size 2\n"


class _engine:
    def __init__(self, text: str):
        self.engine = FakeEngine(text)

    def __enter__(self) -> FakeEngine:
        return self.engine.start()

    def __exit__(self, *exc: object) -> None:
        self.engine.stop()


# ------------------------------------------------------------------ latency and failures


def test_injected_failure_answers_with_the_status_code(cluster):
    cluster.kube.fail(r"/events", 500)
    with pytest.raises(ApiException) as caught:
        k8s.CoreV1Api(cluster.api()).list_namespaced_event(NS)
    assert caught.value.status == 500 and _body(caught.value)["reason"] == "InternalError"


def test_dropped_connection_gives_no_answer(cluster):
    cluster.kube.fail(r"/nodes/", "drop")
    with socket.create_connection(("127.0.0.1", cluster.kube.port), timeout=5) as sock:
        sock.sendall(f"GET /api/v1/nodes/gpu-node-03 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TEST_TOKEN}\r\n\r\n"
                     .encode())
        assert sock.recv(100) == b""


def test_latency_applies_to_matching_paths_only(cluster):
    kube = cluster.kube
    kube.latency_s = 0.25
    kube.add_latency(r"/log\b", 1.5)
    assert kube._delay_for(f"/api/v1/namespaces/{NS}/pods/{POD_A}/log?container=vllm") == pytest.approx(1.75)
    assert kube._delay_for(f"/api/v1/namespaces/{NS}/pods") == pytest.approx(0.25)


# ----------------------------------------------------------------------- RBAC and record


def test_rbac_mode_denies_with_the_real_forbidden_message(cluster):
    kube = cluster.kube
    kube.grant([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}], namespace=NS)
    core = k8s.CoreV1Api(cluster.api())
    assert core.read_namespaced_pod(POD_A, NS).metadata.name == POD_A
    with pytest.raises(ApiException) as listing:
        core.list_namespaced_pod(NS)
    assert _body(listing.value)["message"] == (
        f'pods is forbidden: User "{USER}" cannot list resource "pods" in API group "" in the namespace "llm"')
    with pytest.raises(ApiException) as logs:
        core.read_namespaced_pod_log(POD_A, NS, container="vllm")
    assert _body(logs.value)["message"] == (
        f'pods "{POD_A}" is forbidden: User "{USER}" cannot get resource "pods/log" in API group "" '
        f'in the namespace "llm"')
    with pytest.raises(ApiException) as node:
        core.read_node("gpu-node-03")
    assert _body(node.value)["message"] == (
        f'nodes "gpu-node-03" is forbidden: User "{USER}" cannot get resource "nodes" in API group "" '
        "at the cluster scope")
    with pytest.raises(ApiException) as deploy:
        k8s.AppsV1Api(cluster.api()).read_namespaced_deployment("vllm-server", NS)
    assert _body(deploy.value)["details"] == {"name": "vllm-server", "group": "apps", "kind": "deployments"}
    assert deploy.value.status == 403


def test_rbac_wildcards_and_subresource_patterns(cluster):
    cluster.kube.grant([{"apiGroups": ["*"], "resources": ["*/log"], "verbs": ["*"]}])
    core = k8s.CoreV1Api(cluster.api())
    assert "vLLM API server" in core.read_namespaced_pod_log(POD_A, NS, container="vllm", _preload_content=False
                                                            ).data.decode()
    with pytest.raises(ApiException):
        core.read_namespaced_pod(POD_A, NS)


def test_every_request_is_recorded_with_its_verb_resource_and_subresource(cluster):
    core = k8s.CoreV1Api(cluster.api())
    core.list_namespaced_pod(NS, label_selector="app=vllm-server")
    core.read_namespaced_pod_log(POD_B, NS, container="vllm", previous=True, tail_lines=5)
    recorded = cluster.kube.calls()
    assert [(r.verb, r.resource, r.subresource, r.namespace, r.status) for r in recorded] == [
        ("list", "pods", None, NS, 200), ("get", "pods", "log", NS, 200)]
    assert recorded[0].query == {"labelSelector": "app=vllm-server"}
    assert recorded[1].query["previous"] == "true" and recorded[1].query["tailLines"] == "5"
    assert cluster.kube.calls(verb="get", subresource="log")[0].name == POD_B


def test_parse_request_reads_proxy_names_and_cluster_scope():
    proxied = parse_request("GET", "/api/v1/namespaces/llm/pods/p-1%3A8000/proxy/metrics")
    assert (proxied.verb, proxied.resource, proxied.name, proxied.subresource) == ("get", "pods", "p-1:8000", "proxy")
    nodes = parse_request("GET", "/api/v1/nodes?fieldSelector=x")
    assert (nodes.verb, nodes.resource, nodes.namespace, nodes.api_group) == ("list", "nodes", None, "")
    hpa = parse_request("GET", "/apis/autoscaling/v2/namespaces/llm/horizontalpodautoscalers/h")
    assert (hpa.verb, hpa.api_group, hpa.version, hpa.name) == ("get", "autoscaling", "v2", "h")
    assert parse_request("GET", "/version").verb is None


def test_the_server_listens_on_loopback_only():
    with FakeKube() as kube:
        assert kube._server is not None and kube._server.server_address[0] == "127.0.0.1"
