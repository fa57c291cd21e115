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

from collectors.kube.client import Call, api_error, classify_transport_error
from collectors.kube.rest import KubeRest, path
from runbooks.model import errors

#: what a triage can take: the owners gpumem follows a pod to
WORKLOAD_KINDS = ("Deployment", "StatefulSet")


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
                                         detail=f"{call.source}: {detail}") from e
