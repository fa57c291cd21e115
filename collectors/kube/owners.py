"""From a pod to the workload that runs it: the pod's controller, and a ReplicaSet's Deployment.

An alert often names a pod (the series it fired on carry `pod`); gpumem triages workloads.
Two GETs at most (the pod, then its ReplicaSet), each with its deadline; failures come back
typed (`collectors.kube.client.api_error`): 404 TargetNotFound, 403 NotPermitted naming the
verb and resource, unreachable EvidenceUnavailable.

>>> controller_of({"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "vllm-7d9c",
...                                                 "controller": True}]}})
('ReplicaSet', 'vllm-7d9c')
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from collectors.errors import said
from collectors.kube.client import Call, api_error, classify_transport_error
from collectors.kube.rest import KubeRest, path
from runbooks.model import errors

#: what a triage can take: the owners gpumem follows a pod to
WORKLOAD_KINDS = ("Deployment", "StatefulSet")
#: the objects that own a workload's spec, whose controllers rewrite the Deployment or StatefulSet
#: from them: kind -> (group, version, plural)
SPEC_OWNER_KINDS = {
    "InferenceService": ("serving.kserve.io", "v1beta1", "inferenceservices"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
}
#: the kinds a pod's owner chain may pass through on its way to a spec owner, with where they live
_CHAIN_KINDS = {
    "Pod": ("", "v1", "pods"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
}
_MAX_HOPS = 6


def controller_of(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the object's controller (its first owner when none is marked); None: no owner."""
    refs = [r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if isinstance(r, dict)]
    if not refs:
        return None
    owner = next((r for r in refs if r.get("controller")), refs[0])
    kind, name = owner.get("kind"), owner.get("name")
    if not isinstance(kind, str) or not isinstance(name, str) or not name:
        return None
    return kind, name


def workload_of_pod(rest: KubeRest, namespace: str, pod: str, timeout_s: float = 5.0) -> tuple[str, str]:
    """(kind, name) of the Deployment or StatefulSet that runs `pod`.

    Raises TargetNotFound (no such pod or ReplicaSet), NotPermitted, EvidenceUnavailable (the
    API server cannot be reached, or the pod is not run by a Deployment or StatefulSet: a bare
    pod, a Job's, a DaemonSet's)."""
    obj = _get(rest, Call("get", "pods", namespace, pod), path("api", "v1", "namespaces", namespace, "pods", pod),
               timeout_s)
    owner = controller_of(obj)
    if owner is not None and owner[0] == "ReplicaSet":
        call = Call("get", "replicasets", namespace, owner[1], group="apps")
        rs = _get(rest, call, path("apis", "apps", "v1", "namespaces", namespace, "replicasets", owner[1]), timeout_s)
        owner = controller_of(rs) or owner
    if owner is None or owner[0] not in WORKLOAD_KINDS:
        run_by = f"{owner[0]} {owner[1]}" if owner else "no controller"
        raise errors.EvidenceUnavailable("pod_not_in_workload", pod=f"{namespace}/{pod}", owner=run_by,
                                         detail=f"pod {namespace}/{pod} is run by {run_by}, "
                                                "not a Deployment or StatefulSet")
    return owner


def _get(rest: KubeRest, call: Call, where: str, timeout_s: float) -> dict[str, Any]:
    try:
        return rest.get_json(where, timeout_s=timeout_s)
    except ApiException as e:
        raise api_error(e, call) from e
    except ValueError as e:
        raise errors.EvidenceUnavailable("api_error", status=200, source=call.source, detail=str(e)[:200]) from e
    except Exception as e:  # urllib3's transport errors: refused, timed out, TLS
        reason, detail = classify_transport_error(e)
        raise errors.EvidenceUnavailable("unreachable", source=call.source, reason=reason,
                                         detail=said("where", source=call.source, message=detail)) from e


def owner_chain_of_pod(rest: KubeRest, namespace: str, pod: str,
                       timeout_s: float = 5.0) -> tuple[tuple[str, str], ...]:
    """The pod's controllers, nearest first, up to the object that owns the spec: Pod ->
    ReplicaSet -> Deployment -> InferenceService; Pod -> StatefulSet -> LeaderWorkerSet (a
    LeaderWorkerSet's worker StatefulSet is owned by its leader pod, so that chain reads Pod ->
    StatefulSet -> Pod -> StatefulSet -> LeaderWorkerSet). One GET per hop, each with its deadline;
    the chain ends at a spec owner (not read), at an object with no controller, or at a kind
    gpumem does not follow. Failures are typed as in `workload_of_pod`."""
    chain: list[tuple[str, str]] = []
    kind, name = "Pod", pod
    for _ in range(_MAX_HOPS):
        group, version, plural = _CHAIN_KINDS[kind]
        where = path("api", version, "namespaces", namespace, plural, name) if not group else \
            path("apis", group, version, "namespaces", namespace, plural, name)
        owner = controller_of(_get(rest, Call("get", plural, namespace, name, group=group), where, timeout_s))
        if owner is None:
            break
        chain.append(owner)
        if owner[0] not in _CHAIN_KINDS:
            break
        kind, name = owner
    return tuple(chain)


def spec_owner_of_pod(rest: KubeRest, namespace: str, pod: str, timeout_s: float = 5.0) -> tuple[str, str] | None:
    """(kind, name) of the InferenceService or LeaderWorkerSet whose controller writes `pod`'s
    workload, or None when the pod's workload is its own source of truth (or is run by neither)."""
    chain = owner_chain_of_pod(rest, namespace, pod, timeout_s)
    return next((link for link in chain if link[0] in SPEC_OWNER_KINDS), None)
