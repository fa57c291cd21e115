"""From an Alertmanager alert to what gpumem does: which workload, which cluster, which channel.

The pieces the webhook (`bot.http.alertmanager`, `bot.slack.alerts`) puts together, each without Slack:

- `place(alert, settings, resolve_pod)`: the workload an alert is about, from its labels (the
  names under `alerts.labels`): namespace plus deployment, or namespace plus pod resolved to its
  Deployment (or StatefulSet) through the owner references; the cluster (a configured one, by
  its name or kube context); the channel (`alerts.routes`, first match wins, then
  `alerts.default_channel`); and whether the channel may ask about that namespace there. An
  alert that cannot be placed says why (`Placement.outcome`).
- `PodResolver`: the pod-to-workload reads, one client per cluster, answers kept a while.
- `webhook_token_matches`: the bearer token or basic-auth password, compared in constant time.

>>> from bot.config.settings import load_settings
>>> from bot.service.alert_payload import Alert
>>> from datetime import UTC, datetime
>>> s = load_settings(None, {})
>>> a = Alert("firing", {"alertname": "X"}, {}, datetime(2026, 3, 9, tzinfo=UTC), None, "f1")
>>> place(a, s, None).outcome
'no_target'
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.grammar.slack import CommandError, Target, parse_target
from bot.service.alert_payload import Alert
from bot.service.connections import endpoint, kube_api
from bot.store.alerts import AlertLog
from collectors.kube.owners import workload_of_pod
from collectors.kube.rest import KubeRest
from runbooks.model.errors import EvidenceUnavailable, GpumemError

log = logging.getLogger("gpumem.alerts")

#: (context, namespace, pod) -> the name of the workload that runs the pod
ResolvePod = Callable[[str | None, str, str], str]


@dataclass(frozen=True)
class Placement:
    """Where an alert goes. `outcome` is "ok" when it can be triaged, else why not:
    no_target (no namespace, or neither deployment nor pod label), bad_target (a label that is
    not a Kubernetes name), pod_unresolved (the pod's workload could not be read),
    unknown_cluster, no_route, namespace_not_allowed."""

    outcome: str
    target: Target | None = None
    #: the configured cluster's name (None: the default cluster)
    cluster: str | None = None
    channel: str | None = None
    pod: str | None = None
    detail: str = ""

    @property
    def key(self) -> tuple[str | None, str, str] | None:
        """What the per-target interval counts by: (cluster, namespace, name)."""
        return (self.cluster, self.target.namespace, self.target.name) if self.target else None


def place(alert: Alert, settings: Any, resolve_pod: ResolvePod | None) -> Placement:
    names = settings.alerts.labels
    labels = alert.labels
    namespace = labels.get(names.namespace) or None
    cluster_label = labels.get(names.cluster) or None
    severity = labels.get(names.severity) or None
    channel = settings.alerts.channel_for(namespace, cluster_label, severity)
    cluster = None
    if cluster_label and settings.clusters:
        known = settings.cluster(cluster_label)
        if known is None or not known.matches(cluster_label):
            return Placement("unknown_cluster", channel=channel,
                             detail=f"{names.cluster}={cluster_label!r} is not a configured cluster")
        cluster = known.name
    elif settings.clusters and settings.cluster(None) is not None:
        cluster = settings.cluster(None).name  # no label: the default cluster, named as a label would name it
    deployment = labels.get(names.deployment) or None
    pod = labels.get(names.pod) or None
    if not namespace or not (deployment or pod):
        missing = names.namespace if not namespace else f"{names.deployment} or {names.pod}"
        return Placement("no_target", cluster=cluster, channel=channel, pod=pod, detail=f"no {missing} label")
    try:
        if deployment:
            target = parse_target(f"{namespace}/{deployment}", None)
        else:
            parse_target(f"{namespace}/{pod}", None)  # a pod name is a Kubernetes name too
            if resolve_pod is None:
                return Placement("pod_unresolved", cluster=cluster, channel=channel, pod=pod,
                                 detail="no cluster to resolve the pod's Deployment in")
            target = parse_target(f"{namespace}/{resolve_pod(cluster, namespace, str(pod))}", None)
    except CommandError as e:
        return Placement("bad_target", cluster=cluster, channel=channel, pod=pod,
                         detail=f"not a Kubernetes name: {str(e.params.get('target', ''))[:120]}")
    except GpumemError as e:
        detail = e.params.get("detail") or str(e)
        return Placement("pod_unresolved", cluster=cluster, channel=channel, pod=pod, detail=str(detail)[:300])
    if channel is None:
        return Placement("no_route", target, cluster, pod=pod, detail="no route matches and no default_channel")
    if not settings.namespace_allowed(target.namespace, cluster, channel):
        allowed = ", ".join(settings.namespaces_for(cluster, channel)) or "-"
        return Placement("namespace_not_allowed", target, cluster, channel, pod,
                         detail=f"{channel} may ask about {allowed}, not {target.namespace}")
    return Placement("ok", target, cluster, channel, pod)


class PodResolver:
    """(context, namespace, pod) -> workload name, read live; answers kept `ttl_s` (a storm of
    alerts on one pod reads it once). Raises GpumemError when it cannot tell."""

    def __init__(self, settings: Any, ttl_s: float = 600.0, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._rests: dict[str | None, Any] = {}
        self._known: dict[tuple[str | None, str, str], tuple[float, str]] = {}

    def _rest(self, context: str | None) -> Any:
        with self._lock:
            if context not in self._rests:
                self._rests[context] = KubeRest(kube_api(endpoint(self.settings, context)))
            return self._rests[context]

    def __call__(self, context: str | None, namespace: str, pod: str) -> str:
        key = (context, namespace, pod)
        now = self.clock()
        with self._lock:
            hit = self._known.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            rest = self._rest(context)
        except GpumemError:
            raise
        except Exception as e:  # KubeConfigError: no kubeconfig, no in-cluster account

            raise EvidenceUnavailable("no_cluster", detail=str(e)[:300]) from e
        _, name = workload_of_pod(rest, namespace, pod, timeout_s=self.settings.deadlines.source_s)
        with self._lock:
            if len(self._known) > 10_000:
                self._known.clear()
            self._known[key] = (now + self.ttl_s, name)
        return name


def webhook_token_matches(authorization: str | None, token: str) -> bool:
    """Whether an Authorization header carries `token`: `Bearer TOKEN`, or `Basic` with TOKEN as
    the password (any user name). Compared in constant time; anything malformed is False."""
    if not authorization or not token:
        return False
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    expected = token.encode("utf-8")
    if scheme.lower() == "bearer":
        return hmac.compare_digest(value.encode("utf-8", "surrogateescape"), expected)
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            return False
        _, colon, password = decoded.partition(b":")
        return bool(colon) and hmac.compare_digest(password, expected)
    return False


def alert_row(alert: Alert, group_key: str, placement: Placement, outcome: str, *, names: Any,
              thread_ts: str | None = None, detail: str = "") -> dict[str, Any]:
    """The store row of one alert (`bot.store.alerts.COLUMNS`)."""
    target = placement.target
    return {
        "fingerprint": alert.fingerprint, "group_key": group_key, "status": alert.status,
        "alertname": alert.name or None, "severity": alert.labels.get(names.severity) or None,
        "cluster": placement.cluster,
        "namespace": target.namespace if target else (alert.labels.get(names.namespace) or None),
        "name": target.name if target else None, "pod": placement.pod,
        "channel": placement.channel, "thread_ts": thread_ts, "outcome": outcome,
        "detail": detail or placement.detail or None, "summary": alert.summary or None,
        "starts_at": alert.starts_at.isoformat(), "ends_at": alert.ends_at.isoformat() if alert.ends_at else None,
        "labels": alert.labels,
    }


def record_alerts(store: Any, rows: list[dict[str, Any]], now: Any = None) -> int:
    """Record a batch of alert rows in the store in one transaction."""
    return AlertLog(store).add(rows, now=now)


def last_triaged(store: Any, key: tuple[str | None, str, str], since: Any) -> Any:
    """The newest stored alert that started a triage of `key` since `since` (None: none)."""
    return AlertLog(store).last_triaged(*key, since=since)
