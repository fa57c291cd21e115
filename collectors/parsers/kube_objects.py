"""Kubernetes objects of an evidence bundle (or of the live API) as typed evidence.

Text loaders (`parse_*`) take the file as captured with `kubectl get ... -o yaml` (or JSON);
object-level functions (`workload_from_object`, `pod_state_from_object`,
`autoscaler_from_object`) take one already-loaded object, e.g. from
`ApiClient().sanitize_for_serialization(obj)` of the `kubernetes` client.

>>> workload, config = parse_deployment('''
... kind: Deployment
... metadata: {name: vllm-server, namespace: llm}
... spec:
...   template:
...     spec:
...       containers:
...       - name: vllm
...         image: vllm/vllm-openai:v0.6.4
...         args: [Qwen/Qwen2.5-7B-Instruct, --max-model-len=8192]
... ''')
>>> workload.name, workload.container, config.max_model_len
('vllm-server', 'vllm', 8192)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from collectors.errors import ParseError, quoted, said
from collectors.parsers.kube_events import events_from_objects, parse_events, parse_events_with_issues
from collectors.parsers.kube_fields import (
    as_int,
    as_list,
    as_mapping,
    as_str,
    as_time,
    dig,
    expected,
    fail,
    str_map,
)
from collectors.parsers.kube_pod_spec import (
    gpu_request,
    node_selector,
    pick_server_container,
    probes,
    shm_size,
)
from collectors.parsers.kube_yaml import load_yaml_documents
from runbooks.model.evidence import Autoscaler, ContainerState, PodState, ServerConfig, Workload
from runbooks.model.templates import SPEC_OWNER_KINDS, TemplateShapeError, deployment_view, pod_sites

__all__ = [
    "autoscaler_from_object",
    "events_from_objects",
    "load_yaml_documents",
    "parse_deployment",
    "parse_events",
    "parse_events_with_issues",
    "parse_hpa",
    "parse_pods",
    "pod_state_from_object",
    "pods_from_objects",
    "spec_owner_config",
    "workload_from_object",
]

WORKLOAD_KINDS = ("Deployment", "StatefulSet")
_POD_PATH = "spec.template.spec"
_DEFAULT_SURGE = "25%"


def parse_deployment(text: str, source: str = "deployment.yaml") -> tuple[Workload, ServerConfig | None]:
    """The Deployment or StatefulSet in a file (one object or a List) and its server's flags.

    In a List, the first workload that runs an inference server is taken (production-stack
    ships its router beside the engine), else the first workload.
    """
    candidates = [obj for obj in load_yaml_documents(text, source)
                  if obj.get("kind") in WORKLOAD_KINDS or obj.get("kind") in SPEC_OWNER_KINDS]
    if not candidates:
        raise ParseError(source, said("no_workload"))
    first = workload_from_object(candidates[0], source)
    if first[1] is not None:
        return first
    for obj in candidates[1:]:
        found = workload_from_object(obj, source)
        if found[1] is not None:
            return found
    return first


def workload_from_object(obj: Any, source: str = "deployment.yaml") -> tuple[Workload, ServerConfig | None]:
    """One Deployment or StatefulSet object (dict) as a Workload plus its server's flags."""
    obj = as_mapping(obj, "", source)
    kind = as_str(obj.get("kind"), "kind", source) or "Deployment"
    if kind in SPEC_OWNER_KINDS:
        return _spec_owner_workload(obj, kind, source)
    if kind not in WORKLOAD_KINDS:
        raise fail(source, "kind", said("one_of", choices="Deployment, StatefulSet, InferenceService, LeaderWorkerSet",
                                        got=quoted(repr(kind))))
    meta = as_mapping(obj.get("metadata"), "metadata", source)
    spec = as_mapping(obj.get("spec"), "spec", source)
    pod_spec = as_mapping(dig(obj, _POD_PATH, source), _POD_PATH, source)
    index, config = pick_server_container(pod_spec, _POD_PATH, source)
    container_path = f"{_POD_PATH}.containers[{index}]"
    container = as_mapping(pod_spec["containers"][index], container_path, source) if index is not None else {}
    status = as_mapping(obj.get("status"), "status", source)
    ready = as_int(status.get("readyReplicas"), "status.readyReplicas", source)
    annotations = str_map(meta.get("annotations"), "metadata.annotations", source)
    max_surge, max_unavailable = _rollout_step(kind, spec, source)
    workload = Workload(
        source=source,
        name=_name(meta, source),
        namespace=as_str(meta.get("namespace"), "metadata.namespace", source),
        kind=kind,
        replicas=as_int(spec.get("replicas"), "spec.replicas", source),
        # A controller omits readyReplicas while it is 0; a manifest has no status at all.
        ready_replicas=ready if ready is not None or not status else 0,
        container=as_str(container.get("name"), f"{container_path}.name", source),
        image=as_str(container.get("image"), f"{container_path}.image", source),
        gpu=gpu_request(container, container_path, source) if index is not None else None,
        probes=probes(container, container_path, source) if index is not None else (),
        node_selector=node_selector(pod_spec, _POD_PATH, source),
        max_surge=max_surge,
        max_unavailable=max_unavailable,
        shm_size=shm_size(container, pod_spec, container_path, _POD_PATH, source),
        labels=str_map(meta.get("labels"), "metadata.labels", source),
        generation=as_int(meta.get("generation"), "metadata.generation", source),
        revision=annotations.get("deployment.kubernetes.io/revision"),
    )
    return workload, config


def _sites(obj: dict[str, Any], source: str):
    try:
        return pod_sites(obj)
    except TemplateShapeError as e:
        raise fail(source, e.field, e.why) from None


def spec_owner_config(obj: Any, source: str = "deployment.yaml") -> ServerConfig | None:
    """The server flags an InferenceService or LeaderWorkerSet declares (`runbooks.model.templates`):
    a LeaderWorkerSet's leader template first, its worker template when the leader runs no
    known server; an InferenceService's predictor containers or its model. None: no known server."""
    obj = as_mapping(obj, "", source)
    for site in _sites(obj, source):
        _index, config = pick_server_container(site.pod_spec, site.pod_path.lstrip("/").replace("/", "."), source)
        if config is not None:
            return config
    return None


def _spec_owner_workload(obj: dict[str, Any], kind: str, source: str) -> tuple[Workload, ServerConfig | None]:
    """An InferenceService or LeaderWorkerSet read through its pod template as a Deployment's
    (`deployment_view`), named as itself; an image gpumem read a model as (KServe's Hugging Face
    runtime) is not reported as the model's image."""
    sites = _sites(obj, source)
    config = spec_owner_config(obj, source)
    site = sites[0]
    for candidate in sites:
        if pick_server_container(candidate.pod_spec, "spec", source)[1] is not None:
            site = candidate
            break
    workload, _ = workload_from_object(deployment_view(obj, site), source)
    group = None
    if kind == "LeaderWorkerSet":
        template = as_mapping(as_mapping(obj.get("spec"), "spec", source).get("leaderWorkerTemplate"),
                              "spec.leaderWorkerTemplate", source)
        group = as_int(template.get("size"), "spec.leaderWorkerTemplate.size", source) or 1  # the CRD's default
    return replace(workload, kind=kind, max_surge=None, max_unavailable=None, group_size=group,
                   image=None if site.runtime_read else workload.image), config


def _name(meta: dict[str, Any], source: str, path: str = "metadata") -> str:
    name = as_str(meta.get("name"), f"{path}.name", source)
    if not name:
        raise fail(source, f"{path}.name", said("missing"))
    return name


def _rollout_step(kind: str, spec: dict[str, Any], source: str) -> tuple[str | None, str | None]:
    """(maxSurge, maxUnavailable) as written, with the Kubernetes defaults; (None, None) when
    pods are not replaced step by step (Recreate, OnDelete)."""
    key = "strategy" if kind == "Deployment" else "updateStrategy"
    strategy = as_mapping(spec.get(key), f"spec.{key}", source)
    if (as_str(strategy.get("type"), f"spec.{key}.type", source) or "RollingUpdate") != "RollingUpdate":
        return None, None
    rolling = as_mapping(strategy.get("rollingUpdate"), f"spec.{key}.rollingUpdate", source)
    unavailable = as_str(rolling.get("maxUnavailable"), f"spec.{key}.rollingUpdate.maxUnavailable", source)
    if kind == "StatefulSet":
        # StatefulSets never surge; they replace one pod at a time unless told otherwise.
        return "0", unavailable or "1"
    surge = as_str(rolling.get("maxSurge"), f"spec.{key}.rollingUpdate.maxSurge", source)
    return surge or _DEFAULT_SURGE, unavailable or _DEFAULT_SURGE


# ---------------------------------------------------------------------------- pods


def parse_pods(text: str, source: str = "pods.yaml") -> tuple[PodState, ...]:
    """Pods from `kubectl get pods -o yaml` (a List, or one Pod). Objects of other kinds are skipped."""
    return pods_from_objects(load_yaml_documents(text, source), source)


def pods_from_objects(objects: list[Any], source: str = "pods.yaml") -> tuple[PodState, ...]:
    pods = []
    for i, obj in enumerate(as_list(objects, "items", source)):
        item = as_mapping(obj, f"items[{i}]", source)
        if item.get("kind", "Pod") == "Pod":
            pods.append(pod_state_from_object(item, source, path=f"items[{i}]" if len(objects) > 1 else ""))
    return tuple(pods)


def pod_state_from_object(obj: Any, source: str = "pods.yaml", path: str = "") -> PodState:
    """One Pod object (dict) as a PodState; `path` prefixes field paths in errors ("items[3]")."""
    at = f"{path}." if path else ""
    pod = as_mapping(obj, path, source)
    meta = as_mapping(pod.get("metadata"), f"{at}metadata", source)
    spec = as_mapping(pod.get("spec"), f"{at}spec", source)
    status = as_mapping(pod.get("status"), f"{at}status", source)
    containers = []
    for i, item in enumerate(as_list(status.get("containerStatuses"), f"{at}status.containerStatuses", source)):
        containers.append(_container_state(item, f"{at}status.containerStatuses[{i}]", source))
    index, _ = pick_server_container(spec, f"{at}spec", source)
    gpu = None
    if index is not None:
        where = f"{at}spec.containers[{index}]"
        gpu = gpu_request(as_mapping(spec["containers"][index], where, source), where, source)
    return PodState(
        name=_name(meta, source, f"{at}metadata"),
        namespace=as_str(meta.get("namespace"), f"{at}metadata.namespace", source),
        node=as_str(spec.get("nodeName"), f"{at}spec.nodeName", source),
        phase=as_str(status.get("phase"), f"{at}status.phase", source),
        started_at=as_time(status.get("startTime"), f"{at}status.startTime", source),
        containers=tuple(containers),
        gpu=gpu,
        labels=str_map(meta.get("labels"), f"{at}metadata.labels", source),
    )


def _container_state(obj: Any, path: str, source: str) -> ContainerState:
    status = as_mapping(obj, path, source)
    state = as_mapping(status.get("state"), f"{path}.state", source)
    current = next((key for key in ("running", "waiting", "terminated") if state.get(key) is not None), None)
    detail = as_mapping(state.get(current), f"{path}.state.{current}", source) if current else {}
    last_path = f"{path}.lastState.terminated"
    last = as_mapping(as_mapping(status.get("lastState"), f"{path}.lastState", source).get("terminated"),
                      last_path, source)
    name = as_str(status.get("name"), f"{path}.name", source)
    if not name:
        raise fail(source, f"{path}.name", said("missing"))
    return ContainerState(
        name=name,
        restart_count=as_int(status.get("restartCount"), f"{path}.restartCount", source) or 0,
        ready=_optional_bool(status.get("ready"), f"{path}.ready", source),
        state=current,
        state_reason=as_str(detail.get("reason"), f"{path}.state.{current}.reason", source),
        started_at=as_time(detail.get("startedAt"), f"{path}.state.{current}.startedAt", source),
        last_termination_reason=as_str(last.get("reason"), f"{last_path}.reason", source),
        last_exit_code=as_int(last.get("exitCode"), f"{last_path}.exitCode", source),
        last_finished_at=as_time(last.get("finishedAt"), f"{last_path}.finishedAt", source),
    )


def _optional_bool(value: Any, path: str, source: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    text = as_str(value, path, source)
    if text in ("true", "false"):
        return text == "true"
    raise fail(source, path, expected("boolean"))


# ----------------------------------------------------------------------------- HPA


def parse_hpa(text: str, source: str = "hpa.yaml") -> Autoscaler:
    """The first HorizontalPodAutoscaler in a file (autoscaling/v1 or v2)."""
    for obj in load_yaml_documents(text, source):
        if obj.get("kind") == "HorizontalPodAutoscaler":
            return autoscaler_from_object(obj, source)
    raise ParseError(source, said("no_hpa"))


def autoscaler_from_object(obj: Any, source: str = "hpa.yaml") -> Autoscaler:
    """One HPA object as an Autoscaler; metrics read as "Resource:cpu", "Pods:llm_queue_depth", ..."""
    hpa = as_mapping(obj, "", source)
    kind = hpa.get("kind", "HorizontalPodAutoscaler")
    if kind != "HorizontalPodAutoscaler":
        raise fail(source, "kind", said("expected_got", what=quoted("HorizontalPodAutoscaler"), got=quoted(repr(kind))))
    meta = as_mapping(hpa.get("metadata"), "metadata", source)
    spec = as_mapping(hpa.get("spec"), "spec", source)
    target = as_mapping(spec.get("scaleTargetRef"), "spec.scaleTargetRef", source)
    status = as_mapping(hpa.get("status"), "status", source)
    min_replicas = as_int(spec.get("minReplicas"), "spec.minReplicas", source)
    return Autoscaler(
        name=_name(meta, source),
        min_replicas=1 if min_replicas is None else min_replicas,
        max_replicas=as_int(spec.get("maxReplicas"), "spec.maxReplicas", source),
        metrics=_hpa_metrics(spec, source),
        current_replicas=as_int(status.get("currentReplicas"), "status.currentReplicas", source),
        target_kind=as_str(target.get("kind"), "spec.scaleTargetRef.kind", source),
        target_name=as_str(target.get("name"), "spec.scaleTargetRef.name", source),
    )


_METRIC_SOURCES = {
    "Resource": "resource",
    "ContainerResource": "containerResource",
    "Pods": "pods",
    "Object": "object",
    "External": "external",
}


def _hpa_metrics(spec: dict[str, Any], source: str) -> tuple[str, ...]:
    metrics = as_list(spec.get("metrics"), "spec.metrics", source)
    if not metrics:
        # v1 targetCPUUtilizationPercentage, and v2 without metrics: both scale on CPU (80% default).
        return ("Resource:cpu",)
    names = []
    for i, item in enumerate(metrics):
        metric = as_mapping(item, f"spec.metrics[{i}]", source)
        kind = as_str(metric.get("type"), f"spec.metrics[{i}].type", source) or ""
        key = _METRIC_SOURCES.get(kind, kind[:1].lower() + kind[1:])
        body = as_mapping(metric.get(key), f"spec.metrics[{i}].{key}", source)
        if kind in ("Resource", "ContainerResource"):
            name = as_str(body.get("name"), f"spec.metrics[{i}].{key}.name", source)
        else:
            # v2: <source>.metric.name; v2beta1: <source>.metricName
            inner = as_mapping(body.get("metric"), f"spec.metrics[{i}].{key}.metric", source)
            name = as_str(inner.get("name"), f"spec.metrics[{i}].{key}.metric.name", source) or as_str(
                body.get("metricName"), f"spec.metrics[{i}].{key}.metricName", source
            )
        names.append(f"{kind}:{name or ''}")
    return tuple(names)
