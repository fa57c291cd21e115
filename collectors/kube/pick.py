"""Which of a namespace's objects belong to a workload: its pods, ReplicaSets, events, HPA,
PDBs, and the Services and Ingresses that route to it.

Namespaced lists are read whole (one call each) and picked here, so the number of calls
does not grow with the number of pods. Every function takes plain dicts as the API sends them.

>>> owns_pod("Deployment", "vllm", {"metadata": {"labels": {"pod-template-hash": "7d9c"},
...     "ownerReferences": [{"kind": "ReplicaSet", "name": "vllm-7d9c", "controller": True}]}})
True
"""

from __future__ import annotations

import re
from typing import Any

from collectors.errors import ParseError
from collectors.kube.selectors import map_selects, selector_matches
from collectors.parsers.kube_related import ingress_backends

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"


def name_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def with_kind(obj: dict[str, Any], kind: str, api_version: str) -> dict[str, Any]:
    """A copy with `kind` and `apiVersion` (items of a List come without them)."""
    out = dict(obj)
    out.setdefault("kind", kind)
    out.setdefault("apiVersion", api_version)
    return out


def owns_pod(kind: str, name: str, pod: dict[str, Any]) -> bool:
    """Whether the workload's controller owns the pod (a selector may catch someone else's).

    A pod without owner references is kept: it matched the selector and nothing else claims it.
    """
    meta = pod.get("metadata") or {}
    refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
    if not refs:
        return True
    owner = next((r for r in refs if r.get("controller")), refs[0])
    if kind == "StatefulSet":
        return owner.get("kind") == "StatefulSet" and owner.get("name") == name
    if owner.get("kind") != "ReplicaSet":
        return False
    template_hash = (meta.get("labels") or {}).get("pod-template-hash")
    if template_hash:
        return owner.get("name") == f"{name}-{template_hash}"
    return str(owner.get("name", "")).startswith(f"{name}-")


def revision(rs: dict[str, Any]) -> int:
    text = str(((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION, ""))
    return int(text) if text.isdigit() else -1


def owned_replica_sets(workload: dict[str, Any], replica_sets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Deployment's ReplicaSets (by owner uid, or name when there is no uid), newest revision first."""
    meta = workload.get("metadata") or {}
    uid, name = meta.get("uid"), meta.get("name")
    owned = []
    for rs in replica_sets:
        refs = (rs.get("metadata") or {}).get("ownerReferences") or []
        if any(isinstance(r, dict) and r.get("kind") == "Deployment"
               and (r.get("uid") == uid if uid else r.get("name") == name) for r in refs):
            owned.append(with_kind(rs, "ReplicaSet", "apps/v1"))
    return sorted(owned, key=lambda rs: -revision(rs))


def target_hpa(kind: str, name: str, hpas: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The HPA whose scaleTargetRef is the workload, None when none scales it."""
    for hpa in hpas:
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("kind") == kind and ref.get("name") == name:
            return with_kind(hpa, "HorizontalPodAutoscaler", "autoscaling/v2")
    return None


def related_events(kind: str, name: str, events: list[dict[str, Any]], replica_sets: list[dict[str, Any]],
                   pods: list[dict[str, Any]], hpa: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Events about the workload, its ReplicaSets, its pods (also pods already gone), its HPA;
    oldest first."""
    wanted = {(kind, name)} | {("ReplicaSet", name_of(rs)) for rs in replica_sets}
    wanted |= {("Pod", name_of(p)) for p in pods}
    if hpa is not None:
        wanted.add(("HorizontalPodAutoscaler", name_of(hpa)))
    prefixes = tuple(f"{name_of(rs)}-" for rs in replica_sets) or (f"{name}-",)
    ordinal = re.compile(re.escape(name) + r"-\d+")
    out = []
    for event in events:
        ref = event.get("involvedObject") or event.get("regarding") or {}
        obj_kind, obj_name = ref.get("kind"), str(ref.get("name", ""))
        gone_pod = obj_kind == "Pod" and bool(
            ordinal.fullmatch(obj_name) if kind == "StatefulSet" else obj_name.startswith(prefixes))
        if (obj_kind, obj_name) in wanted or gone_pod:
            out.append(with_kind(event, "Event", "v1"))
    return sorted(out, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def template_labels(workload: dict[str, Any]) -> dict[str, str]:
    template = (workload.get("spec") or {}).get("template") or {}
    return {str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}


def selecting_pdbs(workload: dict[str, Any], pdbs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PDBs whose selector takes the workload's pods (policy/v1: an empty selector takes all)."""
    labels = template_labels(workload)
    out = []
    for pdb in pdbs:
        selector = (pdb.get("spec") or {}).get("selector")
        try:
            if selector is not None and selector_matches(selector, labels, source="kube:poddisruptionbudgets"):
                out.append(with_kind(pdb, "PodDisruptionBudget", "policy/v1"))
        except ParseError:
            continue
    return out


def selecting_services(workload: dict[str, Any], services: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Services whose selector takes the workload's pods."""
    labels = template_labels(workload)
    out = []
    for svc in services:
        try:
            if map_selects((svc.get("spec") or {}).get("selector"), labels, source="kube:services"):
                out.append(with_kind(svc, "Service", "v1"))
        except ParseError:
            continue
    return out


def routing_ingresses(services: list[dict[str, Any]], ingresses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ingresses with a backend naming one of `services`."""
    names = {name_of(s) for s in services}
    out = []
    for ing in ingresses:
        try:
            if any(svc in names for svc, _ in ingress_backends(ing, "ingress", "kube:ingresses")):
                out.append(with_kind(ing, "Ingress", "networking.k8s.io/v1"))
        except ParseError:
            continue
    return out
