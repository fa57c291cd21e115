"""What a pod template says about one container: GPUs, probes, /dev/shm, node placement.

Shared by Deployments, StatefulSets and Pods. Each reader takes the loaded object (dicts)
and the field path used in ParseError messages.
"""

from __future__ import annotations

from typing import Any

from collectors.parsers.flags import server_config_from_container
from collectors.parsers.kube_fields import (
    as_bool,
    as_int,
    as_list,
    as_mapping,
    as_str,
    expected,
    fail,
    str_map,
)
from runbooks.model.evidence import GpuRequest, Probe, ServerConfig
from runbooks.model.units import MIB

MIG_PREFIX = "nvidia.com/mig-"
WHOLE_GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
HAMI_MEMORY_RESOURCE = "nvidia.com/gpumem"
#: node labels that pin a GPU model; required node-affinity terms on them join node_selector
GPU_NODE_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "nvidia.com/gpu.memory",
    "node.kubernetes.io/instance-type",
)
_PROBES = (("liveness", "livenessProbe"), ("readiness", "readinessProbe"), ("startup", "startupProbe"))


def gpu_request(container: dict[str, Any], path: str, source: str) -> GpuRequest | None:
    """The GPUs a container asks for (limits first, then requests); None when it asks for none.

    >>> gpu_request({"resources": {"limits": {"nvidia.com/mig-3g.40gb": 1}}}, "c", "d.yaml")
    GpuRequest(resource='nvidia.com/mig-3g.40gb', count=1, mig_profile='3g.40gb', memory_bytes=None)
    """
    resources = as_mapping(container.get("resources"), f"{path}.resources", source)
    for section in ("limits", "requests"):
        amounts = as_mapping(resources.get(section), f"{path}.resources.{section}", source)
        found = _gpu_from_amounts(amounts, f"{path}.resources.{section}", source)
        if found is not None:
            return found
    return None


def _gpu_from_amounts(amounts: dict[str, Any], path: str, source: str) -> GpuRequest | None:
    for key, value in amounts.items():
        if key.startswith(MIG_PREFIX):
            count = _count(value, f"{path}.{key}", source)
            if count > 0:
                return GpuRequest(resource=key, count=count, mig_profile=key[len(MIG_PREFIX) :])
    whole = next((key for key in WHOLE_GPU_RESOURCES if key in amounts), None)
    count = _count(amounts[whole], f"{path}.{whole}", source) if whole else 0
    if HAMI_MEMORY_RESOURCE in amounts:
        mib = _count(amounts[HAMI_MEMORY_RESOURCE], f"{path}.{HAMI_MEMORY_RESOURCE}", source)
        return GpuRequest(resource=HAMI_MEMORY_RESOURCE, count=count or 1, memory_bytes=mib * MIB)
    if whole and count > 0:
        return GpuRequest(resource=whole, count=count)
    return None


def _count(value: Any, path: str, source: str) -> int:
    count = as_int(value, path, source)
    if count is None or count < 0:
        raise fail(source, path, expected("count"))
    return count


def probes(container: dict[str, Any], path: str, source: str) -> tuple[Probe, ...]:
    """Liveness, readiness and startup probes, with Kubernetes defaults where fields are absent."""
    found = []
    for kind, key in _PROBES:
        if container.get(key) is None:
            continue
        where = f"{path}.{key}"
        spec = as_mapping(container[key], where, source)

        def number(field: str, default: int, spec: dict[str, Any] = spec, where: str = where) -> int:
            value = as_int(spec.get(field), f"{where}.{field}", source)
            return default if value is None else value

        found.append(
            Probe(
                kind=kind,
                handler=_handler(spec, where, source),
                initial_delay_s=number("initialDelaySeconds", 0),
                period_s=number("periodSeconds", 10),
                timeout_s=number("timeoutSeconds", 1),
                failure_threshold=number("failureThreshold", 3),
            )
        )
    return tuple(found)


def _handler(spec: dict[str, Any], path: str, source: str) -> str | None:
    if spec.get("httpGet") is not None:
        http = as_mapping(spec["httpGet"], f"{path}.httpGet", source)
        route = as_str(http.get("path"), f"{path}.httpGet.path", source) or "/"
        return f"GET {route}:{as_str(http.get('port'), f'{path}.httpGet.port', source)}"
    if spec.get("tcpSocket") is not None:
        tcp = as_mapping(spec["tcpSocket"], f"{path}.tcpSocket", source)
        return f"tcp:{as_str(tcp.get('port'), f'{path}.tcpSocket.port', source)}"
    if spec.get("grpc") is not None:
        grpc = as_mapping(spec["grpc"], f"{path}.grpc", source)
        return f"grpc:{as_str(grpc.get('port'), f'{path}.grpc.port', source)}"
    if spec.get("exec") is not None:
        as_mapping(spec["exec"], f"{path}.exec", source)
        return "exec"
    return None


def shm_size(container: dict[str, Any], pod_spec: dict[str, Any], path: str, pod_path: str, source: str) -> str | None:
    """The /dev/shm size: an emptyDir's sizeLimit, "unbounded", "hostIPC", or None (runtime default)."""
    volume_name = None
    for i, item in enumerate(as_list(container.get("volumeMounts"), f"{path}.volumeMounts", source)):
        mount = as_mapping(item, f"{path}.volumeMounts[{i}]", source)
        mount_path = as_str(mount.get("mountPath"), f"{path}.volumeMounts[{i}].mountPath", source) or ""
        if mount_path.rstrip("/") == "/dev/shm":
            volume_name = as_str(mount.get("name"), f"{path}.volumeMounts[{i}].name", source)
    for i, item in enumerate(as_list(pod_spec.get("volumes"), f"{pod_path}.volumes", source)):
        volume = as_mapping(item, f"{pod_path}.volumes[{i}]", source)
        if volume_name is None or volume.get("name") != volume_name or volume.get("emptyDir") is None:
            continue
        empty_dir = as_mapping(volume["emptyDir"], f"{pod_path}.volumes[{i}].emptyDir", source)
        limit = as_str(empty_dir.get("sizeLimit"), f"{pod_path}.volumes[{i}].emptyDir.sizeLimit", source)
        return limit or "unbounded"
    if as_bool(pod_spec.get("hostIPC"), f"{pod_path}.hostIPC", source):
        return "hostIPC"
    return None


def node_selector(pod_spec: dict[str, Any], pod_path: str, source: str) -> dict[str, str]:
    """nodeSelector plus required node-affinity `In` terms on GPU model labels (values joined by ",")."""
    selector = str_map(pod_spec.get("nodeSelector"), f"{pod_path}.nodeSelector", source)
    where = f"{pod_path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = as_mapping(pod_spec.get("affinity"), f"{pod_path}.affinity", source)
    node_affinity = as_mapping(affinity.get("nodeAffinity"), f"{pod_path}.affinity.nodeAffinity", source)
    required = as_mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), where, source)
    pinned: dict[str, list[str]] = {}
    for t, term in enumerate(as_list(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms", source)):
        term_path = f"{where}.nodeSelectorTerms[{t}]"
        expressions = as_list(as_mapping(term, term_path, source).get("matchExpressions"), term_path, source)
        for e, item in enumerate(expressions):
            expr_path = f"{term_path}.matchExpressions[{e}]"
            expr = as_mapping(item, expr_path, source)
            key = as_str(expr.get("key"), f"{expr_path}.key", source)
            if key not in GPU_NODE_LABELS or expr.get("operator") != "In":
                continue
            for v, value in enumerate(as_list(expr.get("values"), f"{expr_path}.values", source)):
                text = as_str(value, f"{expr_path}.values[{v}]", source)
                if text and text not in pinned.setdefault(key, []):
                    pinned[key].append(text)
    for key, values in pinned.items():
        selector.setdefault(key, ",".join(values))
    return selector


def pick_server_container(
    pod_spec: dict[str, Any], pod_path: str, source: str
) -> tuple[int | None, ServerConfig | None]:
    """(index, flags) of the server container: the one launching vLLM/TGI/SGLang, else one on an
    engine image, else the first asking for GPUs, else the first. Index None without containers."""
    containers = as_list(pod_spec.get("containers"), f"{pod_path}.containers", source)
    configs = [
        server_config_from_container(item, pod_spec, source, path=f"{pod_path}.containers[{i}]")
        for i, item in enumerate(containers)
    ]
    for wanted in (lambda c: c.launch_form is not None, lambda c: True):
        for i, config in enumerate(configs):
            if config is not None and wanted(config):
                return i, config
    for i, item in enumerate(containers):
        where = f"{pod_path}.containers[{i}]"
        if gpu_request(as_mapping(item, where, source), where, source) is not None:
            return i, None
    return (0, None) if containers else (None, None)
