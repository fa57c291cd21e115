"""The stand-in's controllers move a written Deployment along as a cluster does: a new pod
template rolls out through a new ReplicaSet (new pods ready after a delay, old ones scaled down,
status and conditions updated), or its new pods crash-loop with a CUDA OOM until the rollout
times out; scaling adds and removes pods; an HPA keeps its target within its bounds."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from tests.support.fake_kube import ManualClock
from tests.support.kube_fixtures import (
    INCIDENT_DEPLOYMENT,
    INCIDENT_HPA,
    INCIDENT_NS,
    INCIDENT_POD_A,
    INCIDENT_POD_B,
    INCIDENT_REPLICASET,
    STRATEGIC_MERGE_PATCH,
    manual_clock,
)

NS, DEPLOY, HPA, OLD_RS = INCIDENT_NS, INCIDENT_DEPLOYMENT, INCIDENT_HPA, INCIDENT_REPLICASET
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 1.02 GiB is free.")


@pytest.fixture
def clock(cluster) -> ManualClock:
    return manual_clock(cluster, ready_after_s=60.0)


def _apps(cluster) -> k8s.AppsV1Api:
    return k8s.AppsV1Api(cluster.api())


ARGS = ["--model=Qwen/Qwen2.5-7B-Instruct", "--served-model-name=qwen2.5-7b", "--max-model-len=8192",
        "--max-num-seqs=128", "--port=8000"]


def _new_args(cluster, *args: str) -> k8s.V1Deployment:
    """The remediation's kind of write: the vLLM container's args set by a strategic merge patch."""
    return _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "args": [*ARGS, *args]}]}}}}, _content_type=STRATEGIC_MERGE_PATCH)


def _status(cluster) -> tuple[Any, ...]:
    status = _apps(cluster).read_namespaced_deployment_status(DEPLOY, NS).status
    return (status.observed_generation, status.replicas, status.updated_replicas, status.ready_replicas,
            status.available_replicas, status.unavailable_replicas)


def _conditions(cluster) -> dict[str, tuple[str, str]]:
    status = _apps(cluster).read_namespaced_deployment_status(DEPLOY, NS).status
    return {c.type: (c.status, c.reason) for c in status.conditions or []}


def _pods(cluster) -> dict[str, tuple[str, bool]]:
    """name -> (pod-template-hash, ready) of the Deployment's pods, as the API lists them."""
    pods = k8s.CoreV1Api(cluster.api()).list_namespaced_pod(NS, label_selector="app=vllm-server,track=stable")
    return {p.metadata.name: (p.metadata.labels["pod-template-hash"],
                              all(c.ready for c in p.status.container_statuses or []))
            for p in pods.items}


def test_a_new_template_rolls_out_one_pod_at_a_time(cluster, clock):
    patched = _new_args(cluster, "--gpu-memory-utilization=0.90")
    assert patched.metadata.generation == 15
    # the controller acted: a ReplicaSet for the new template, scaled to the surge of 1
    sets = _apps(cluster).list_namespaced_replica_set(NS, label_selector="app=vllm-server,track=stable").items
    new_rs = [rs for rs in sets if rs.metadata.name not in (OLD_RS, "vllm-server-5b4f9c7d2")]
    assert len(new_rs) == 1
    rs = new_rs[0]
    digest = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"vllm-server-{digest}"
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "10"
    assert rs.spec.selector.match_labels == {"app": "vllm-server", "pod-template-hash": digest}
    assert rs.spec.template.spec.containers[0].args == [*ARGS, "--gpu-memory-utilization=0.90"]
    assert _status(cluster) == (15, 3, 1, 2, 2, 1)
    assert _conditions(cluster) == {"Available": ("True", "MinimumReplicasAvailable"),
                                    "Progressing": ("True", "ReplicaSetUpdated")}
    first = [name for name, (h, _) in _pods(cluster).items() if h == digest]
    assert len(first) == 1 and first[0].startswith(f"vllm-server-{digest}-")
    assert _pods(cluster)[first[0]] == (digest, False)

    clock.advance(59)
    assert _status(cluster) == (15, 3, 1, 2, 2, 1)
    clock.advance(1)  # the first new pod is ready: an old one goes, a second new one comes
    pods = _pods(cluster)
    assert sorted(h for h, _ in pods.values()) == sorted([digest, digest, "7d9c8b6f4"])
    assert _status(cluster) == (15, 3, 2, 2, 2, 1)
    clock.advance(60)
    pods = _pods(cluster)
    assert [h for h, ready in pods.values()] == [digest, digest] and all(r for _, r in pods.values())
    assert INCIDENT_POD_A not in pods and INCIDENT_POD_B not in pods
    assert _status(cluster) == (15, 2, 2, 2, 2, None)
    assert _conditions(cluster)["Progressing"] == ("True", "NewReplicaSetAvailable")
    deploy = _apps(cluster).read_namespaced_deployment(DEPLOY, NS)
    assert deploy.metadata.annotations["deployment.kubernetes.io/revision"] == "10"
    assert deploy.metadata.generation == 15  # the controller's writes are status writes
    old = _apps(cluster).read_namespaced_replica_set(OLD_RS, NS)
    assert (old.spec.replicas, old.status.replicas) == (0, 0)
    scaling = k8s.CoreV1Api(cluster.api()).list_namespaced_event(
        NS, field_selector=f"involvedObject.name={DEPLOY},reason=ScalingReplicaSet").items
    assert [e.message for e in scaling if e.first_timestamp.hour == 21] == [
        f"Scaled up replica set vllm-server-{digest} to 1 from 0", f"Scaled down replica set {OLD_RS} to 1 from 2",
        f"Scaled up replica set vllm-server-{digest} to 2 from 1", f"Scaled down replica set {OLD_RS} to 0 from 1"]
    # the new pods are what a scheduler and kubelet make of the template
    pod = cluster.kube.get("Pod", NS, next(iter(pods)))
    assert pod["spec"]["nodeName"] in ("gpu-node-03", "gpu-node-05")
    assert pod["metadata"]["ownerReferences"][0]["name"] == f"vllm-server-{digest}"
    assert pod["status"]["phase"] == "Running" and pod["status"]["podIP"].startswith("10.4.")
    log = k8s.CoreV1Api(cluster.api()).read_namespaced_pod_log(pod["metadata"]["name"], NS, container="vllm",
                                                               _preload_content=False).data.decode()
    assert "Starting vLLM API server on http://0.0.0.0:8000" in log


def test_a_crash_looping_rollout_times_out_with_a_cuda_oom_in_the_logs(cluster, clock):
    cluster.kube.rollout.outcome = "crashloop"
    cluster.kube.rollout.crash_after_s = 40
    _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"progressDeadlineSeconds": 300}})
    _new_args(cluster, "--max-num-seqs=512")
    core = k8s.CoreV1Api(cluster.api())
    [new] = [name for name, (h, _) in _pods(cluster).items() if h != "7d9c8b6f4"]

    def container() -> k8s.V1ContainerStatus:
        return core.read_namespaced_pod_status(new, NS).status.container_statuses[0]

    assert container().state.running is not None and container().restart_count == 0
    clock.advance(41)  # the first run died: exit code 1, back-off 10 s
    state = container()
    assert state.restart_count == 1 and not state.ready
    assert state.state.waiting.reason == "CrashLoopBackOff"
    assert state.state.waiting.message.startswith("back-off 10s restarting failed container=vllm pod=")
    assert (state.last_state.terminated.exit_code, state.last_state.terminated.reason) == (1, "Error")
    previous = core.read_namespaced_pod_log(new, NS, container="vllm", previous=True,
                                            _preload_content=False).data.decode()
    assert OOM in previous and "Traceback (most recent call last):" in previous
    clock.advance(10 + 40 + 20 + 40)  # restarted, died again, and again
    assert container().restart_count == 3
    assert container().state.waiting.message.startswith("back-off 40s")
    [back_off] = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={new},reason=BackOff").items
    uid = core.read_namespaced_pod(new, NS).metadata.uid
    assert (back_off.type, back_off.count, back_off.involved_object.field_path) == ("Warning", 3, "spec.containers{vllm}")
    assert back_off.message == f"Back-off restarting failed container vllm in pod {new}_{NS}({uid})"
    # the old pods still serve: no new pod became available, so none was scaled down
    assert _status(cluster) == (16, 3, 1, 2, 2, 1)
    assert _conditions(cluster)["Progressing"] == ("True", "ReplicaSetUpdated")
    clock.advance(300 - 151 + 1)  # progressDeadlineSeconds after the last progress (and a second)
    status = _apps(cluster).read_namespaced_deployment_status(DEPLOY, NS).status
    progressing = next(c for c in status.conditions if c.type == "Progressing")
    assert (progressing.status, progressing.reason) == ("False", "ProgressDeadlineExceeded")
    assert progressing.message.startswith('ReplicaSet "vllm-server-') and progressing.message.endswith(
        '" has timed out progressing.')
    assert _conditions(cluster)["Available"] == ("True", "MinimumReplicasAvailable")
    assert sorted(_pods(cluster)) == sorted([INCIDENT_POD_A, INCIDENT_POD_B, new])


def test_scaling_adds_and_removes_pods_of_the_current_replicaset(cluster, clock):
    cluster.kube.rollout.hpa_sync_s = None  # no HPA controller here: its bounds are 2..2
    _apps(cluster).patch_namespaced_deployment_scale(DEPLOY, NS, {"spec": {"replicas": 4}})
    pods = _pods(cluster)
    assert len(pods) == 4 and {h for h, _ in pods.values()} == {"7d9c8b6f4"}  # no rollout, same template
    assert _status(cluster) == (15, 4, 4, 2, 2, 2)
    # maxUnavailable 0: all four must be available for minimum availability
    assert _conditions(cluster)["Available"] == ("False", "MinimumReplicasUnavailable")
    clock.advance(60)
    assert _status(cluster) == (15, 4, 4, 4, 4, None)
    assert _conditions(cluster)["Available"] == ("True", "MinimumReplicasAvailable")
    _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"replicas": 1}})
    assert len(_pods(cluster)) == 1
    assert _apps(cluster).read_namespaced_replica_set(OLD_RS, NS).spec.replicas == 1


def test_an_hpa_clamps_its_target_into_its_bounds(cluster, clock):
    autoscaling = k8s.AutoscalingV2Api(cluster.api())
    autoscaling.patch_namespaced_horizontal_pod_autoscaler(HPA, NS, {"spec": {"minReplicas": 3, "maxReplicas": 4}})
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(HPA, NS)
    assert (hpa.spec.min_replicas, hpa.metadata.generation) == (3, None)  # no HPA generation in v1.30
    clock.advance(14)
    assert _apps(cluster).read_namespaced_deployment(DEPLOY, NS).spec.replicas == 2
    clock.advance(1)  # the HPA controller's sync: below minReplicas, scaled up to it
    deploy = _apps(cluster).read_namespaced_deployment(DEPLOY, NS)
    assert (deploy.spec.replicas, deploy.metadata.generation) == (3, 15)
    assert len(_pods(cluster)) == 3
    status = autoscaling.read_namespaced_horizontal_pod_autoscaler(HPA, NS).status
    assert status.desired_replicas == 3 and status.last_scale_time is not None
    # a manual scale above maxReplicas is undone at the next sync
    _apps(cluster).patch_namespaced_deployment_scale(DEPLOY, NS, {"spec": {"replicas": 6}})
    clock.advance(15)
    assert _apps(cluster).read_namespaced_deployment(DEPLOY, NS).spec.replicas == 4


def test_recreate_replaces_every_pod_at_once(cluster, clock):
    _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"strategy": {
        "$retainKeys": ["type"], "type": "Recreate"}}})
    _new_args(cluster, "--kv-cache-dtype=fp8")
    pods = _pods(cluster)
    assert len(pods) == 2 and "7d9c8b6f4" not in {h for h, _ in pods.values()}
    assert _status(cluster) == (16, 2, 2, None, None, 2)
    assert _conditions(cluster)["Available"] == ("False", "MinimumReplicasUnavailable")
    clock.advance(60)
    assert _conditions(cluster) == {"Available": ("True", "MinimumReplicasAvailable"),
                                    "Progressing": ("True", "NewReplicaSetAvailable")}


def test_rolling_back_to_the_old_template_reuses_its_replicaset(cluster, clock):
    original = _apps(cluster).read_namespaced_deployment(DEPLOY, NS).spec.template.spec.containers[0].args
    _new_args(cluster, "--enforce-eager")
    clock.advance(120)
    assert {h for h, _ in _pods(cluster).values()} != {"7d9c8b6f4"}
    _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "args": original}]}}}})
    clock.advance(120)
    assert {h for h, _ in _pods(cluster).values()} == {"7d9c8b6f4"}
    old = _apps(cluster).read_namespaced_replica_set(OLD_RS, NS)
    assert (old.spec.replicas, old.metadata.annotations["deployment.kubernetes.io/revision"]) == (2, "11")


def test_a_node_selector_nothing_matches_leaves_the_new_pod_pending(cluster, clock):
    _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"template": {"spec": {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}}})
    [new] = [name for name, (h, _) in _pods(cluster).items() if h != "7d9c8b6f4"]
    clock.advance(601)  # progressDeadlineSeconds (defaulted to 600) and the controller's second
    status = k8s.CoreV1Api(cluster.api()).read_namespaced_pod_status(new, NS).status
    assert status.phase == "Pending"
    assert status.conditions[0].reason == "Unschedulable"
    assert status.conditions[0].message == (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are "
        "available: 3 Preemption is not helpful for scheduling.")
    assert _conditions(cluster)["Progressing"] == ("False", "ProgressDeadlineExceeded")


def test_the_outcome_switch_can_decide_per_pod(cluster, clock):
    """A scenario where only a template with a high memory fraction crash-loops."""
    cluster.kube.rollout.outcome = lambda pod: (
        "crashloop" if "--gpu-memory-utilization=0.99" in pod["spec"]["containers"][0].get("args", []) else "ready")
    _new_args(cluster, "--gpu-memory-utilization=0.99")
    clock.advance(120)
    assert _status(cluster)[2:5] == (1, 2, 2)
    _new_args(cluster, "--gpu-memory-utilization=0.85")
    clock.advance(240)
    assert _conditions(cluster)["Progressing"] == ("True", "NewReplicaSetAvailable")
    assert all(ready for _, ready in _pods(cluster).values())


def test_the_rollout_runs_on_the_real_clock_too(cluster):
    cluster.kube.rollout.ready_after_s = 0.3
    _new_args(cluster, "--disable-log-requests")
    deadline = time.monotonic() + 10
    while _conditions(cluster).get("Progressing") != ("True", "NewReplicaSetAvailable"):
        assert time.monotonic() < deadline, _status(cluster)
        time.sleep(0.05)
    assert _status(cluster) == (15, 2, 2, 2, 2, None)
    assert len({h for h, _ in _pods(cluster).values()}) == 1


def test_the_controller_acts_when_it_observes_the_write(cluster, clock):
    cluster.kube.rollout.observe_after_s = 2.0
    _apps(cluster).patch_namespaced_deployment(DEPLOY, NS, {"spec": {"replicas": 3}})
    assert _status(cluster) == (None, 2, 2, 2, None, None)  # the scenario's status, not observed yet
    clock.advance(2)
    assert _status(cluster) == (15, 3, 3, 2, 2, 1)


def test_a_created_deployment_gets_its_first_replicaset_and_pods(cluster, clock):
    apps = _apps(cluster)
    apps.create_namespaced_deployment(NS, {
        "metadata": {"name": "embedder"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "embedder"}},
                 "template": {"metadata": {"labels": {"app": "embedder"}},
                              "spec": {"containers": [{"name": "tei", "image": "ghcr.io/huggingface/tei:1.5"}]}}}})
    [rs] = apps.list_namespaced_replica_set(NS, label_selector="app=embedder").items
    assert (rs.spec.replicas, rs.metadata.annotations["deployment.kubernetes.io/revision"]) == (2, "1")
    assert len(cluster.kube.pods_of(NS, "embedder")) == 2
    clock.advance(60)
    status = apps.read_namespaced_deployment_status("embedder", NS).status
    assert (status.observed_generation, status.ready_replicas, status.available_replicas) == (1, 2, 2)
    assert {c.type: c.reason for c in status.conditions} == {"Available": "MinimumReplicasAvailable",
                                                             "Progressing": "NewReplicaSetAvailable"}


def test_a_watch_streams_the_rollout_as_the_client_reads_it(cluster):
    """What `kubectl rollout status` does: watch the Deployment until it is complete (or not)."""
    cluster.kube.rollout.ready_after_s = 0.2
    apps = _apps(cluster)
    start = apps.list_namespaced_deployment(NS, field_selector=f"metadata.name={DEPLOY}").metadata.resource_version
    _new_args(cluster, "--swap-space=0")
    seen = []
    for event in watch.Watch().stream(apps.list_namespaced_deployment, NS, field_selector=f"metadata.name={DEPLOY}",
                                      resource_version=start, timeout_seconds=10):
        deploy = event["object"]
        conditions = {c.type: c.reason for c in deploy.status.conditions or []}
        seen.append((event["type"], deploy.metadata.generation, deploy.status.updated_replicas))
        if conditions.get("Progressing") == "NewReplicaSetAvailable":
            break
    assert seen[0] == ("MODIFIED", 15, 2)  # the patch itself, before the controller saw it
    assert seen[-1] == ("MODIFIED", 15, 2) and len(seen) > 3
    assert all(kind == "MODIFIED" for kind, _, _ in seen)
    [watched] = cluster.kube.calls(verb="watch")
    assert (watched.status, watched.query["resourceVersion"]) == (200, start)


def test_a_watch_without_a_resource_version_starts_with_what_exists(cluster):
    events = list(watch.Watch().stream(k8s.CoreV1Api(cluster.api()).list_namespaced_pod, NS,
                                       label_selector="app=vllm-server,track=stable", timeout_seconds=1))
    assert sorted((e["type"], e["object"].metadata.name) for e in events) == [
        ("ADDED", INCIDENT_POD_A), ("ADDED", INCIDENT_POD_B)]


def test_a_watch_from_a_resource_version_too_old_is_expired(cluster):
    with pytest.raises(ApiException) as expired:
        list(watch.Watch().stream(_apps(cluster).list_namespaced_deployment, NS, resource_version="5",
                                  timeout_seconds=1))
    assert expired.value.status == 410
    assert expired.value.reason == "Expired: too old resource version: 5 (1001)"


def test_a_paused_deployment_does_not_roll_out_until_resumed(cluster, clock):
    cluster.kube.rollout.hpa_sync_s = None  # its HPA would bring 3 replicas back to 2
    apps = _apps(cluster)
    apps.patch_namespaced_deployment(DEPLOY, NS, {"spec": {"paused": True}})
    _new_args(cluster, "--gpu-memory-utilization=0.85")
    clock.advance(700)  # no rollout, so no deadline either
    assert {h for h, _ in _pods(cluster).values()} == {"7d9c8b6f4"}
    assert cluster.kube.get("Deployment", NS, DEPLOY)["status"]["conditions"][-1]["reason"] == "DeploymentPaused"
    assert _conditions(cluster)["Progressing"] == ("Unknown", "DeploymentPaused")
    apps.patch_namespaced_deployment_scale(DEPLOY, NS, {"spec": {"replicas": 3}})  # scaling still happens
    assert [h for h, _ in _pods(cluster).values()] == ["7d9c8b6f4"] * 3
    apps.patch_namespaced_deployment(DEPLOY, NS, {"spec": {"paused": False}})
    assert _conditions(cluster)["Progressing"] == ("True", "ReplicaSetUpdated")
    clock.advance(60 * 4)
    assert _conditions(cluster)["Progressing"] == ("True", "NewReplicaSetAvailable")
    assert len({h for h, _ in _pods(cluster).values()} - {"7d9c8b6f4"}) == 1
