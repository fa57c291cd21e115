"""Objects around a workload as typed evidence: its ReplicaSets, PodDisruptionBudget, the
Services and Ingresses that route to it, the nodes its pods run on, and other GPU pods there.

Each reader takes one loaded object (a dict, as the API sends it or `kubectl get -o yaml`
prints it) and raises ParseError naming `source` and the field path when it has the wrong shape.

>>> node_from_object({"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.memory": "81920"}},
...                   "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "96"}}}).gpu_capacity
{'nvidia.com/gpu': 8}
"""

from __future__ import annotations

from typing import Any

from collectors.errors import said
from collectors.parsers.kube_fields import (
    as_bool,
    as_int,
    as_list,
    as_mapping,
    as_str,
    as_time,
    dig,
    fail,
    str_map,
)
from collectors.parsers.kube_pod_spec import (
    HAMI_MEMORY_RESOURCE,
    MIG_PREFIX,
    gpu_request,
    pick_server_container,
)
from runbooks.model.evidence import ColocatedPod, Disruption, GpuRequest, NodeInfo, ReplicaSetInfo, Route
from runbooks.model.units import MIB

#: resources counted as GPU capacity on a node
_GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", MIG_PREFIX, HAMI_MEMORY_RESOURCE, "amd.com/gpu")
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"


def _name(meta: dict[str, Any], source: str) -> str:
    name = as_str(meta.get("name"), "metadata.name", source)
    if not name:
        raise fail(source, "metadata.name", said("missing"))
    return name


# ------------------------------------------------------------------- ReplicaSets


def replica_set_from_object(obj: Any, source: str = "replicasets.yaml") -> ReplicaSetInfo:
    """One ReplicaSet: its revision annotation, replica counts and the server container's image."""
    rs = as_mapping(obj, "", source)
    meta = as_mapping(rs.get("metadata"), "metadata", source)
    status = as_mapping(rs.get("status"), "status", source)
    annotations = str_map(meta.get("annotations"), "metadata.annotations", source)
    pod_spec = as_mapping(dig(rs, "spec.template.spec", source), "spec.template.spec", source)
    index, _ = pick_server_container(pod_spec, "spec.template.spec", source)
    image = None
    if index is not None:
        container = as_mapping(pod_spec["containers"][index], f"spec.template.spec.containers[{index}]", source)
        image = as_str(container.get("image"), f"spec.template.spec.containers[{index}].image", source)
    return ReplicaSetInfo(
        name=_name(meta, source),
        revision=annotations.get(REVISION_ANNOTATION),
        replicas=as_int(status.get("replicas"), "status.replicas", source),
        ready_replicas=as_int(status.get("readyReplicas"), "status.readyReplicas", source) or 0,
        created_at=as_time(meta.get("creationTimestamp"), "metadata.creationTimestamp", source),
        image=image,
    )


def revision_number(info: ReplicaSetInfo) -> int:
    """The revision as a number for sorting (-1 when absent or not a number)."""
    text = info.revision or ""
    return int(text) if text.isdigit() else -1


# --------------------------------------------------------------------------- PDB


def disruption_from_object(obj: Any, source: str = "pdb.yaml") -> Disruption:
    pdb = as_mapping(obj, "", source)
    meta = as_mapping(pdb.get("metadata"), "metadata", source)
    spec = as_mapping(pdb.get("spec"), "spec", source)
    status = as_mapping(pdb.get("status"), "status", source)
    return Disruption(
        name=_name(meta, source),
        min_available=as_str(spec.get("minAvailable"), "spec.minAvailable", source),
        max_unavailable=as_str(spec.get("maxUnavailable"), "spec.maxUnavailable", source),
        disruptions_allowed=as_int(status.get("disruptionsAllowed"), "status.disruptionsAllowed", source),
        current_healthy=as_int(status.get("currentHealthy"), "status.currentHealthy", source),
        desired_healthy=as_int(status.get("desiredHealthy"), "status.desiredHealthy", source),
        expected_pods=as_int(status.get("expectedPods"), "status.expectedPods", source),
    )


# ------------------------------------------------------------ Services, Ingresses


def routes_from_objects(services: list[Any], ingresses: list[Any], source: str = "services.yaml") -> tuple[Route, ...]:
    """One Route per Service, with the Ingresses (networking.k8s.io/v1) whose backends name it."""
    by_service: dict[str, tuple[list[str], list[str]]] = {}
    for i, item in enumerate(as_list(ingresses, "ingresses", source)):
        ing = as_mapping(item, f"ingresses[{i}]", source)
        name = _name(as_mapping(ing.get("metadata"), f"ingresses[{i}].metadata", source), source)
        for service, host in ingress_backends(ing, f"ingresses[{i}]", source):
            names, hosts = by_service.setdefault(service, ([], []))
            if name not in names:
                names.append(name)
            if host and host not in hosts:
                hosts.append(host)
    routes = []
    for i, item in enumerate(as_list(services, "services", source)):
        svc = as_mapping(item, f"services[{i}]", source)
        name = _name(as_mapping(svc.get("metadata"), f"services[{i}].metadata", source), source)
        spec = as_mapping(svc.get("spec"), f"services[{i}].spec", source)
        ports = []
        for j, port_item in enumerate(as_list(spec.get("ports"), f"services[{i}].spec.ports", source)):
            where = f"services[{i}].spec.ports[{j}]"
            port = as_mapping(port_item, where, source)
            number = as_str(port.get("port"), f"{where}.port", source) or "?"
            target = as_str(port.get("targetPort"), f"{where}.targetPort", source) or number
            protocol = as_str(port.get("protocol"), f"{where}.protocol", source) or "TCP"
            ports.append(f"{number}->{target}/{protocol}")
        names, hosts = by_service.get(name, ([], []))
        routes.append(Route(service=name, type=as_str(spec.get("type"), f"services[{i}].spec.type", source) or "ClusterIP",
                            ports=tuple(ports), ingresses=tuple(names), hosts=tuple(hosts)))
    return tuple(routes)


def ingress_backends(ing: dict[str, Any], path: str, source: str) -> list[tuple[str, str | None]]:
    """(service name, host) for every backend of an Ingress; host None for the default backend."""
    spec = as_mapping(ing.get("spec"), f"{path}.spec", source)
    found: list[tuple[str, str | None]] = []
    default = as_mapping(dig(spec, "defaultBackend.service", source, f"{path}.spec"),
                         f"{path}.spec.defaultBackend.service", source)
    if as_str(default.get("name"), f"{path}.spec.defaultBackend.service.name", source):
        found.append((str(default["name"]), None))
    for r, rule_item in enumerate(as_list(spec.get("rules"), f"{path}.spec.rules", source)):
        rule = as_mapping(rule_item, f"{path}.spec.rules[{r}]", source)
        host = as_str(rule.get("host"), f"{path}.spec.rules[{r}].host", source)
        http = as_mapping(rule.get("http"), f"{path}.spec.rules[{r}].http", source)
        for p, path_item in enumerate(as_list(http.get("paths"), f"{path}.spec.rules[{r}].http.paths", source)):
            where = f"{path}.spec.rules[{r}].http.paths[{p}]"
            backend = as_mapping(dig(as_mapping(path_item, where, source), "backend.service", source, where),
                                 f"{where}.backend.service", source)
            service = as_str(backend.get("name"), f"{where}.backend.service.name", source)
            if service:
                found.append((service, host))
    return found


# -------------------------------------------------------------------------- nodes


def node_from_object(obj: Any, source: str = "nodes.yaml") -> NodeInfo:
    """A Node: labels, GPU capacity/allocatable (whole GPUs and MIG slices), readiness."""
    node = as_mapping(obj, "", source)
    meta = as_mapping(node.get("metadata"), "metadata", source)
    spec = as_mapping(node.get("spec"), "spec", source)
    status = as_mapping(node.get("status"), "status", source)
    labels = str_map(meta.get("labels"), "metadata.labels", source)
    ready = None
    for i, item in enumerate(as_list(status.get("conditions"), "status.conditions", source)):
        cond = as_mapping(item, f"status.conditions[{i}]", source)
        if cond.get("type") == "Ready":
            ready = as_str(cond.get("status"), f"status.conditions[{i}].status", source) == "True"
    memory_mib = labels.get("nvidia.com/gpu.memory", "")
    return NodeInfo(
        name=_name(meta, source),
        labels=labels,
        gpu_capacity=_gpu_amounts(status.get("capacity"), "status.capacity", source),
        gpu_allocatable=_gpu_amounts(status.get("allocatable"), "status.allocatable", source),
        ready=ready,
        unschedulable=bool(as_bool(spec.get("unschedulable"), "spec.unschedulable", source)),
        gpu_product=labels.get("nvidia.com/gpu.product"),
        gpu_memory_bytes=int(memory_mib) * MIB if memory_mib.isdigit() else None,
    )


def _gpu_amounts(value: Any, path: str, source: str) -> dict[str, int]:
    out = {}
    for key, amount in sorted(as_mapping(value, path, source).items()):
        if key.startswith(_GPU_RESOURCE_PREFIXES):
            count = as_int(amount, f"{path}.{key}", source)
            if count is not None:
                out[key] = count
    return out


# ------------------------------------------------------------- co-located GPU pods


def colocated_from_object(obj: Any, source: str = "node-pods.yaml", path: str = "") -> ColocatedPod | None:
    """A pod on a shared node as a ColocatedPod; None when it asks for no GPU.

    GPU requests of all containers (and init containers, which hold theirs while they run)
    are added up per resource; the largest request is kept.
    """
    at = f"{path}." if path else ""
    pod = as_mapping(obj, path, source)
    meta = as_mapping(pod.get("metadata"), f"{at}metadata", source)
    spec = as_mapping(pod.get("spec"), f"{at}spec", source)
    status = as_mapping(pod.get("status"), f"{at}status", source)
    totals: dict[str, GpuRequest] = {}
    for key in ("containers", "initContainers"):
        for i, item in enumerate(as_list(spec.get(key), f"{at}spec.{key}", source)):
            where = f"{at}spec.{key}[{i}]"
            found = gpu_request(as_mapping(item, where, source), where, source)
            if found is None:
                continue
            have = totals.get(found.resource)
            if have is None:
                totals[found.resource] = found
            elif key == "containers":
                totals[found.resource] = GpuRequest(found.resource, have.count + found.count, found.mig_profile,
                                                    found.memory_bytes)
    if not totals:
        return None
    gpu = max(totals.values(), key=lambda g: g.count)
    owner = None
    for i, item in enumerate(as_list(meta.get("ownerReferences"), f"{at}metadata.ownerReferences", source)):
        ref = as_mapping(item, f"{at}metadata.ownerReferences[{i}]", source)
        if ref.get("controller") is True or owner is None:
            owner = f"{as_str(ref.get('kind'), f'{at}metadata.ownerReferences[{i}].kind', source)}/" \
                    f"{as_str(ref.get('name'), f'{at}metadata.ownerReferences[{i}].name', source)}"
    return ColocatedPod(
        name=_name(meta, source),
        namespace=as_str(meta.get("namespace"), f"{at}metadata.namespace", source),
        node=as_str(spec.get("nodeName"), f"{at}spec.nodeName", source),
        phase=as_str(status.get("phase"), f"{at}status.phase", source),
        gpu=gpu,
        owner=owner,
    )
