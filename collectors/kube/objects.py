"""Reading one object, or the objects of one kind, of the kinds gpumem plans changes to, with
the identity of the client it is given: the reader's (handover, approvals) or the writer's (the
object right before a write, `bot.actuator.writer`). Failures come back typed
(`runbooks.model.errors`): 403 NotPermitted, 404 TargetNotFound, no answer TemporaryError.

>>> resource_path("HorizontalPodAutoscaler", "llm", "vllm")[0]
'/apis/autoscaling/v2/namespaces/llm/horizontalpodautoscalers/vllm'
>>> resource_path("Service", "llm")[0]
'/api/v1/namespaces/llm/services'
"""

from __future__ import annotations

from typing import Any

import urllib3

from collectors.kube.client import Call, api_error, transport_error
from collectors.kube.rest import KubeRest, path
from runbooks.model.errors import GpumemError

#: kind -> (API group, version, resource)
RESOURCES = {
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "Service": ("", "v1", "services"),
    "HorizontalPodAutoscaler": ("autoscaling", "v2", "horizontalpodautoscalers"),
    # the objects that declare a workload's pods, written by JSON patch (a custom resource takes no
    # strategic merge)
    "InferenceService": ("serving.kserve.io", "v1beta1", "inferenceservices"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
}


def resource_path(kind: str, namespace: str, name: str | None = None) -> tuple[str, Call]:
    group, version, resource = RESOURCES[kind]
    prefix = ("apis", group, version) if group else ("api", version)
    parts = (*prefix, "namespaces", namespace, resource, *((name,) if name else ()))
    return path(*parts), Call("get", resource, namespace, name, group=group)


class ObjectReader:
    """Gets objects of `RESOURCES`' kinds through `api` (a kubernetes ApiClient), each request
    bounded by `timeout_s`."""

    def __init__(self, api: Any, timeout_s: float = 10.0):
        self.rest = KubeRest(api)
        self.timeout_s = timeout_s

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        where, call = resource_path(kind, namespace, name)
        try:
            return self.rest.get_json(where, timeout_s=self.timeout_s)
        except Exception as e:  # an ApiException from the reader: typed like every other answer
            raise typed(e, call, self.timeout_s) from e

    def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """The objects of `kind` in `namespace` (e.g. the HPAs, to find the one that scales a workload)."""
        where, call = resource_path(kind, namespace)
        try:
            doc = self.rest.get_json(where, timeout_s=self.timeout_s)
        except Exception as e:
            raise typed(e, Call("list", call.resource, namespace, group=call.group), self.timeout_s) from e
        return [item for item in doc.get("items") or [] if isinstance(item, dict)]


def typed(error: Exception, call: Call, timeout_s: float = 10.0) -> Exception:
    """A read's failure typed: its HTTP status (`api_error`), or no answer at all (a timeout, a
    dropped connection: TemporaryError, `transport_error`)."""
    if isinstance(error, GpumemError):
        return error
    if isinstance(error, urllib3.exceptions.HTTPError):
        return transport_error(error, call, timeout_s)
    status = getattr(error, "status", None)
    if status is None or not hasattr(error, "body"):
        return error
    return api_error(error, call)  # type: ignore[arg-type]
