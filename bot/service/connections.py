"""How gpumem reaches a cluster: its Kubernetes API client and its Prometheus, made in one place.

A configured cluster (`clusters:` in the config) is reached through its kubeconfig and kube
context, or, when its context is `in-cluster`, through the pod's service account: that is the
one in-cluster rule (`endpoint`), and every client of the reader identity is made by `kube_api`
from it. A name no cluster matches is taken as a kube context of the default kubeconfig.
Prometheus clients are made by `prometheus_client` from a `PrometheusSettings` (its URL, bearer
token or basic auth, CA file, timeout), or by `named_prometheus` for a URL a command gives.

`Connections` holds them per cluster for a process that asks again and again (the bot, a
handover reading each plan's cluster): each is made once, on first use, thread-safely.

>>> from bot.config.settings import load_settings
>>> endpoint(load_settings(None, {}), "prod")
Endpoint(kubeconfig=None, context='prod', in_cluster=False)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from collectors.kube.errors import (
    KubeConfigError as KubeConfigError,  # raised by kube_api; surfaces catch it from here
)
from collectors.prometheus.client import PrometheusClient

if TYPE_CHECKING:
    from collectors.kube.rest import KubeRest

#: the kube context a configured cluster names to be reached through the pod's service account
IN_CLUSTER = "in-cluster"


@dataclass(frozen=True)
class Endpoint:
    """Where one cluster's API is: a kubeconfig and context, or the pod's service account."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False


def is_in_cluster(configured: Any) -> bool:
    """Whether a configured cluster (`ClusterSettings`, or None) is this pod's own."""
    return bool(configured is not None and configured.context == IN_CLUSTER)


def endpoint(settings: Any, cluster: str | None) -> Endpoint:
    """The reader identity's way to `cluster` (a configured cluster's name or kube context;
    None: the default one)."""
    configured = settings.cluster(cluster)
    if is_in_cluster(configured):
        return Endpoint(in_cluster=True)
    if configured is not None:
        return Endpoint(configured.kubeconfig, configured.context)
    return Endpoint(None, cluster)


def kube_api(where: Endpoint) -> Any:
    """A Kubernetes ApiClient for `where`. Raises KubeConfigError when it cannot be configured."""
    # imported here: the Kubernetes client costs about 0.3 s (-X importtime), which the fleet
    # view and an offline triage, reading no cluster, do not pay
    from collectors.kube.client import make_api_client

    return make_api_client(where.kubeconfig, where.context, in_cluster=where.in_cluster)


def prometheus_client(prom: Any, timeout_s: float | None = None) -> PrometheusClient:
    """A client for one configured Prometheus (`PrometheusSettings`), with its own timeout
    unless `timeout_s` says otherwise."""
    basic = (prom.username, prom.password.reveal()) if prom.username and prom.password is not None else None
    return PrometheusClient(prom.url, bearer_token=prom.bearer_token.reveal() if prom.bearer_token else None,
                            basic_auth=basic, timeout_s=prom.timeout_s if timeout_s is None else timeout_s,
                            verify=prom.ca_file or True)


def named_prometheus(url: str, bearer_token: str | None, timeout_s: float) -> PrometheusClient:
    """A client for a Prometheus a command names (--prometheus URL, its token from
    $GPUMEM_PROMETHEUS_TOKEN) instead of the config's."""
    return PrometheusClient(url, bearer_token=bearer_token, timeout_s=timeout_s)


def cluster_prometheus(settings: Any, cluster: str | None) -> Any:
    """The Prometheus settings for `cluster`: its own, else the top-level one (None: neither)."""
    configured = settings.cluster(cluster)
    return (configured.prometheus if configured and configured.prometheus else None) or settings.prometheus


class Connections:
    """The clients of one process, per cluster, each made once on first use."""

    def __init__(self, settings: Any, make_api: Callable[[Endpoint], Any] = kube_api):
        self.settings = settings
        self._make_api = make_api
        self._lock = threading.Lock()
        self._apis: dict[Endpoint, Any] = {}
        self._prometheus: dict[str | None, PrometheusClient | None] = {}

    def api(self, cluster: str | None) -> Any:
        """The reader identity's ApiClient for `cluster`."""
        where = endpoint(self.settings, cluster)
        with self._lock:
            if where not in self._apis:
                self._apis[where] = self._make_api(where)
            return self._apis[where]

    def rest(self, cluster: str | None) -> KubeRest:
        """GETs against `cluster` with the reader identity."""
        from collectors.kube.rest import KubeRest  # with the client (kube_api)

        return KubeRest(self.api(cluster))

    def prometheus(self, cluster: str | None) -> PrometheusClient | None:
        """The client for `cluster`'s Prometheus (`cluster_prometheus`); None when none is configured."""
        with self._lock:
            if cluster not in self._prometheus:
                prom = cluster_prometheus(self.settings, cluster)
                self._prometheus[cluster] = prometheus_client(prom) if prom is not None else None
            return self._prometheus[cluster]
