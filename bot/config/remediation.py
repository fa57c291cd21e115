"""The config's `store:` and `remediation:` sections.

    store:
      path: /var/lib/gpumem/gpumem.db        # default: $XDG_STATE_HOME/gpumem/gpumem.db
    remediation:
      enabled: true                          # off unless turned on
      scopes:                                # where it is on (default: everywhere it is enabled)
        - {cluster: prod, namespace: llm}
      approvers:                             # namespace (or "*") -> Slack user ids / user-group ids
        llm: [U0123ABCD, S0SRE]
      four_eyes: true                        # whoever asked for a plan cannot approve it
      two_approvals_for: [split_pools]       # change kinds that need two approvals
      ttl_s: 900                             # a plan expires 15 minutes after it is made
      watch_s: 600                           # the watch window after a change
      auto_rollback: false                   # roll back a failed rollout by itself
      expiry_sweep_s: 60                     # how often the bot expires plans past their time
      stopgap_on_gitops: [llm]               # namespaces where a plan may patch what Argo CD/Flux/Helm manage
      argocd_namespace: argocd               # where Argo CD's Applications live (their sync policy is read)
      writer:                                # the least-privilege identity that writes
        kubeconfig: /etc/gpumem/writer/kubeconfig
        context: prod-writer
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from bot.config.yaml_io import YamlDoc
from runbooks.remediation.policy import ApprovalPolicy

_ID = ("U", "W", "S")  # Slack user ids (U, W for Enterprise Grid) and user-group ids (S)
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS-1123 label


@dataclass(frozen=True)
class StoreSettings:
    #: None: the default under $XDG_STATE_HOME
    path: str | None = None


@dataclass(frozen=True)
class WriterSettings:
    kubeconfig: str | None = None
    context: str | None = None


@dataclass(frozen=True)
class RemediationSettings:
    policy: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    watch_s: float = 600.0
    auto_rollback: bool = False
    writer: WriterSettings = field(default_factory=WriterSettings)
    #: how often `gpumem serve` (its scheduler's leader) expires the plans past their time
    expiry_sweep_s: float = 60.0
    #: namespaces ("*": all) where a plan may write a stop-gap to an object Argo CD, Flux or Helm
    #: manages (it lasts until the next sync); never to a controller-owned one
    stopgap_on_gitops: tuple[str, ...] = ()
    #: the namespace of Argo CD's Applications (an Application's own namespace when its tracking id names one)
    argocd_namespace: str = "argocd"

    @property
    def enabled(self) -> bool:
        return self.policy.enabled


def store_settings(doc: YamlDoc, base: Path) -> StoreSettings:
    doc.only_keys(("store",), ("path",))
    path = doc.opt_str(("store", "path"))
    return StoreSettings(path=str(base / os.path.expanduser(path)) if path else None)


def remediation_settings(doc: YamlDoc, base: Path) -> RemediationSettings:
    at = ("remediation",)
    doc.only_keys(at, ("enabled", "scopes", "approvers", "four_eyes", "two_approvals_for", "ttl_s", "watch_s",
                       "auto_rollback", "writer", "expiry_sweep_s", "stopgap_on_gitops",
                       "argocd_namespace"))
    stopgap = doc.str_list((*at, "stopgap_on_gitops"))
    for i, namespace in enumerate(stopgap):
        if namespace != "*" and not _NAMESPACE.match(namespace):
            doc.fail((*at, "stopgap_on_gitops", i),
                     f"{namespace!r} is not a namespace name: list namespaces (lowercase, digits, '-') or \"*\"")
    argocd_namespace = doc.opt_str((*at, "argocd_namespace")) or "argocd"
    if not _NAMESPACE.match(argocd_namespace):
        doc.fail((*at, "argocd_namespace"), f"{argocd_namespace!r} is not a namespace name")
    scopes = []
    for i in range(doc.list_len((*at, "scopes"))):
        where = (*at, "scopes", i)
        doc.only_keys(where, ("cluster", "namespace"))
        scopes.append((doc.opt_str((*where, "cluster")) or "*", doc.opt_str((*where, "namespace")) or "*"))
    approvers: dict[str, tuple[str, ...]] = {}
    for namespace in doc.keys((*at, "approvers")):
        ids = doc.str_list((*at, "approvers", namespace))
        bad = [i for i in ids if not i.startswith(_ID)]
        if bad:
            doc.fail((*at, "approvers", namespace),
                     f"{', '.join(bad)}: approvers are Slack user ids (U..., W...) or user-group ids (S...)")
        approvers[namespace] = ids
    numbers = doc.floats(at, RemediationSettings(), only=("watch_s", "expiry_sweep_s"))
    ttl = doc.ints(at, ApprovalPolicy(), only=("ttl_s",)).get("ttl_s", 900)  # the reader refuses 0 and below
    four_eyes = doc.opt_bool((*at, "four_eyes"))
    enabled = bool(doc.opt_bool((*at, "enabled")))
    if enabled and not approvers:
        doc.fail(at, "remediation is enabled but names no approvers: add approvers per namespace (or \"*\")")
    doc.only_keys((*at, "writer"), ("kubeconfig", "context"))
    writer_config = doc.opt_str((*at, "writer", "kubeconfig"))
    policy = ApprovalPolicy(enabled=enabled, approvers=MappingProxyType(approvers), scopes=tuple(scopes),
                            four_eyes=True if four_eyes is None else four_eyes,
                            two_approvals_for=doc.str_list((*at, "two_approvals_for")), ttl_s=ttl)
    return RemediationSettings(
        policy=policy, watch_s=numbers.get("watch_s", 600.0), auto_rollback=bool(doc.opt_bool((*at, "auto_rollback"))),
        expiry_sweep_s=numbers.get("expiry_sweep_s", 60.0), stopgap_on_gitops=stopgap, argocd_namespace=argocd_namespace,
        writer=WriterSettings(kubeconfig=str(base / writer_config) if writer_config else None,
                              context=doc.opt_str((*at, "writer", "context"))))


def store_path(settings_store: StoreSettings, environ: Mapping[str, str]) -> Path:
    """Where the store lives: the config's path, else the default under $XDG_STATE_HOME."""
    # lazy: bot.store.db brings sqlite_utils (~110 ms with -X importtime), which loading the
    # settings would otherwise cost every verb, those that never open the store too
    from bot.store.db import default_path

    return Path(settings_store.path) if settings_store.path else default_path(environ)
