"""Live gathering of one workload through the official client against the stand-in API server."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import pytest

from bot.service.bundle_out import write_bundle_json
from collectors.bundle import load_bundle
from collectors.kube.client import KubeConfigError, make_api_client
from collectors.kube.evidence import LOG_HEADER, bundle_files, snapshot_evidence
from collectors.kube.live import KubeSnapshot, gather_workload
from runbooks.model.errors import TargetNotFound
from runbooks.model.evidence import Evidence
from runbooks.model.serde import from_jsonable, to_jsonable
from tests.support import words
from tests.support.fake_kube import FakeKube
from tests.support.kube_fixtures import (
    INCIDENT_NS,
    INCIDENT_POD_A,
    INCIDENT_POD_B,
    TEST_TOKEN,
    add_replicas,
    load_scenario,
    rbac_rules,
    running_scenario,
    write_kubeconfig,
)

NS, POD_A, POD_B = INCIDENT_NS, INCIDENT_POD_A, INCIDENT_POD_B


@pytest.fixture
def tgi(tmp_path: Path):
    with running_scenario("tgi-probes", tmp_path) as scenario:
        yield scenario


def _gather(scenario, namespace: str = NS, name: str = "vllm-server", **kwargs) -> KubeSnapshot:
    return gather_workload(scenario.api(), namespace, name, context="prod", **kwargs)


def _names(objects) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


# ------------------------------------------------------------------- the incident


def test_incident_gathers_the_deployment_its_pods_and_the_oom_hidden_by_a_restart(cluster):
    snap = _gather(cluster)
    assert snap.issues == ()
    assert snap.kind == "Deployment" and snap.container == "vllm"
    assert _names(snap.pods) == [POD_A, POD_B]  # the canary's pod matches app= but is not ours
    assert [(t.pod, t.previous) for t in snap.logs] == [(POD_A, False), (POD_B, True), (POD_B, False)]
    ev = snapshot_evidence(snap)
    assert ev.target == "llm/vllm-server"
    assert ev.workload.name == "vllm-server" and ev.workload.revision == "9"
    assert ev.server_config.max_model_len == 8192 and ev.server_config.memory_fraction == 0.95
    restarted = next(p for p in ev.pods if p.name == POD_B)
    assert restarted.restarts == 1 and restarted.containers[0].last_termination_reason == "OOMKilled"
    assert restarted.containers[0].last_exit_code == 137
    assert ev.logs.count("cuda_oom") == 1
    assert ev.logs.count("vllm_preemption") == 51
    assert ev.logs.engine == "vllm"


def test_incident_metrics_are_read_per_pod_through_the_proxy_and_totalled(cluster):
    ev = snapshot_evidence(_gather(cluster))
    per_pod = {m.source: m for m in ev.pod_metrics}
    assert per_pod[f"metrics-{POD_A}.txt"].queue_depth == 18.0
    assert per_pod[f"metrics-{POD_B}.txt"].queue_depth == 6.0
    total = ev.server_metrics
    assert (total.queue_depth, total.running_requests) == (24.0, 164.0)
    assert total.kv_cache_usage_ratio == pytest.approx(0.983)
    assert total.preemptions_total == 60.0 and total.rejected_total == 14.0
    assert total.kv_cache_capacity_tokens == 69305 * 16
    assert total.ttft_seconds.count == 7209.0 + 720.0
    proxied = cluster.kube.calls(subresource="proxy")
    assert sorted(r.name for r in proxied) == [f"{POD_A}:8000", f"{POD_B}:8000"]


def test_incident_surroundings_are_picked_from_one_list_each(cluster):
    snap = _gather(cluster)
    ev = snapshot_evidence(snap)
    assert [(r.name, r.revision, r.image) for r in ev.replica_sets] == [
        ("vllm-server-7d9c8b6f4", "9", "vllm/vllm-openai:v0.6.6"),
        ("vllm-server-5b4f9c7d2", "8", "vllm/vllm-openai:v0.6.4")]
    assert ev.hpa.name == "vllm-server-queue" and ev.hpa.metrics == ("Pods:vllm_num_requests_waiting",)
    assert (ev.pdb.name, ev.pdb.max_unavailable, ev.pdb.disruptions_allowed) == ("vllm-server", "1", 1)
    assert [(r.service, r.ports, r.ingresses, r.hosts) for r in ev.routes] == [
        ("vllm-server", ("80->http/TCP",), ("llm-gateway",), ("llm.example.internal",))]
    assert sorted((e.object_kind, e.object_name, e.reason) for e in ev.events) == [
        ("Deployment", "vllm-server", "ScalingReplicaSet"),
        ("HorizontalPodAutoscaler", "vllm-server-queue", "FailedGetPodsMetric"),
        ("Pod", "vllm-server-5b4f9c7d2-old01", "Killing"),  # a pod of the old ReplicaSet, gone now
        ("Pod", POD_B, "BackOff"),
        ("Pod", POD_B, "Unhealthy"),
        ("ReplicaSet", "vllm-server-7d9c8b6f4", "SuccessfulCreate"),
    ]
    lists = cluster.kube.calls(verb="list", namespace=NS)
    assert sorted(r.resource for r in lists) == [
        "events", "horizontalpodautoscalers", "ingresses", "poddisruptionbudgets", "pods", "replicasets",
        "services"]
    assert next(r for r in lists if r.resource == "pods").query["labelSelector"] == \
        "app=vllm-server,track notin (canary)"


def test_incident_nodes_with_mig_resources_and_colocated_gpu_pods(cluster):
    ev = snapshot_evidence(_gather(cluster))
    nodes = {n.name: n for n in ev.nodes}
    assert sorted(nodes) == ["gpu-node-03", "gpu-node-05"]
    assert nodes["gpu-node-03"].gpu_allocatable == {"nvidia.com/gpu": 8}
    assert nodes["gpu-node-05"].gpu_capacity == {"nvidia.com/gpu": 6, "nvidia.com/mig-3g.40gb": 4}
    assert nodes["gpu-node-05"].gpu_product == "NVIDIA-A100-SXM4-80GB"
    assert nodes["gpu-node-05"].gpu_memory_bytes == 81920 * 2**20
    colocated = {(c.namespace, c.name): c for c in ev.colocated}
    # node-exporter asks for no GPU; the finished fine-tuning job is filtered by phase
    assert sorted(colocated) == [("llm", "vllm-server-canary-6c5d4-zz9k1"), ("search", "embedder-84c6d-t7xq2")]
    embedder = colocated[("search", "embedder-84c6d-t7xq2")]
    assert (embedder.node, embedder.gpu.mig_profile, embedder.owner) == (
        "gpu-node-05", "3g.40gb", "ReplicaSet/embedder-84c6d")
    node_lists = cluster.kube.calls(verb="list", resource="pods", namespace=None)
    assert sorted(r.query["fieldSelector"] for r in node_lists) == [
        "spec.nodeName=gpu-node-03,status.phase!=Succeeded,status.phase!=Failed",
        "spec.nodeName=gpu-node-05,status.phase!=Succeeded,status.phase!=Failed"]


def test_secrets_and_bookkeeping_fields_stay_out_of_the_snapshot_and_bundle(cluster):
    snap = _gather(cluster)
    files = bundle_files(snap)
    everything = "".join(files.values())
    assert "hf_live_secret_value" not in everything and "do-not-copy" not in everything
    assert "managedFields" not in everything and "last-applied-configuration" not in everything
    env = snap.workload["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "HF_TOKEN", "value": "<redacted>"}, {"name": "VLLM_USE_V1", "value": "0"}]
    embedder = next(p for p in snap.node_pods if p["metadata"]["name"] == "embedder-84c6d-t7xq2")
    assert embedder["spec"]["containers"] == [{"name": "tei", "resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}]


def test_round_trips_stay_constant_per_pod_and_three_deep(cluster):
    snap = _gather(cluster)
    # 2 lookups, 7 namespace lists, 3 logs, 2 scrapes, 2 nodes x (get + pod list)
    assert snap.calls == 18 == len(cluster.kube.calls())
    assert snap.depth == 3
    assert len(cluster.kube.calls(resource="events")) == 1


def test_many_pods_add_calls_but_no_depth(cluster):
    added = add_replicas(cluster.kube, NS, POD_A, 30, cluster.engines[POD_A].url)
    snap = _gather(cluster)
    assert len(snap.pods) == 32 and snap.issues == ()
    assert snap.depth == 3
    # per new pod: previous + current log, /metrics, its node and the node's pod list
    assert snap.calls == 18 + 5 * len(added)
    assert len(cluster.kube.calls(resource="events")) == 1 and len(cluster.kube.calls(resource="services")) == 1
    assert len(snapshot_evidence(snap).pod_metrics) == 32


def test_bundle_written_from_a_snapshot_reads_back_to_the_same_evidence(cluster, tmp_path: Path):
    snap = _gather(cluster)
    live = snapshot_evidence(snap)
    folder = tmp_path / "bundle"
    folder.mkdir()
    for name, text in bundle_files(snap).items():
        (folder / name).write_text(text, encoding="utf-8")
    write_bundle_json(folder, live)
    assert sorted(p.name for p in folder.iterdir()) == sorted([
        "bundle.json", "deployment.yaml", "pods.yaml", "events.yaml", "hpa.yaml", "logs.txt",
        f"metrics-{POD_A}.txt", f"metrics-{POD_B}.txt", "replicasets.yaml", "pdb.yaml", "services.yaml",
        "nodes.yaml", "node-pods.yaml"])
    back = load_bundle(folder)
    for field in ("target", "workload", "server_config", "pods", "events", "hpa", "logs", "server_metrics",
                  "pod_metrics", "replica_sets", "pdb", "routes", "nodes", "colocated"):
        assert getattr(back, field) == getattr(live, field), field
    logs = (folder / "logs.txt").read_text(encoding="utf-8")
    assert logs.index(LOG_HEADER.format(pod=POD_B, container="vllm", run="previous")) < \
        logs.index(LOG_HEADER.format(pod=POD_B, container="vllm", run="current"))


def test_live_evidence_with_its_new_items_survives_json(cluster):
    live = snapshot_evidence(_gather(cluster))
    assert live.nodes and live.colocated and live.routes and live.replica_sets and live.pdb and live.pod_metrics
    assert from_jsonable(Evidence, json.loads(json.dumps(to_jsonable(live)))) == live


# ----------------------------------------------------------------------- TGI


def test_tgi_metrics_fall_back_to_the_prometheus_port_and_logs_read_the_probe_kills(tgi):
    snap = _gather(tgi, "support-bot", "mistral-7b-tgi")
    assert [s.url for s in snap.scrapes] == [
        "pods/mistral-7b-tgi-7f8d9c-4kq2z:80/proxy/metrics", "pods/mistral-7b-tgi-7f8d9c-9xw5m:9000/proxy/metrics"]
    assert snap.depth == 4  # the second port waits on the first
    ev = snapshot_evidence(snap)
    assert ev.server_metrics.engine == "tgi"
    assert (ev.server_metrics.queue_depth, ev.server_metrics.running_requests) == (26.0, 33.0)
    assert ev.server_metrics.kv_cache_capacity_tokens == 61440
    assert ev.server_config.engine == "tgi" and ev.server_config.max_model_len == 8192
    assert ev.logs.engine == "tgi"
    assert max(p.restarts for p in ev.pods) == 7
    # 9xw5m restarted, but its previous log is gone: recorded, the rest goes on
    assert [(i.kind, words.message(i)) for i in ev.issues] == [
        ("missing", 'previous terminated container "text-generation-inference" in pod '
                    '"mistral-7b-tgi-7f8d9c-9xw5m" not found')]


def test_missing_hpa_is_fine(tgi):
    ev = snapshot_evidence(_gather(tgi, "support-bot", "mistral-7b-tgi"))
    assert ev.hpa is None
    assert not [i for i in ev.issues if "horizontalpodautoscalers" in i.source]


# --------------------------------------------------------------------- errors


def test_forbidden_logs_are_an_issue_naming_the_missing_permission_and_the_rest_is_read(cluster):
    rules = [r for r in rbac_rules() if "pods/log" not in r["resources"]]
    rules.append({"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]})
    cluster.kube.grant(rules)
    snap = _gather(cluster)
    forbidden = [i for i in snap.issues if i.kind == "forbidden"]
    assert len(forbidden) == 3 and len(snap.issues) == 3
    assert {words.message(i) for i in forbidden} == {"missing RBAC: get pods/log in namespace llm"}
    assert {i.source for i in forbidden} == {
        f"kube:pods/log/llm/{POD_A}#vllm", f"kube:pods/log/llm/{POD_B}#vllm,previous",
        f"kube:pods/log/llm/{POD_B}#vllm"}
    assert snap.logs == () and len(snap.pods) == 2 and len(snap.scrapes) == 2 and len(snap.nodes) == 2


def test_missing_deployment_is_target_not_found(cluster):
    with pytest.raises(TargetNotFound) as caught:
        _gather(cluster, name="vllm-servre")
    assert str(caught.value) == "Deployment llm/vllm-servre not found in context prod"
    assert (caught.value.namespace, caught.value.name) == ("llm", "vllm-servre")
    with pytest.raises(TargetNotFound) as explicit:
        _gather(cluster, name="nope", kind="StatefulSet")
    assert explicit.value.kind == "StatefulSet"


def test_statefulset_is_found_when_no_kind_is_given(cluster):
    labels = {"app": "sglang"}
    cluster.kube.add(
        {"apiVersion": "apps/v1", "kind": "StatefulSet",
         "metadata": {"name": "sglang", "namespace": NS, "uid": "sts-uid"},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                      {"name": "server", "image": "lmsysorg/sglang:v0.4.6",
                       "command": ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--enable-metrics"]}]}}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "sglang-0", "namespace": NS, "labels": labels,
                      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "sglang",
                                           "uid": "sts-uid", "controller": True}]},
         "spec": {"containers": [{"name": "server", "image": "lmsysorg/sglang:v0.4.6"}]},
         "status": {"phase": "Pending"}},
    )
    snap = _gather(cluster, name="sglang")
    assert snap.kind == "StatefulSet" and _names(snap.pods) == ["sglang-0"]
    assert snap.replica_sets == ()
    assert [(i.kind, words.message(i)) for i in snap.issues] == [("skipped", "metrics not read: pod phase Pending")]


def test_unreachable_cluster_is_one_issue_with_the_url_and_never_the_token(tmp_path: Path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    config = write_kubeconfig(tmp_path / "kubeconfig", {"down": f"http://127.0.0.1:{closed_port}"})
    snap = gather_workload(make_api_client(str(config), "down"), NS, "vllm-server", deadline_s=5.0)
    assert [(i.kind, words.message(i)) for i in snap.issues] == [
        ("unreachable", f"cannot reach http://127.0.0.1:{closed_port}: connection refused")]
    assert TEST_TOKEN not in repr(snap)
    assert snap.workload is None and snap.pods == ()


def test_unknown_context_is_a_config_error(cluster):
    with pytest.raises(KubeConfigError) as caught:
        make_api_client(str(cluster.kubeconfig), "staging")
    assert "staging" in str(caught.value)


def test_a_slow_source_times_out_without_holding_up_the_rest(cluster):
    # a 3 s deadline that an unhurried call meets even on a loaded machine, and slow calls
    # that would take 20 s: the gather ends near the deadline, not near 20 s
    cluster.kube.add_latency(r"/events", 20.0)
    cluster.kube.add_latency(rf"/pods/{POD_B}/log", 20.0)
    started = time.monotonic()
    snap = _gather(cluster, deadline_s=3.0)
    elapsed = time.monotonic() - started
    assert elapsed < 3.0 + 4.0  # the slow calls alone would take 20 s
    timeouts = sorted(i.source for i in snap.issues if i.kind == "timeout")
    assert timeouts == ["kube:events/llm", f"kube:pods/log/llm/{POD_B}#vllm", f"kube:pods/log/llm/{POD_B}#vllm,previous"]
    # each names the time it was given: the deadline, or what was left of it when the call
    # started after another (the logs follow the pods)
    given = [re.match(r"no answer within (\d+\.\d) s: ", words.message(i)) for i in snap.issues]
    assert all(given) and all(0 < float(m.group(1)) <= 3.0 for m in given), snap.issues
    assert len(snap.pods) == 2 and len(snap.scrapes) == 2 and snap.hpa is not None and snap.events == ()
    assert [t.pod for t in snap.logs] == [POD_A]


def test_injected_server_errors_become_issues_and_the_rest_is_read(cluster):
    cluster.kube.fail(r"/ingresses", 500)
    cluster.kube.fail(r"/nodes/gpu-node-03", "drop")
    snap = _gather(cluster)
    kinds = {i.source: (i.kind, words.message(i)) for i in snap.issues}
    assert kinds["kube:ingresses/llm"] == ("unreadable", "HTTP 500: injected failure 500")
    assert kinds["kube:nodes/gpu-node-03"] == ("unreachable", f"cannot reach {cluster.kube.url}: "
                                                              "connection closed without an answer")
    assert _names(snap.nodes) == ["gpu-node-05"] and len(snap.pods) == 2


# ------------------------------------------------------------ contexts and metrics


def test_two_contexts_read_two_clusters(tmp_path: Path):
    with running_scenario("vllm-incident") as prod, running_scenario("tgi-probes") as staging:
        config = write_kubeconfig(tmp_path / "kubeconfig", {"prod": prod.kube.url, "staging": staging.kube.url},
                                  current="staging")
        on_prod = gather_workload(make_api_client(str(config), "prod"), NS, "vllm-server")
        on_staging = gather_workload(make_api_client(str(config), None), "support-bot", "mistral-7b-tgi")
        assert on_prod.server == prod.kube.url and on_staging.server == staging.kube.url
        assert len(on_prod.pods) == 2 and on_staging.pods[0]["metadata"]["namespace"] == "support-bot"
        assert staging.kube.calls(resource="deployments", name="vllm-server") == []
        with pytest.raises(TargetNotFound):
            gather_workload(make_api_client(str(config), "staging"), NS, "vllm-server", context="staging")


def test_direct_metrics_read_pod_ips_without_the_proxy(tmp_path: Path):
    with running_scenario("vllm-incident", tmp_path, direct=True) as scenario:
        snap = gather_workload(scenario.api(), NS, "vllm-server", direct_metrics=True)
        assert scenario.kube.calls(subresource="proxy") == []
        engine = scenario.engines[POD_A]
        assert engine.hits == ["/metrics"]
        assert [s.url for s in snap.scrapes] == [
            f"http://127.0.0.1:{engine.port}/metrics", f"http://127.0.0.1:{scenario.engines[POD_B].port}/metrics"]
        assert snapshot_evidence(snap).server_metrics.queue_depth == 24.0


def test_metrics_port_override_and_path(cluster):
    snap = _gather(cluster, metrics_port=9100, metrics_path="/metrics")
    assert {r.name for r in cluster.kube.calls(subresource="proxy")} == {f"{POD_A}:9100", f"{POD_B}:9100"}
    assert {(i.kind, words.message(i)[:8]) for i in snap.issues} == {("unreadable", "HTTP 503")}


def test_a_caller_pool_is_used_and_left_running(cluster):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        snap = _gather(cluster, pool=pool)
        assert pool.submit(lambda: 7).result() == 7
    assert len(snap.pods) == 2 and snap.issues == ()


def test_scenarios_load_into_separate_servers():
    engines: dict = {}
    with FakeKube() as a, FakeKube() as b:
        try:
            load_scenario(a, "tgi-probes", engines)
            assert len(a.list_objects("", "pods", None)) == 2 and b.list_objects("", "pods", None) == []
            assert sorted(engines) == ["mistral-7b-tgi-7f8d9c-4kq2z", "mistral-7b-tgi-7f8d9c-9xw5m"]
        finally:
            for engine in engines.values():
                engine.stop()
