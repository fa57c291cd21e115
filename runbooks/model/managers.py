"""Who manages a workload besides whoever runs kubectl, as the vocabulary plans and findings
share: `Manager` (read by `collectors.kube.managers`).

>>> blocks_writes(Manager("ssa", "platform-operator", "managedFields ..."))
False
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ManagerKind = Literal["controller", "argocd", "flux", "helm", "ssa"]
#: the managers whose source of truth is a manifest elsewhere (a per-namespace switch may allow a stop-gap)
GITOPS = ("argocd", "flux", "helm")


@dataclass(frozen=True)
class Manager:
    """One thing that manages the object: its kind, its name (the Application, the Flux object,
    the Helm release, the owner, the field manager) and what said so (`evidence`)."""

    kind: ManagerKind
    name: str
    evidence: str
    #: the Argo CD Application's, Flux object's or Helm release's namespace, where known
    namespace: str | None = None
    #: the owner's kind and apiVersion (controller), the Flux object's kind (flux)
    owner_kind: str | None = None
    api_version: str | None = None
    #: Argo CD's sync policy as read from the Application: None = not read (yet)
    automated: bool | None = None
    self_heal: bool | None = None
    #: why the sync policy is unknown: "forbidden" (403), "not_found" (404), "unreadable"
    sync_unknown: str | None = None

    @property
    def gitops(self) -> bool:
        return self.kind in GITOPS

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def to_stored(self) -> dict[str, Any]:  # `runbooks.model.serde`: the JSON shape, kept as is
        return self.to_json()

    @classmethod
    def from_stored(cls, doc: dict[str, Any]) -> Manager:
        known = {k: doc[k] for k in cls.__dataclass_fields__ if k in doc}
        return cls(**{"name": "?", "evidence": "", **known, "kind": str(doc.get("kind") or "ssa")})


def blocks_writes(manager: Manager) -> bool:
    """Whether a patch to the object would be undone by `manager`: a controller owner (at once),
    Argo CD or Flux (at the next sync), a Helm release (at the next upgrade). Another
    server-side-apply manager is named but does not block (it owns the fields it applies; a
    later apply of its own may take them back)."""
    return manager.kind in ("controller", "argocd", "flux", "helm")
