"""The config's `alerts:` section: how an Alertmanager alert becomes a triage in a channel.

    alerts:
      labels:                              # the alert labels gpumem reads (defaults shown)
        namespace: namespace
        deployment: deployment
        pod: pod                           # used when there is no deployment label
        cluster: cluster                   # a configured cluster's name or kube context
        severity: severity
      routes:                              # first match wins; an absent field matches anything
        - {namespace: llm, severity: critical, channel: C0PAGES}
        - {cluster: prod-b, channel: C0PRODB}
      default_channel: C0INCIDENT          # when no route matches (none: the alert is only recorded)
      triage_interval_s: 1800              # a target is triaged at most once per this long
      max_triages: 4                       # alert triages running or queued at once (default: workers.pool_size)
      dedupe_window_s: 86400               # an alert (fingerprint, start, status) seen again within this is a duplicate
      queue_length: 256                    # webhook requests accepted and not yet worked through

The bearer token (or basic-auth password) comes from GPUMEM_WEBHOOK_TOKEN or the file
GPUMEM_WEBHOOK_TOKEN_FILE names, never from this file; without one the endpoint is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from yaml.nodes import SequenceNode

from bot.config.yaml_io import YamlDoc

#: what a route may match on
ROUTE_FIELDS = ("namespace", "cluster", "severity")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_CHANNEL = re.compile(r"[CGD][A-Z0-9]{2,}")


@dataclass(frozen=True)
class AlertLabels:
    namespace: str = "namespace"
    deployment: str = "deployment"
    pod: str = "pod"
    cluster: str = "cluster"
    severity: str = "severity"


@dataclass(frozen=True)
class AlertRoute:
    """Alerts whose labels match every given field go to `channel`; a field may list several values."""

    channel: str
    namespace: tuple[str, ...] = ()
    cluster: tuple[str, ...] = ()
    severity: tuple[str, ...] = ()

    def matches(self, namespace: str | None, cluster: str | None, severity: str | None) -> bool:
        for wanted, value in ((self.namespace, namespace), (self.cluster, cluster), (self.severity, severity)):
            if wanted and value not in wanted:
                return False
        return True


@dataclass(frozen=True)
class AlertSettings:
    labels: AlertLabels = field(default_factory=AlertLabels)
    routes: tuple[AlertRoute, ...] = ()
    default_channel: str | None = None
    triage_interval_s: float = 1800.0
    #: alert-started triages running or waiting at once; None: the pool's size
    max_triages: int | None = None
    dedupe_window_s: float = 86400.0
    queue_length: int = 256
    #: the webhook's bearer token / basic-auth password (a `bot.config.settings.Secret`); None: refused
    token: Any = None

    def channel_for(self, namespace: str | None, cluster: str | None, severity: str | None) -> str | None:
        """The first matching route's channel, else the default one (None: nowhere)."""
        for route in self.routes:
            if route.matches(namespace, cluster, severity):
                return route.channel
        return self.default_channel


def alert_settings(doc: YamlDoc) -> AlertSettings:
    at = ("alerts",)
    doc.only_keys(at, ("labels", "routes", "default_channel", "triage_interval_s", "max_triages",
                       "dedupe_window_s", "queue_length", "token", "token_file"))
    for key in ("token", "token_file"):
        if doc.has((*at, key)):
            doc.fail((*at, key), "the webhook's token does not belong in the config file; set GPUMEM_WEBHOOK_TOKEN "
                                 "or GPUMEM_WEBHOOK_TOKEN_FILE (a mounted secret file)")
    names = {}
    doc.only_keys((*at, "labels"), tuple(f for f in AlertLabels.__dataclass_fields__))
    for key in AlertLabels.__dataclass_fields__:
        value = doc.opt_str((*at, "labels", key))
        if value is not None:
            if not _LABEL.fullmatch(value):
                doc.fail((*at, "labels", key), f"{value!r} is not a Prometheus label name")
            names[key] = value
    routes = []
    for i in range(doc.list_len((*at, "routes"))):
        where = (*at, "routes", i)
        doc.only_keys(where, ("channel", *ROUTE_FIELDS))
        channel = doc.opt_str((*where, "channel"))
        if not channel:
            doc.fail(where, "each route needs a channel (the Slack channel id, C...)")
        _check_channel(doc, (*where, "channel"), str(channel))
        matches = {}
        for key in ROUTE_FIELDS:
            node_path = (*where, key)
            if not doc.has(node_path):
                continue
            if isinstance(doc._node(node_path), SequenceNode):
                values = doc.str_list(node_path)
            else:
                one = doc.opt_str(node_path)
                values = (one,) if one else ()
            if not values:
                doc.fail(node_path, "empty: leave the field out to match anything")
            matches[key] = values
        routes.append(AlertRoute(channel=str(channel), **matches))
    default = doc.opt_str((*at, "default_channel"))
    if default:
        _check_channel(doc, (*at, "default_channel"), default)
    floats = doc.floats(at, AlertSettings(), only=("triage_interval_s", "dedupe_window_s"))
    ints = doc.ints(at, AlertSettings(), only=("max_triages", "queue_length"))
    return AlertSettings(labels=AlertLabels(**names), routes=tuple(routes), default_channel=default,
                         triage_interval_s=floats.get("triage_interval_s", 1800.0),
                         max_triages=ints.get("max_triages"),
                         dedupe_window_s=floats.get("dedupe_window_s", 86400.0),
                         queue_length=ints.get("queue_length", 256))


def _check_channel(doc: YamlDoc, at: tuple, channel: str) -> None:
    if not _CHANNEL.fullmatch(channel):
        doc.fail(at, f"{channel!r} is not a Slack channel id (C..., G...; not a #name)")
