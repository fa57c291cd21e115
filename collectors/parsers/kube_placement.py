"""What a plan's blast radius reads from Kubernetes objects: where a pod template may run, how a
workload replaces its pods, which pods it owns, nodes' GPUs and taints, and the GPUs pods hold.

Object-level readers (dicts as `kubectl get -o json` prints them), failing with the field's path
like the other Kubernetes parsers. The arithmetic is `runbooks.remediation.preview`'s.

>>> spec = {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
...         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
...             {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}}
>>> p = placement_from_pod_spec(spec)
>>> p.node_selector, p.affinity_terms[0][0].values, p.tolerations[0].key, p.unchecked
({'pool': 'gpu'}, ('a', 'b'), 'gpu', ())
"""

from __future__ import annotations

from typing import Any

from collectors.parsers.kube_fields import as_list, as_mapping, as_str, str_map
from collectors.parsers.kube_pod_spec import HAMI_MEMORY_RESOURCE
from collectors.parsers.kube_related import colocated_from_object, node_from_object
from runbooks.remediation.preview import NodeGpus, Placement, PodGpus, Requirement, Rollout, Toleration

_TERMS = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
#: taint effects that keep a pod without the toleration off a node
_KEEPING = ("NoSchedule", "NoExecute")


def _requirements(items: Any, path: str, source: str, key_field: str = "key") -> list[Requirement]:
    out = []
    for i, item in enumerate(as_list(items, path, source)):
        expr = as_mapping(item, f"{path}[{i}]", source)
        key = as_str(expr.get(key_field), f"{path}[{i}].{key_field}", source) or ""
        op = as_str(expr.get("operator"), f"{path}[{i}].operator", source) or ""
        values = tuple(as_str(v, f"{path}[{i}].values[{j}]", source) or ""
                       for j, v in enumerate(as_list(expr.get("values"), f"{path}[{i}].values", source)))
        out.append(Requirement(key, op, values))
    return out


def placement_from_pod_spec(pod_spec: Any, path: str = "spec.template.spec",
                            source: str = "deployment.yaml") -> Placement:
    """The nodeSelector, required node affinity and tolerations of a pod spec; what else
    constrains placement (pod (anti-)affinity, topology spread) is named as unchecked."""
    spec = as_mapping(pod_spec, path, source)
    selector = str_map(spec.get("nodeSelector"), f"{path}.nodeSelector", source)
    affinity = as_mapping(spec.get("affinity"), f"{path}.affinity", source)
    node_affinity = as_mapping(affinity.get("nodeAffinity"), f"{path}.affinity.nodeAffinity", source)
    required = as_mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
                          f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution", source)
    terms = []
    for t, item in enumerate(as_list(required.get("nodeSelectorTerms"), f"{path}.{_TERMS}", source)):
        where = f"{path}.{_TERMS}[{t}]"
        term = as_mapping(item, where, source)
        reqs = _requirements(term.get("matchExpressions"), f"{where}.matchExpressions", source)
        fields = _requirements(term.get("matchFields"), f"{where}.matchFields", source)
        terms.append(tuple(reqs + [Requirement("metadata.name", r.operator, r.values) for r in fields
                                   if r.key == "metadata.name"]))
    tolerations = []
    for i, item in enumerate(as_list(spec.get("tolerations"), f"{path}.tolerations", source)):
        where = f"{path}.tolerations[{i}]"
        tol = as_mapping(item, where, source)
        tolerations.append(Toleration(as_str(tol.get("key"), f"{where}.key", source) or "",
                                      as_str(tol.get("operator"), f"{where}.operator", source) or "Equal",
                                      as_str(tol.get("value"), f"{where}.value", source) or "",
                                      as_str(tol.get("effect"), f"{where}.effect", source) or ""))
    unchecked = []
    for key, name in (("podAffinity", "pod_affinity"), ("podAntiAffinity", "pod_anti_affinity")):
        rules = as_mapping(affinity.get(key), f"{path}.affinity.{key}", source)
        if rules.get("requiredDuringSchedulingIgnoredDuringExecution"):
            unchecked.append(name)
    if as_list(spec.get("topologySpreadConstraints"), f"{path}.topologySpreadConstraints", source):
        unchecked.append("topology_spread")
    return Placement(selector, tuple(terms), tuple(unchecked), tuple(tolerations))


def rollout_from_object(obj: Any, source: str = "deployment.yaml") -> Rollout:
    """A Deployment's `spec.strategy` (defaults: RollingUpdate, 25% / 25%) or a StatefulSet's
    `spec.updateStrategy` (RollingUpdate replaces one pod at a time, no surge).

    >>> rollout_from_object({"kind": "Deployment", "spec": {"strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}})
    Rollout(strategy='RollingUpdate', max_surge='1', max_unavailable='0')
    >>> rollout_from_object({"kind": "StatefulSet", "spec": {}}).max_unavailable
    '1'
    """
    doc = as_mapping(obj, "", source)
    kind = as_str(doc.get("kind"), "kind", source) or "Deployment"
    spec = as_mapping(doc.get("spec"), "spec", source)
    key = "updateStrategy" if kind == "StatefulSet" else "strategy"
    strategy = as_mapping(spec.get(key), f"spec.{key}", source)
    kind_of = as_str(strategy.get("type"), f"spec.{key}.type", source) or "RollingUpdate"
    if kind_of != "RollingUpdate":
        return Rollout(kind_of, None, None)
    rolling = as_mapping(strategy.get("rollingUpdate"), f"spec.{key}.rollingUpdate", source)
    unavailable = as_str(rolling.get("maxUnavailable"), f"spec.{key}.rollingUpdate.maxUnavailable", source)
    if kind == "StatefulSet":
        return Rollout("RollingUpdate", "0", unavailable or "1")
    surge = as_str(rolling.get("maxSurge"), f"spec.{key}.rollingUpdate.maxSurge", source)
    return Rollout("RollingUpdate", surge or "25%", unavailable or "25%")


def selector_from_object(obj: Any, source: str = "deployment.yaml") -> tuple[dict[str, str], tuple[Requirement, ...]]:
    """A workload's `spec.selector`: (matchLabels, matchExpressions)."""
    spec = as_mapping(as_mapping(obj, "", source).get("spec"), "spec", source)
    selector = as_mapping(spec.get("selector"), "spec.selector", source)
    return (str_map(selector.get("matchLabels"), "spec.selector.matchLabels", source),
            tuple(_requirements(selector.get("matchExpressions"), "spec.selector.matchExpressions", source)))


def template_gpus(obj: Any, source: str = "deployment.yaml") -> tuple[str | None, int]:
    """(GPU resource, count) one pod of the workload asks for, all its containers together;
    (None, 0) when it asks for none.

    >>> template_gpus({"spec": {"template": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}})
    ('nvidia.com/gpu', 2)
    """
    spec = as_mapping(as_mapping(obj, "", source).get("spec"), "spec", source)
    template = as_mapping(spec.get("template"), "spec.template", source)
    pod = {"metadata": {"name": "template"}, "spec": as_mapping(template.get("spec"), "spec.template.spec", source)}
    found = colocated_from_object(pod, source, "spec.template")
    if found is None or found.gpu is None:
        return None, 0
    return found.gpu.resource, found.gpu.count


def node_gpus_from_object(obj: Any, source: str = "nodes.yaml") -> NodeGpus:
    """A Node's labels, GPU allocatable, readiness, cordon and NoSchedule/NoExecute taints."""
    info = node_from_object(obj, source)
    spec = as_mapping(as_mapping(obj, "", source).get("spec"), "spec", source)
    taints = []
    for i, item in enumerate(as_list(spec.get("taints"), "spec.taints", source)):
        taint = as_mapping(item, f"spec.taints[{i}]", source)
        effect = as_str(taint.get("effect"), f"spec.taints[{i}].effect", source)
        if effect in _KEEPING:
            key = as_str(taint.get("key"), f"spec.taints[{i}].key", source) or ""
            value = as_str(taint.get("value"), f"spec.taints[{i}].value", source)
            taints.append(f"{key}{'=' + value if value else ''}:{effect}")
    return NodeGpus(info.name, info.labels, dict(info.gpu_allocatable), info.ready, info.unschedulable, tuple(taints))


def pod_gpus_from_object(obj: Any, source: str = "pods.yaml") -> PodGpus:
    """A pod's node, labels and the GPUs it holds (all containers; none: resource None)."""
    pod = as_mapping(obj, "", source)
    meta = as_mapping(pod.get("metadata"), "metadata", source)
    spec = as_mapping(pod.get("spec"), "spec", source)
    used = colocated_from_object(pod, source)
    name = as_str(meta.get("name"), "metadata.name", source) or ""
    namespace = as_str(meta.get("namespace"), "metadata.namespace", source)
    node = as_str(spec.get("nodeName"), "spec.nodeName", source)
    labels = str_map(meta.get("labels"), "metadata.labels", source)
    if used is None or used.gpu is None:
        return PodGpus(name, namespace, node, labels)
    return PodGpus(name, namespace, node, labels, used.gpu.resource, used.gpu.count)


def finished(obj: Any, source: str = "pods.yaml") -> bool:
    """A pod that holds nothing any more: Succeeded or Failed."""
    status = as_mapping(as_mapping(obj, "", source).get("status"), "status", source)
    return as_str(status.get("phase"), "status.phase", source) in ("Succeeded", "Failed")


def shares_gpu_memory(resource: str | None) -> bool:
    """A vGPU scheduler's memory resource (HAMi): nodes do not list it as whole GPUs."""
    return resource == HAMI_MEMORY_RESOURCE

