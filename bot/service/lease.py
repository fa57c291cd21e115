"""A coordination.k8s.io/v1 Lease over raw HTTP, for the scheduler's leader election.

Like `bot.actuator.writer`, requests go through the connection pool and credentials of
`collectors.kube.client.make_api_client` (no generated API classes). `get` answers None for a
Lease that does not exist; `create` and `update` raise the typed errors (`StaleObject` when
someone else wrote first: a create that finds it exists, an update with a stale
resourceVersion).
"""

from __future__ import annotations

from typing import Any

from bot.actuator.writer import send_json
from bot.config.settings import SettingsError
from bot.service.connections import Endpoint, kube_api
from collectors.kube.client import Call, KubeConfigError
from collectors.kube.rest import KubeRest, path
from runbooks.model.errors import TargetNotFound

GROUP, VERSION, RESOURCE = "coordination.k8s.io", "v1", "leases"


class LeaseClient:
    """get / create / update one namespace's Leases."""

    def __init__(self, api: Any, namespace: str, timeout_s: float = 5.0):
        self.rest = KubeRest(api)
        self.namespace = namespace
        self.timeout_s = timeout_s

    def _path(self, name: str | None = None) -> str:
        return path("apis", GROUP, VERSION, "namespaces", self.namespace, RESOURCE, *((name,) if name else ()))

    def get(self, name: str) -> dict[str, Any] | None:
        """The Lease, or None when there is none."""
        try:
            return self._send("GET", self._path(name), None, Call("get", RESOURCE, self.namespace, name, group=GROUP))
        except TargetNotFound:
            return None

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._send("POST", self._path(), body, Call("create", RESOURCE, self.namespace, group=GROUP))

    def update(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT the whole Lease; its metadata.resourceVersion makes it fail (StaleObject) when another
        holder wrote since it was read."""
        return self._send("PUT", self._path(name), body, Call("update", RESOURCE, self.namespace, name, group=GROUP))

    def _send(self, method: str, where: str, body: Any, call: Call) -> dict[str, Any]:
        return send_json(self.rest, method, where, body, call, self.timeout_s)


def lease_client(namespace: str, kubeconfig: str | None = None, context: str | None = None,
                 in_cluster: bool = False) -> LeaseClient:
    """A LeaseClient for the bot's own namespace (in a pod: the in-cluster service account).
    Raises SettingsError when no Kubernetes API can be configured (no kubeconfig, no context,
    no service account)."""
    try:
        api = kube_api(Endpoint(None if in_cluster else kubeconfig, None if in_cluster else context, in_cluster))
    except KubeConfigError as e:
        where = "the pod's service account" if in_cluster else "the default cluster (clusters, default_context)"
        raise SettingsError(f"scheduler.election: the Lease needs a Kubernetes API through {where}: {e}") from e
    return LeaseClient(api, namespace)
