"""Objects around a workload as evidence (ReplicaSets, PDB, routes, nodes, co-located pods),
label selectors, and which namespace objects belong to the workload."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.kube.pick import owns_pod, related_events, selecting_pdbs, selecting_services, target_hpa
from collectors.kube.pod_reads import metrics_ports, scrub, started, trim_pod
from collectors.kube.selectors import map_selects, selector_matches, selector_query
from collectors.parsers.kube_related import (
    colocated_from_object,
    disruption_from_object,
    node_from_object,
    replica_set_from_object,
    routes_from_objects,
)
from runbooks.model.evidence import ServerConfig
from tests.support import words

# ------------------------------------------------------------------------ selectors


def test_selector_query_writes_match_labels_and_every_expression_operator():
    selector = {
        "matchLabels": {"app": "vllm", "tier": "gpu"},
        "matchExpressions": [
            {"key": "track", "operator": "NotIn", "values": ["canary", "blue"]},
            {"key": "zone", "operator": "In", "values": ["b", "a"]},
            {"key": "model", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert selector_query(selector) == "app=vllm,tier=gpu,track notin (blue,canary),zone in (a,b),model,!legacy"


def test_selector_matching_follows_label_selector_semantics():
    selector = {"matchLabels": {"app": "vllm"}, "matchExpressions": [{"key": "track", "operator": "NotIn",
                                                                      "values": ["canary"]}]}
    assert selector_matches(selector, {"app": "vllm"})
    assert selector_matches(selector, {"app": "vllm", "track": "stable"})
    assert not selector_matches(selector, {"app": "vllm", "track": "canary"})
    assert not selector_matches(selector, {"app": "tgi"})
    assert selector_matches({}, {"anything": "x"})  # policy/v1: an empty selector takes every pod


def test_service_selector_must_be_non_empty_and_a_subset():
    assert map_selects({"app": "vllm"}, {"app": "vllm", "pod-template-hash": "abc"})
    assert not map_selects({}, {"app": "vllm"})
    assert not map_selects(None, {"app": "vllm"})
    assert not map_selects({"app": "vllm", "track": "canary"}, {"app": "vllm"})


def test_unknown_selector_operator_is_a_parse_error():
    with words.raises(ParseError, match=r"matchExpressions\[0\]\.operator"):
        selector_query({"matchExpressions": [{"key": "a", "operator": "Near"}]}, source="deployment.yaml")


# ----------------------------------------------------------------------- objects


def test_replica_set_reads_revision_counts_and_server_image():
    rs = replica_set_from_object({
        "metadata": {"name": "vllm-5b4f", "annotations": {"deployment.kubernetes.io/revision": "8"},
                     "creationTimestamp": "2026-03-02T10:12:00Z"},
        "spec": {"template": {"spec": {"containers": [
            {"name": "proxy", "image": "envoy:1.30"},
            {"name": "vllm", "image": "vllm/vllm-openai:v0.6.4", "args": ["--model=m"],
             "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"]}]}}},
        "status": {"replicas": 0},
    })
    assert (rs.name, rs.revision, rs.replicas, rs.ready_replicas, rs.image) == (
        "vllm-5b4f", "8", 0, 0, "vllm/vllm-openai:v0.6.4")
    assert rs.created_at.isoformat() == "2026-03-02T10:12:00+00:00"


def test_pdb_keeps_min_available_as_written():
    pdb = disruption_from_object({"metadata": {"name": "p"}, "spec": {"minAvailable": "50%"},
                                  "status": {"disruptionsAllowed": 0, "expectedPods": 2}})
    assert (pdb.min_available, pdb.max_unavailable, pdb.disruptions_allowed, pdb.expected_pods) == ("50%", None, 0, 2)


def test_routes_join_services_with_the_ingresses_naming_them():
    services = [{"metadata": {"name": "vllm"}, "spec": {"type": "LoadBalancer", "ports": [
        {"port": 80, "targetPort": 8000}, {"port": 9090, "targetPort": "metrics", "protocol": "TCP"}]}}]
    ingresses = [
        {"metadata": {"name": "a"}, "spec": {"defaultBackend": {"service": {"name": "vllm"}}}},
        {"metadata": {"name": "b"}, "spec": {"rules": [
            {"host": "x.example", "http": {"paths": [{"backend": {"service": {"name": "vllm"}}}]}},
            {"host": "y.example", "http": {"paths": [{"backend": {"service": {"name": "other"}}}]}}]}},
    ]
    (route,) = routes_from_objects(services, ingresses)
    assert route.type == "LoadBalancer" and route.ports == ("80->8000/TCP", "9090->metrics/TCP")
    assert route.ingresses == ("a", "b") and route.hosts == ("x.example",)


def test_node_reads_whole_gpus_mig_slices_and_readiness():
    node = node_from_object({
        "metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "spec": {"unschedulable": True},
        "status": {"capacity": {"cpu": "96", "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "14",
                                "nvidia.com/mig-3g.40gb": 2},
                   "allocatable": {"nvidia.com/mig-1g.10gb": "13"},
                   "conditions": [{"type": "Ready", "status": "False"}]},
    })
    assert node.gpu_capacity == {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 2}
    assert node.gpu_allocatable == {"nvidia.com/mig-1g.10gb": 13}
    assert (node.ready, node.unschedulable, node.gpu_product, node.gpu_memory_bytes) == (
        False, True, "NVIDIA-H100-80GB-HBM3", None)


def test_colocated_pod_adds_up_container_gpus_and_skips_pods_without_any():
    pod = {"metadata": {"name": "p", "namespace": "ml", "ownerReferences": [
        {"kind": "Job", "name": "j", "controller": True}]},
           "spec": {"nodeName": "n", "containers": [
               {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
               {"name": "b", "resources": {"limits": {"nvidia.com/gpu": 1}}},
               {"name": "c"}]},
           "status": {"phase": "Running"}}
    found = colocated_from_object(pod)
    assert (found.gpu.resource, found.gpu.count, found.owner, found.node) == ("nvidia.com/gpu", 3, "Job/j", "n")
    assert colocated_from_object({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "x"}]}}) is None


# ------------------------------------------------------------------------ picking


def test_pods_owned_by_another_deployments_replica_set_are_left_out():
    ours = {"metadata": {"labels": {"pod-template-hash": "7d9c"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "vllm-7d9c", "controller": True}]}}
    canary = {"metadata": {"labels": {"pod-template-hash": "6c5d"},
                           "ownerReferences": [{"kind": "ReplicaSet", "name": "vllm-canary-6c5d", "controller": True}]}}
    assert owns_pod("Deployment", "vllm", ours)
    assert not owns_pod("Deployment", "vllm", canary)
    assert owns_pod("Deployment", "vllm", {"metadata": {}})
    sts_pod = {"metadata": {"ownerReferences": [{"kind": "StatefulSet", "name": "sg", "controller": True}]}}
    assert owns_pod("StatefulSet", "sg", sts_pod) and not owns_pod("StatefulSet", "other", sts_pod)


def test_hpa_pdb_and_services_are_picked_by_target_and_selector():
    workload = {"metadata": {"name": "vllm"}, "spec": {"template": {"metadata": {"labels": {"app": "vllm"}}}}}
    hpas = [{"metadata": {"name": "other"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}}},
            {"metadata": {"name": "mine"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "vllm"}}}]
    assert target_hpa("Deployment", "vllm", hpas)["metadata"]["name"] == "mine"
    assert target_hpa("StatefulSet", "vllm", hpas) is None
    pdbs = [{"metadata": {"name": "all"}, "spec": {"selector": {}}},
            {"metadata": {"name": "none"}, "spec": {}},
            {"metadata": {"name": "bad"}, "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "?"}]}}}]
    assert [p["metadata"]["name"] for p in selecting_pdbs(workload, pdbs)] == ["all"]
    services = [{"metadata": {"name": "s"}, "spec": {"selector": {"app": "vllm"}}},
                {"metadata": {"name": "t"}, "spec": {"selector": {"app": "tgi"}}}]
    assert [s["metadata"]["name"] for s in selecting_services(workload, services)] == ["s"]


def test_statefulset_events_take_ordinal_pods_only():
    events = [{"involvedObject": {"kind": "Pod", "name": n}, "reason": "x", "lastTimestamp": t}
              for n, t in (("sg-0", "2"), ("sg-proxy-1", "1"), ("sg-12", "1"))]
    picked = related_events("StatefulSet", "sg", events, [], [], None)
    assert [e["involvedObject"]["name"] for e in picked] == ["sg-12", "sg-0"]
    assert all(e["kind"] == "Event" for e in picked)


# ---------------------------------------------------------------------- pod reads


@pytest.mark.parametrize(("container", "config", "expected"), [
    ({}, ServerConfig("d", engine="vllm"), [8000]),
    ({}, ServerConfig("d", engine="sglang"), [30000]),
    ({}, ServerConfig("d", engine="tgi"), [80, 9000]),
    ({}, ServerConfig("d", engine="tgi", port=8080, flags={"prometheus-port": "9400"}), [8080, 9400]),
    ({"ports": [{"containerPort": 8000}, {"name": "metrics", "containerPort": 9100}]}, None, [9100, 8000]),
    ({"ports": [{"containerPort": 5000}]}, ServerConfig("d", engine="vllm", port=8001), [8001]),
    ({}, None, []),
])
def test_metrics_ports_in_order_of_preference(container, config, expected):
    assert metrics_ports(container, config) == expected


def test_scrub_redacts_secret_variables_but_keeps_server_settings():
    obj = {"spec": {"containers": [{"env": [
        {"name": "HF_TOKEN", "value": "hf_x"}, {"name": "MAX_TOTAL_TOKENS", "value": "8192"},
        {"name": "OPENAI_API_KEY", "value": "sk"}, {"name": "db_password", "value": "p"},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]},
        "metadata": {"managedFields": [{}], "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                                                            "keep": "1"}}}
    env = scrub(obj)["spec"]["containers"][0]["env"]
    assert [v.get("value") for v in env] == ["<redacted>", "8192", "<redacted>", "<redacted>", None]
    assert scrub(obj)["metadata"] == {"annotations": {"keep": "1"}}
    assert obj["spec"]["containers"][0]["env"][0]["value"] == "hf_x"  # the input is left alone


def test_trimmed_pod_keeps_resources_and_drops_everything_else():
    pod = {"metadata": {"name": "p", "namespace": "n", "labels": {"a": "b"}},
           "spec": {"nodeName": "x", "containers": [{"name": "c", "env": [{"name": "K"}], "command": ["run"],
                                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
           "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    assert trim_pod(pod) == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
                             "spec": {"nodeName": "x", "containers": [
                                 {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
                             "status": {"phase": "Running"}}


def test_a_first_start_still_waiting_has_no_current_log():
    assert not started({"name": "c", "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}})
    assert started({"name": "c", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}})
    assert not started({})


# --------------------------------------------------------------------------- fuzz

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)
_keys = st.sampled_from(["metadata", "spec", "status", "name", "labels", "capacity", "allocatable", "containers",
                         "resources", "limits", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "ports", "selector",
                         "rules", "http", "paths", "backend", "service", "annotations", "conditions", "minAvailable",
                         "matchLabels", "matchExpressions", "operator", "values", "key", "ownerReferences"])
_shaped = st.recursive(
    st.none() | st.integers(-3, 10) | st.text(max_size=6) | st.booleans(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(_json, _shaped))
def test_object_readers_return_evidence_or_raise_parse_error(obj):
    readers = [
        lambda o: replica_set_from_object(o),
        lambda o: disruption_from_object(o),
        lambda o: node_from_object(o),
        lambda o: colocated_from_object(o),
        lambda o: routes_from_objects([o], [o]),
        lambda o: selector_query(o),
        lambda o: selector_matches(o, {"app": "x"}),
        lambda o: map_selects(o, {"app": "x"}),
    ]
    for read in readers:
        with contextlib.suppress(ParseError):
            read(obj)
