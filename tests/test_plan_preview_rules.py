"""The blast radius's arithmetic (runbooks.remediation.preview) and what it reads from objects
(collectors.parsers.kube_placement), without a cluster."""

from __future__ import annotations

import pytest

from collectors.parsers.kube_placement import (
    node_gpus_from_object,
    placement_from_pod_spec,
    pod_gpus_from_object,
    rollout_from_object,
    template_gpus,
)
from runbooks.remediation.preview import (
    NodeGpus,
    Placement,
    PodGpus,
    Requirement,
    Rollout,
    Toleration,
    blast_radius,
)

GPU = "nvidia.com/gpu"


def _nodes(*spec: tuple[str, int]) -> tuple[NodeGpus, ...]:
    return tuple(NodeGpus(name, {"pool": "gpu"}, {GPU: count}) for name, count in spec)


def _used(*spec: tuple[str, int]) -> tuple[PodGpus, ...]:
    return tuple(PodGpus(f"other-{i}", "x", node, {}, GPU, count) for i, (node, count) in enumerate(spec))


SURGE_1 = Rollout("RollingUpdate", "1", "0")


def _blast(*, before=2, after=None, template=True, rollout=SURGE_1, per_pod=1,
           nodes=(), used=(), placement=None):
    return blast_radius(template_changed=template, replicas_before=before,
                        replicas_after=before if after is None else after, rollout=rollout, gpu_resource=GPU,
                        gpus_per_pod=per_pod, placement=placement, nodes=nodes, pods=used,
                        workload_pods=tuple(f"p{i}" for i in range(before)))


@pytest.mark.parametrize(("surge", "unavailable", "replicas", "expected"), [
    ("25%", "25%", 4, (1, 1)), ("25%", "25%", 2, (1, 0)), ("50%", "0", 3, (2, 0)), ("0", "0", 3, (0, 1)),
])
def test_max_surge_rounds_up_and_max_unavailable_down_as_the_controller_does(surge, unavailable, replicas, expected):
    r = _blast(before=replicas, rollout=Rollout("RollingUpdate", surge, unavailable), nodes=_nodes(("n", 8)))
    assert (r.max_surge, r.max_unavailable) == expected
    assert r.extra_pods == expected[0]


def test_gpus_are_counted_per_node_a_two_gpu_pod_does_not_fit_two_single_spares():
    r = _blast(per_pod=2, nodes=_nodes(("a", 4), ("b", 4)), used=_used(("a", 3), ("b", 3)))
    assert (r.spare_gpus, r.placeable_pods, r.gpus_needed, r.outcome) == (2, 0, 2, "stuck")
    r = _blast(per_pod=2, nodes=_nodes(("a", 4), ("b", 4)), used=_used(("a", 2), ("b", 3)))
    assert (r.spare_gpus, r.placeable_pods, r.outcome) == (3, 1, "fits")


def test_fewer_spare_pods_than_the_surge_slows_the_rollout():
    r = _blast(before=8, rollout=Rollout("RollingUpdate", "25%", "0"), nodes=_nodes(("a", 10)), used=_used(("a", 9)))
    assert (r.extra_pods, r.placeable_pods, r.outcome) == (2, 1, "slower")


def test_recreate_needs_no_extra_gpu_but_takes_the_service_down():
    r = _blast(rollout=Rollout("Recreate", None, None), nodes=_nodes(("a", 2)), used=_used(("a", 2)))
    assert (r.extra_pods, r.outcome, r.restart_pods) == (0, "no_extra", ("p0", "p1"))
    assert [n.id for n in r.notes] == ["recreate_downtime"]


def test_a_template_change_with_a_scale_up_needs_room_for_both():
    # 2 -> 3 replicas and a flag change, maxSurge 1: up to 4 pods at once, 2 beyond today's
    nodes = _nodes(("a", 8))
    assert _blast(after=3, nodes=nodes, used=_used(("a", 6))).outcome == "fits"
    assert _blast(after=3, nodes=nodes, used=_used(("a", 7))).outcome == "stuck"
    assert _blast(after=3, nodes=nodes, used=_used(("a", 8))).outcome == "pending"
    assert _blast(after=3, nodes=nodes, used=_used(("a", 7)),
                  rollout=Rollout("RollingUpdate", "1", "1")).outcome == "unavailable"


def test_scaling_down_frees_gpus_and_restarts_nothing():
    r = _blast(before=3, after=1, template=False, nodes=_nodes(("a", 3)), used=_used(("a", 3)))
    assert (r.restart_pods, r.pods_removed, r.extra_pods, r.outcome) == ((), 2, 0, "no_extra")


def test_cordoned_unready_unselected_and_untolerated_nodes_do_not_fit():
    nodes = (NodeGpus("cordoned", {"pool": "gpu"}, {GPU: 8}, unschedulable=True),
             NodeGpus("down", {"pool": "gpu"}, {GPU: 8}, ready=False),
             NodeGpus("cpu", {"pool": "cpu"}, {GPU: 8}),
             NodeGpus("tainted", {"pool": "gpu"}, {GPU: 1}, taints=("gpu=true:NoSchedule",)),
             NodeGpus("reserved", {"pool": "gpu"}, {GPU: 8}, taints=("gpu=true:NoSchedule", "team=search:NoSchedule")))
    tolerates_gpu = Placement({"pool": "gpu"}, tolerations=(Toleration("gpu", "Equal", "true", "NoSchedule"),))
    r = _blast(nodes=nodes, placement=tolerates_gpu)
    # "reserved" also carries a taint the pod does not tolerate: the scheduler keeps it off
    assert [n.name for n in r.nodes] == ["tainted"] and r.nodes_ruled_out == 4
    assert [(n.id, n.params) for n in r.notes] == [
        ("taints_not_tolerated", {"nodes": "reserved (team=search:NoSchedule)"})]
    # without the toleration neither tainted node takes the pod
    r = _blast(nodes=nodes, placement=Placement({"pool": "gpu"}))
    assert r.nodes == () and r.nodes_ruled_out == 5


def test_without_node_reads_the_blast_radius_says_not_checked_and_without_gpus_no_gpu():
    r = blast_radius(template_changed=True, replicas_before=2, replicas_after=2, rollout=Rollout(),
                     gpu_resource=GPU, gpus_per_pod=1, placement=None, nodes=None, pods=None, workload_pods=None)
    assert (r.outcome, r.restart_pods, r.pods_now) == ("not_checked", (), None)
    r = blast_radius(template_changed=True, replicas_before=2, replicas_after=2, rollout=Rollout(),
                     gpu_resource=None, gpus_per_pod=0, placement=None, nodes=(), pods=(), workload_pods=())
    assert r.outcome == "no_gpu"


# ----------------------------------------------------------------------------- reading objects


def test_required_node_affinity_terms_are_or_and_their_requirements_and():
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]},
                              {"key": "zone", "operator": "NotIn", "values": ["c"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]}]}},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "h"}]}}}
    p = placement_from_pod_spec(spec)
    assert p.allows("n1", {"gpu": "h100", "zone": "a"}) == (True, False)
    assert p.allows("n1", {"gpu": "h100", "zone": "c"}) == (False, False)
    assert p.allows("special", {}) == (True, False)
    assert p.unchecked == ("pod_anti_affinity",)
    odd = Placement(affinity_terms=((Requirement("gpu", "Sometimes", ("x",)),),))
    assert odd.allows("n", {}) == (True, True)


def test_objects_read_as_the_blast_radius_needs_them():
    node = node_gpus_from_object({"metadata": {"name": "n", "labels": {"a": "b"}},
                                  "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"},
                                                      {"key": "soft", "effect": "PreferNoSchedule"}]},
                                  "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "8"}}})
    assert (node.allocatable, node.taints) == ({GPU: 4}, ("gpu=yes:NoSchedule",))
    pod = pod_gpus_from_object({"metadata": {"name": "p", "namespace": "llm", "labels": {"app": "x"}},
                                "spec": {"nodeName": "n", "containers": [
                                    {"name": "a", "resources": {"limits": {GPU: 1}}},
                                    {"name": "b", "resources": {"limits": {GPU: 2}}}]}})
    assert (pod.node, pod.resource, pod.count, pod.labels) == ("n", GPU, 3, {"app": "x"})
    assert rollout_from_object({"kind": "Deployment", "spec": {}}) == Rollout("RollingUpdate", "25%", "25%")
    assert rollout_from_object({"kind": "Deployment", "spec": {"strategy": {"type": "Recreate"}}}) == Rollout(
        "Recreate", None, None)
    assert template_gpus({"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}) == (None, 0)
