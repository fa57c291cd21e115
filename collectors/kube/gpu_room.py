"""The reads behind a plan's blast radius: every node (its GPUs, labels, taints) and every pod
that holds or waits for a node (its node, labels and GPU requests), cluster-wide.

Two LISTs through the reader's connection (`KubeRest`): `nodes`, and `pods` with
`status.phase!=Succeeded,status.phase!=Failed` (finished pods hold no GPU). Each has its
deadline; a read that fails leaves its half None and says why in `issues` (a missing RBAC
permission is named: the reader's ClusterRole grants both, a namespaced Role grants neither),
so the plan still shows what could be worked out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collectors.errors import ParseError, said
from collectors.kube.client import Call, issue_for
from collectors.kube.rest import KubeRest, path
from collectors.parsers.kube_placement import finished, node_gpus_from_object, pod_gpus_from_object
from runbooks.model.phrases import Phrase
from runbooks.remediation.preview import NodeGpus, PodGpus

#: the field selector of the pod list: pods that are on a node or waiting for one
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
NODES_CALL = Call("list", "nodes")
PODS_CALL = Call("list", "pods", detail=LIVE_PODS)


@dataclass(frozen=True)
class GpuRoom:
    """What was read: None for a half that could not be; `issues` say why, one line each."""

    nodes: tuple[NodeGpus, ...] | None
    pods: tuple[PodGpus, ...] | None
    issues: tuple[Phrase, ...] = ()


def _items(rest: KubeRest, call: Call, resource_path: str, query: dict[str, Any] | None,
           timeout_s: float) -> tuple[list[Any] | None, Phrase | None]:
    try:
        doc = rest.get_json(resource_path, query, timeout_s=timeout_s)
    except Exception as e:  # every failure is worded, none ends the plan
        return None, issue_for(e, call, rest.host, timeout_s).message
    items = doc.get("items")
    if not isinstance(items, list):
        return None, said("where", source=call.source, message=said("no_items"))
    return items, None


def read_gpu_room(rest: KubeRest, timeout_s: float = 10.0) -> GpuRoom:
    """List nodes and live pods (see the module docstring)."""
    issues: list[Phrase] = []
    nodes: tuple[NodeGpus, ...] | None = None
    pods: tuple[PodGpus, ...] | None = None
    raw_nodes, issue = _items(rest, NODES_CALL, path("api", "v1", "nodes"), None, timeout_s)
    if issue:
        issues.append(issue)
    elif raw_nodes is not None:
        try:
            nodes = tuple(node_gpus_from_object(obj, "kube:nodes") for obj in raw_nodes)
        except ParseError as e:
            issues.append(e.reason)
    raw_pods, issue = _items(rest, PODS_CALL, path("api", "v1", "pods"), {"fieldSelector": LIVE_PODS}, timeout_s)
    if issue:
        issues.append(issue)
    elif raw_pods is not None:
        try:
            pods = tuple(pod_gpus_from_object(obj, "kube:pods") for obj in raw_pods if not finished(obj, "kube:pods"))
        except ParseError as e:
            issues.append(e.reason)
    return GpuRoom(nodes, pods, tuple(issues))
