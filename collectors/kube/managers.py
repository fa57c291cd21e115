"""Who manages a workload besides whoever runs `kubectl`: read from the object itself (its
ownerReferences, labels, annotations and metadata.managedFields), plus, for Argo CD, the
Application's sync policy when it can be read.

Pure over the object dict (`managers_of`: any dict in, a tuple out, never a traceback); the one
read is `with_sync_policy` (argoproj.io/v1alpha1 applications, through an `ObjectReader`'s
connection). The names are the tools' own:

- Argo CD: the annotation `argocd.argoproj.io/tracking-id` (`APP:GROUP/KIND:NAMESPACE/NAME`, the
  APP part `NAMESPACE_APP` for Applications outside the Argo CD namespace), the label
  `app.kubernetes.io/instance` (label tracking; counted only with another Argo CD signal, since
  Helm charts set it too) or `argocd.argoproj.io/instance`, managedFields managers
  `argocd-controller` (server-side apply) and `argocd-application-controller`.
- Flux: the labels `kustomize.toolkit.fluxcd.io/name` + `/namespace` (a Kustomization) and
  `helm.toolkit.fluxcd.io/name` + `/namespace` (a HelmRelease); managers `kustomize-controller`,
  `helm-controller`.
- Helm: the label `app.kubernetes.io/managed-by: Helm`, the annotations
  `meta.helm.sh/release-name` and `meta.helm.sh/release-namespace`.
- an owning controller: an ownerReference with `controller: true` (a KServe InferenceService, a
  LeaderWorkerSet, a KubeAI Model, a RayService), except the ordinary ones (a ReplicaSet's
  Deployment, a Pod's ReplicaSet).
- server-side apply: a managedFields entry with operation Apply by a manager that is not kubectl
  or gpumem.

>>> obj = {"kind": "Deployment", "metadata": {"annotations": {
...     "argocd.argoproj.io/tracking-id": "llm-serving:apps/Deployment:llm/vllm"}}}
>>> [(m.kind, m.name) for m in managers_of(obj)]
[('argocd', 'llm-serving')]
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runbooks.model.errors import NotPermitted, TargetNotFound
from runbooks.model.managers import GITOPS, Manager, ManagerKind, blocks_writes

if TYPE_CHECKING:
    from collectors.kube.rest import KubeRest

__all__ = ["GITOPS", "Manager", "ManagerKind", "blocks_writes", "managers_of", "with_sync_policy"]

TRACKING_ID = "argocd.argoproj.io/tracking-id"
INSTANCE_LABEL = "app.kubernetes.io/instance"
ARGOCD_INSTANCE_LABEL = "argocd.argoproj.io/instance"
ARGOCD_MANAGERS = ("argocd-controller", "argocd-application-controller")
FLUX_LABELS = (("kustomize.toolkit.fluxcd.io", "Kustomization"), ("helm.toolkit.fluxcd.io", "HelmRelease"))
FLUX_MANAGERS = {"kustomize-controller": "Kustomization", "helm-controller": "HelmRelease"}
MANAGED_BY = "app.kubernetes.io/managed-by"
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
#: field managers that are a person or gpumem itself, not another controller
PEOPLE = ("kubectl", "gpumem", "k9s", "Mozilla", "OpenAPI-Generator")
#: (the object's kind, its controller owner's kind) that are how Kubernetes itself works
ORDINARY_OWNERS = frozenset({("ReplicaSet", "Deployment"), ("Pod", "ReplicaSet"), ("Pod", "StatefulSet"),
                             ("Pod", "DaemonSet"), ("Pod", "Job"), ("Job", "CronJob")})
#: the namespace Argo CD runs in unless the config says otherwise
ARGOCD_NAMESPACE = "argocd"


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def managers_of(obj: Any) -> tuple[Manager, ...]:
    """Every manager `obj` (a Kubernetes object as JSON) names, controller owners first, then
    Argo CD, Flux, Helm and other server-side-apply managers; one per (kind, name)."""
    if not isinstance(obj, dict):
        return ()
    meta = _map(obj.get("metadata"))
    labels = {k: v for k, v in _map(meta.get("labels")).items() if isinstance(k, str) and isinstance(v, str)}
    notes = {k: v for k, v in _map(meta.get("annotations")).items() if isinstance(k, str) and isinstance(v, str)}
    fields = [_map(f) for f in _list(meta.get("managedFields"))]
    field_managers = [(str(f.get("manager") or ""), str(f.get("operation") or "")) for f in fields]
    out: list[Manager] = []
    out += _owners(str(obj.get("kind") or ""), meta)
    out += _argocd(labels, notes, field_managers)
    out += _flux(labels, field_managers)
    out += _helm(labels, notes)
    out += _ssa(field_managers, {m.kind for m in out})
    seen: set[tuple[str, str]] = set()
    unique = []
    for m in out:
        if (m.kind, m.name) not in seen:
            seen.add((m.kind, m.name))
            unique.append(m)
    return tuple(unique)


def _owners(kind: str, meta: dict[str, Any]) -> list[Manager]:
    out = []
    for ref in _list(meta.get("ownerReferences")):
        ref = _map(ref)
        if ref.get("controller") is not True:
            continue
        owner = _text(ref.get("kind")) or "?"
        if (kind, owner) in ORDINARY_OWNERS:
            continue
        name = _text(ref.get("name")) or "?"
        out.append(Manager("controller", name, f"ownerReference {owner}/{name} (controller: true)",
                           namespace=_text(meta.get("namespace")), owner_kind=owner,
                           api_version=_text(ref.get("apiVersion"))))
    return out


def _argocd(labels: dict[str, str], notes: dict[str, str], field_managers: list[tuple[str, str]]) -> list[Manager]:
    tracking = notes.get(TRACKING_ID)
    by_field = next((m for m, _op in field_managers if m in ARGOCD_MANAGERS), None)
    other_signal = by_field or any(k.startswith("argocd.argoproj.io/") for k in (*labels, *notes))
    if tracking:
        app = tracking.split(":", 1)[0]
        namespace, _, name = app.rpartition("_") if "_" in app else ("", "", app)
        return [Manager("argocd", name or app, f"annotation {TRACKING_ID}={tracking}", namespace=namespace or None)]
    if labels.get(ARGOCD_INSTANCE_LABEL):
        return [Manager("argocd", labels[ARGOCD_INSTANCE_LABEL],
                        f"label {ARGOCD_INSTANCE_LABEL}={labels[ARGOCD_INSTANCE_LABEL]}")]
    if labels.get(INSTANCE_LABEL) and other_signal:
        why = f"managedFields manager {by_field}" if by_field else "argocd.argoproj.io/ annotations"
        return [Manager("argocd", labels[INSTANCE_LABEL], f"label {INSTANCE_LABEL}={labels[INSTANCE_LABEL]} with {why}")]
    if by_field:
        return [Manager("argocd", "?", f"managedFields manager {by_field}")]
    return []


def _flux(labels: dict[str, str], field_managers: list[tuple[str, str]]) -> list[Manager]:
    out = []
    for prefix, kind in FLUX_LABELS:
        name = labels.get(f"{prefix}/name")
        if name:
            namespace = labels.get(f"{prefix}/namespace")
            out.append(Manager("flux", name, f"labels {prefix}/name={name}, {prefix}/namespace={namespace or '-'}",
                               namespace=namespace, owner_kind=kind))
    if not out:
        for manager, _op in field_managers:
            if manager in FLUX_MANAGERS:
                out.append(Manager("flux", "?", f"managedFields manager {manager}", owner_kind=FLUX_MANAGERS[manager]))
                break
    return out


def _helm(labels: dict[str, str], notes: dict[str, str]) -> list[Manager]:
    release = notes.get(HELM_RELEASE)
    by_label = labels.get(MANAGED_BY, "").lower() == "helm"
    if not release and not by_label:
        return []
    said = [f"annotation {HELM_RELEASE}={release}"] if release else []
    if by_label:
        said.append(f"label {MANAGED_BY}={labels[MANAGED_BY]}")
    name = release or labels.get(INSTANCE_LABEL) or "?"
    return [Manager("helm", name, ", ".join(said), namespace=notes.get(HELM_NAMESPACE))]


def _ssa(field_managers: list[tuple[str, str]], found: set[str]) -> list[Manager]:
    out = []
    for manager, operation in field_managers:
        if operation != "Apply" or not manager or manager.startswith(PEOPLE):
            continue
        if manager in ARGOCD_MANAGERS or manager in FLUX_MANAGERS:
            continue  # said as Argo CD / Flux above
        out.append(Manager("ssa", manager, f"managedFields manager {manager} (operation Apply)"))
    return out


def application_path(namespace: str, name: str) -> str:
    from collectors.kube.rest import path  # with the client: see with_sync_policy

    return path("apis", "argoproj.io", "v1alpha1", "namespaces", namespace, "applications", name)


def sync_policy(app: Any) -> tuple[bool, bool]:
    """(automated, selfHeal) of an Argo CD Application as JSON; `automated: {enabled: false}`
    (Argo CD 3) is not automated.

    >>> sync_policy({"spec": {"syncPolicy": {"automated": {"selfHeal": True}}}})
    (True, True)
    >>> sync_policy({"spec": {"syncPolicy": {}}})
    (False, False)
    """
    policy = _map(_map(_map(app).get("spec")).get("syncPolicy"))
    automated = policy.get("automated")
    if not isinstance(automated, dict) or automated.get("enabled") is False:
        return False, False
    return True, automated.get("selfHeal") is True


def with_sync_policy(managers: tuple[Manager, ...], rest: KubeRest | None, argocd_namespace: str = ARGOCD_NAMESPACE,
                     timeout_s: float = 10.0) -> tuple[Manager, ...]:
    """`managers` with each Argo CD Application's sync policy read (in its own namespace when the
    tracking id names one, else `argocd_namespace`); a 403 or 404 or no answer leaves it
    unknown, with the reason (`sync_unknown`), never a guess."""
    # the Kubernetes client is imported here, where a cluster is read: it costs 0.3-0.5 s
    # (-X importtime), which an offline triage of a bundle (managers_of alone) does not pay
    from collectors.kube.client import Call
    from collectors.kube.objects import typed

    out = []
    for m in managers:
        if m.kind != "argocd":
            out.append(m)
            continue
        if rest is None or m.name == "?":
            out.append(replace(m, sync_unknown="unreadable"))
            continue
        namespace = m.namespace or argocd_namespace
        call = Call("get", "applications", namespace, m.name, group="argoproj.io")
        try:
            try:
                app = rest.get_json(application_path(namespace, m.name), timeout_s=timeout_s)
            except Exception as e:
                raise typed(e, call, timeout_s) from e
        except NotPermitted:
            out.append(replace(m, namespace=namespace, sync_unknown="forbidden"))
            continue
        except TargetNotFound:
            out.append(replace(m, namespace=namespace, sync_unknown="not_found"))
            continue
        except Exception:  # no answer, a non-JSON body: unknown, said as such
            out.append(replace(m, namespace=namespace, sync_unknown="unreadable"))
            continue
        automated, self_heal = sync_policy(app)
        out.append(replace(m, namespace=namespace, automated=automated, self_heal=self_heal))
    return tuple(out)
