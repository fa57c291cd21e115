"""Deployments, StatefulSets, pods and HPAs as typed evidence (collectors.parsers.kube_objects)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from collectors.errors import ParseError
from collectors.parsers.kube_objects import (
    autoscaler_from_object,
    load_yaml_documents,
    parse_deployment,
    parse_hpa,
    parse_pods,
    pod_state_from_object,
    workload_from_object,
)
from runbooks.model.evidence import GpuRequest, Probe, Workload
from runbooks.model.serde import from_jsonable, to_jsonable
from tests.support import words

DATA = Path(__file__).parent / "data" / "kube"


def read(name: str) -> str:
    return (DATA / name).read_text()


# ------------------------------------------------------------------ workloads


def test_runbook_incident_deployment_is_read_with_its_strict_liveness_probe():
    workload, config = parse_deployment(read("deployment-runbook-incident.yaml"), source="deployment.yaml")
    assert (workload.source, workload.kind, workload.name, workload.namespace) == (
        "deployment.yaml", "Deployment", "vllm-server", "llm")
    assert (workload.replicas, workload.ready_replicas) == (2, 1)
    assert (workload.container, workload.image) == ("vllm", "vllm/vllm-openai:v0.6.4")
    assert workload.gpu == GpuRequest(resource="nvidia.com/gpu", count=1)
    liveness = workload.probes[0]
    assert liveness == Probe(kind="liveness", handler="GET /health:8000", initial_delay_s=30, period_s=10,
                             timeout_s=5, failure_threshold=3)
    assert liveness.budget_s == 60
    assert [p.kind for p in workload.probes] == ["liveness", "readiness"]  # no startupProbe
    assert workload.probes[1].handler == "GET /health:http"
    assert (workload.probes[1].timeout_s, workload.probes[1].failure_threshold) == (1, 3)  # k8s defaults
    assert (workload.max_surge, workload.max_unavailable) == ("100%", "50%")
    assert workload.node_selector == {"pool": "gpu-shared"}
    assert workload.shm_size is None
    assert workload.labels == {"app": "vllm-server", "team": "llm-platform"}
    assert (workload.generation, workload.revision) == (12, "7")
    assert (config.max_model_len, config.max_num_seqs, config.memory_fraction) == (8192, 128, 0.95)


def test_list_prefers_the_deployment_that_runs_the_server_over_the_router():
    workload, config = parse_deployment(read("deployment-production-stack.yaml"))
    assert workload.name == "vllm-llama3-deployment-vllm"
    assert config.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert workload.ready_replicas == 0  # status present, readyReplicas omitted while zero
    assert workload.shm_size == "20Gi"
    startup = next(p for p in workload.probes if p.kind == "startup")
    assert (startup.failure_threshold, startup.period_s, startup.budget_s) == (60, 10, 615)
    assert (workload.max_surge, workload.max_unavailable) == ("25%", "25%")  # RollingUpdate defaults


def test_manifest_without_status_has_unknown_ready_replicas_and_unbounded_shm():
    workload, _ = parse_deployment(read("deployment-kubeai.yaml"))
    assert workload.ready_replicas is None
    assert workload.shm_size == "unbounded"
    assert workload.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert [p.kind for p in workload.probes] == ["readiness", "startup"]
    assert workload.probes[1].budget_s == 10800


def test_mig_slice_request_and_gpu_product_affinity_are_read_past_a_sidecar():
    workload, config = parse_deployment(read("deployment-mig.yaml"))
    assert workload.container == "vllm"
    assert workload.gpu == GpuRequest(resource="nvidia.com/mig-3g.40gb", count=1, mig_profile="3g.40gb")
    # required node affinity on the GPU model joins nodeSelector; the zone term does not
    assert workload.node_selector == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert (workload.max_surge, workload.max_unavailable) == (None, None)  # Recreate
    assert config.max_model_len == 32768


def test_statefulset_is_accepted_and_never_surges():
    workload, config = parse_deployment(read("statefulset-sglang-multinode.yaml"))
    assert (workload.kind, workload.name, workload.replicas) == ("StatefulSet", "sglang-distributed", 2)
    assert workload.gpu == GpuRequest(resource="nvidia.com/gpu", count=8)
    assert (workload.max_surge, workload.max_unavailable) == ("0", "1")
    assert workload.shm_size == "10Gi"
    assert workload.probes == (Probe(kind="readiness", handler="tcp:8000", initial_delay_s=15),)
    assert config.engine == "sglang"


def test_a_readable_launch_wins_over_a_sidecar_that_only_looks_like_an_engine():
    obj = {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [
        {"name": "exporter", "image": "acme/vllm-exporter:1.0", "command": ["/exporter"]},
        {"name": "engine", "image": "acme/runtime:2", "command": ["vllm", "serve", "M"]},
    ]}}}}
    workload, config = workload_from_object(obj)
    assert workload.container == "engine"
    assert (config.launch_form, config.model, config.engine_version) == ("vllm-serve", "M", None)


def test_hami_gpu_memory_request_is_read_in_bytes():
    obj = {"kind": "Deployment", "metadata": {"name": "vgpu"}, "spec": {"template": {"spec": {"containers": [
        {"name": "tgi", "image": "ghcr.io/huggingface/text-generation-inference:2.4.1",
         "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10240, "nvidia.com/gpucores": 50}}},
    ]}}}}
    workload, _ = workload_from_object(obj)
    assert workload.gpu == GpuRequest(resource="nvidia.com/gpumem", count=1, memory_bytes=10 * 2**30)


def test_gpu_count_zero_is_no_gpu_and_host_ipc_counts_as_shared_memory():
    obj = {"kind": "Deployment", "metadata": {"name": "cpu-only"}, "spec": {"template": {"spec": {
        "hostIPC": True,
        "containers": [{"name": "app", "resources": {"limits": {"nvidia.com/gpu": "0"}}}],
    }}}}
    workload, config = workload_from_object(obj)
    assert (workload.gpu, config) == (None, None)
    assert workload.container == "app"
    assert workload.shm_size == "hostIPC"


def test_json_from_the_api_reads_the_same_as_yaml():
    as_yaml = parse_deployment(read("deployment-runbook-incident.yaml"))
    data = yaml.safe_load(read("deployment-runbook-incident.yaml"))
    assert parse_deployment(json.dumps(data, indent=2)) == as_yaml


def test_objects_from_the_kubernetes_client_are_read_after_sanitizing():
    deployment = client.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=client.V1ObjectMeta(name="vllm-server", namespace="llm", generation=3,
                                     annotations={"deployment.kubernetes.io/revision": "2"}),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels={"app": "vllm-server"}),
            template=client.V1PodTemplateSpec(spec=client.V1PodSpec(containers=[client.V1Container(
                name="vllm",
                image="vllm/vllm-openai:v0.6.4",
                command=["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"],
                args=["--max-model-len=8192"],
                resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                liveness_probe=client.V1Probe(http_get=client.V1HTTPGetAction(path="/health", port=8000),
                                              initial_delay_seconds=30),
            )])),
        ),
        status=client.V1DeploymentStatus(ready_replicas=1, replicas=2),
    )
    obj = client.ApiClient().sanitize_for_serialization(deployment)
    workload, config = workload_from_object(obj, source="live")
    assert (workload.name, workload.replicas, workload.ready_replicas, workload.revision) == (
        "vllm-server", 2, 1, "2")
    assert workload.probes[0].budget_s == 60
    assert config.max_model_len == 8192

    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="vllm-server-abc", namespace="llm"),
        status=client.V1PodStatus(phase="Running", start_time=datetime(2025, 3, 14, 1, 2, 3, tzinfo=UTC),
                                  container_statuses=[client.V1ContainerStatus(
                                      name="vllm", image="i", image_id="i", ready=False, restart_count=2,
                                      last_state=client.V1ContainerState(terminated=client.V1ContainerStateTerminated(
                                          exit_code=137, reason="OOMKilled",
                                          finished_at=datetime(2025, 3, 14, 2, 0, tzinfo=UTC))))]),
    )
    state = pod_state_from_object(client.ApiClient().sanitize_for_serialization(pod), source="live")
    assert state.started_at == datetime(2025, 3, 14, 1, 2, 3, tzinfo=UTC)
    assert state.containers[0].last_termination_reason == "OOMKilled"
    assert state.containers[0].last_finished_at == datetime(2025, 3, 14, 2, 0, tzinfo=UTC)


def test_workload_round_trips_through_json():
    workload, _ = parse_deployment(read("deployment-production-stack.yaml"))
    assert from_jsonable(Workload, to_jsonable(workload)) == workload


# ---------------------------------------------------------------------- pods


def test_pods_list_reads_the_oom_killed_pod_and_the_running_one():
    oom, running = parse_pods(read("pods.yaml"))
    assert (oom.name, oom.namespace, oom.node, oom.phase) == (
        "vllm-server-7d9c6b5f4-x2k8p", "llm", "gpu-node-a100-3", "Running")
    assert oom.started_at == datetime(2025, 3, 14, 1, 2, 3, tzinfo=UTC)
    container = oom.containers[0]
    assert (container.name, container.restart_count, container.ready) == ("vllm", 4, False)
    assert (container.state, container.state_reason) == ("waiting", "CrashLoopBackOff")
    assert (container.last_termination_reason, container.last_exit_code) == ("OOMKilled", 137)
    assert container.last_finished_at == datetime(2025, 3, 14, 2, 41, 54, tzinfo=UTC)
    assert oom.restarts == 4
    assert oom.gpu == GpuRequest(resource="nvidia.com/gpu", count=1)
    assert oom.labels["app"] == "vllm-server"

    assert running.restarts == 0
    assert (running.containers[0].state, running.containers[0].ready) == ("running", True)
    assert running.containers[0].started_at == datetime(2025, 3, 14, 1, 2, 40, tzinfo=UTC)
    assert running.containers[0].last_termination_reason is None


def test_pod_list_items_from_the_api_need_no_kind_and_pending_pods_have_no_containers():
    text = json.dumps({"kind": "PodList", "apiVersion": "v1", "items": [
        {"metadata": {"name": "vllm-0", "namespace": "llm"}, "status": {"phase": "Pending"}},
    ]})
    (pod,) = parse_pods(text)
    assert (pod.name, pod.phase, pod.containers, pod.node) == ("vllm-0", "Pending", (), None)


def test_unquoted_yaml_timestamps_become_utc_instants():
    (pod,) = parse_pods("kind: Pod\nmetadata: {name: p}\nstatus: {startTime: 2025-03-14 01:02:03}\n")
    assert pod.started_at == datetime(2025, 3, 14, 1, 2, 3, tzinfo=UTC)


def test_bad_timestamp_names_its_field():
    with words.raises(ParseError, match=r"items\[1\]\.status\.startTime: expected a timestamp"):
        parse_pods(json.dumps({"kind": "List", "items": [
            {"kind": "Pod", "metadata": {"name": "a"}},
            {"kind": "Pod", "metadata": {"name": "b"}, "status": {"startTime": "yesterday"}},
        ]}), source="pods.yaml")


# ----------------------------------------------------------------------- HPA


def test_hpa_v2_on_cpu_only():
    hpa = parse_hpa(read("hpa-v2-cpu.yaml"))
    assert (hpa.name, hpa.min_replicas, hpa.max_replicas, hpa.current_replicas) == ("vllm-hpa", 2, 6, 2)
    assert hpa.metrics == ("Resource:cpu",)
    assert (hpa.target_kind, hpa.target_name) == ("Deployment", "vllm-server")


def test_hpa_v1_target_cpu_percentage_reads_as_cpu_and_min_defaults_to_one():
    hpa = parse_hpa(read("hpa-v1.yaml"))
    assert (hpa.name, hpa.min_replicas, hpa.max_replicas, hpa.current_replicas) == ("tgi-llama", 1, 4, 1)
    assert hpa.metrics == ("Resource:cpu",)


def test_hpa_v2_queue_depth_and_other_metric_sources_are_named():
    hpa = parse_hpa(read("hpa-v2-queue.yaml"))
    assert hpa.metrics == ("Pods:llm_queue_depth", "External:s0-prometheus", "ContainerResource:cpu",
                           "Object:requests_per_second")
    assert hpa.current_replicas is None


def test_hpa_v2beta1_metric_name_field_is_read():
    hpa = autoscaler_from_object({"metadata": {"name": "h"}, "spec": {"maxReplicas": 3, "metrics": [
        {"type": "Pods", "pods": {"metricName": "vllm_num_requests_waiting", "targetAverageValue": "5"}}]}})
    assert hpa.metrics == ("Pods:vllm_num_requests_waiting",)


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("kind: Deployment\nmetadata: {name: x\n", "not YAML", 3),
        ("apiVersion: apps/v1\nmetadata: {name: x}\n", "kind: missing", 1),
        ("just some words\n", "expected a Kubernetes object", 1),
        ("---\nkind: Service\nmetadata: {name: s}\n", "no Deployment, StatefulSet, InferenceService or LeaderWorkerSet", None),
        ("kind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n      containers:\n"
         "      - name: c\n        args: 8192\n", "spec.template.spec.containers[0].args: expected a list", None),
        ("kind: Deployment\nmetadata: {name: d}\nspec: {replicas: many}\n", "spec.replicas: expected an integer",
         None),
        ("kind: Deployment\nspec: {}\n", "metadata.name: missing", None),
        ("kind: Deployment\nmetadata: {name: d}\nspec: {template: {spec: {containers: [{resources: "
         "{limits: {nvidia.com/gpu: lots}}}]}}}\n", "resources.limits.nvidia.com/gpu", None),
    ],
)
def test_malformed_deployment_files_raise_parse_error_with_where(text, message, line):
    with pytest.raises(ParseError) as caught:
        parse_deployment(text, source="deployment.yaml")
    assert caught.value.source == "deployment.yaml"
    assert message in words.message(caught.value)
    assert caught.value.line == line


def test_invalid_calendar_date_is_a_parse_error_not_a_value_error():
    with pytest.raises(ParseError):
        load_yaml_documents("kind: Pod\nmetadata: {creationTimestamp: 2024-02-30}\n", "pods.yaml")


def test_list_item_without_kind_in_a_plain_list_is_a_parse_error():
    with words.raises(ParseError, match=r"items\[0\]\.kind: missing"):
        load_yaml_documents("kind: List\nitems:\n- metadata: {name: x}\n", "pods.yaml")


def test_empty_file_has_no_objects_and_no_pods():
    assert load_yaml_documents("", "pods.yaml") == []
    assert parse_pods("# nothing captured\n") == ()


def test_hpa_file_without_an_hpa_is_a_parse_error():
    with words.raises(ParseError, match="no HorizontalPodAutoscaler"):
        parse_hpa(read("pods.yaml"), source="hpa.yaml")
