"""A GitOps tool for the stand-in API server: it re-applies a whole stored manifest on a timer,
whatever was written in between, as Argo CD's self-heal (or Flux's reconcile interval) does.

Unlike a `Reverter` (one field, put back a delay after someone else's write), a `GitOpsTimer`
syncs every `interval_s` seconds of the stand-in's clock from the first time the stand-in
looks at it (the next request after it is added): each sync sets
the object's spec (and the manifest's labels and annotations) to the manifest's, under its own
field manager (`argocd-controller` by default), so managedFields name it as the owner of every
field it put back. A sync that finds nothing to change writes nothing (no new resourceVersion),
as the real server answers a no-op. With `application` (namespace, name) it syncs only while
that Argo CD Application, as the stand-in stores it, has `spec.syncPolicy.automated.selfHeal`
true: turning self-heal off in the Application stops it.

Hooked into `FakeKube.timers`; a test moves the clock (`ManualClock`) and the stand-in runs the
syncs that fall due before it answers the next request.

>>> from tests.support.fake_kube import FakeKube, ManualClock
>>> kube = FakeKube(clock=ManualClock())
>>> kube.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}})
>>> timer = GitOpsTimer("ConfigMap", "n", "c", {"metadata": {"labels": {"team": "llm"}}}, interval_s=60)
>>> kube.timers.append(timer); kube.reconcile()  # its clock starts at the stand-in's next look
>>> kube.clock.advance(61); kube.reconcile()
>>> kube.get("ConfigMap", "n", "c")["metadata"]["labels"], timer.syncs, timer.writes
({'team': 'llm'}, 1, 1)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from tests.support import fake_kube_rules as rules


@dataclass
class GitOpsTimer:
    """Re-applies `manifest` (its `spec`, `metadata.labels`, `metadata.annotations`) to the
    stored `kind` `namespace`/`name` every `interval_s`, writing as `manager`."""

    kind: str
    namespace: str
    name: str
    manifest: dict[str, Any]
    interval_s: float = 180.0
    manager: str = "argocd-controller"
    #: (namespace, name) of the Argo CD Application whose selfHeal switches the syncs; None: always
    application: tuple[str, str] | None = None
    #: syncs run (each due time passed), writes they made (a sync that changes nothing writes nothing)
    syncs: int = 0
    writes: int = 0
    #: the stand-in's answer to a sync it refused (a 422 from validation), newest last
    refusals: list[dict[str, Any]] = field(default_factory=list)
    _next: float | None = None

    def due(self, kube: Any) -> float | None:
        """When the next sync runs (the first `interval_s` after the timer is first asked)."""
        if self._next is None:
            self._next = kube.now() + self.interval_s
        return self._next

    def self_heal(self, kube: Any) -> bool:
        """Whether the Application (as stored now) has automated.selfHeal on; True with none named."""
        if self.application is None:
            return True
        group, _v, resource, _n = rules.KINDS["Application"]
        app = kube.get_object(group, resource, *self.application)  # no reconcile: it runs inside one
        automated = (((app or {}).get("spec") or {}).get("syncPolicy") or {}).get("automated")
        return isinstance(automated, dict) and automated.get("enabled", True) is not False \
            and automated.get("selfHeal") is True

    def fire(self, kube: Any, t: float) -> None:
        self._next = t + self.interval_s
        self.syncs += 1
        if not self.self_heal(kube):
            return
        group, version, resource, _namespaced = rules.KINDS[self.kind]
        stored = kube.get_object(group, resource, self.namespace, self.name)
        if stored is None:
            return
        before = stored["metadata"].get("resourceVersion")

        def reapply(current: dict[str, Any]) -> dict[str, Any]:
            if "spec" in self.manifest:
                current["spec"] = copy.deepcopy(self.manifest["spec"])
            meta = self.manifest.get("metadata") or {}
            for key in ("labels", "annotations"):
                if meta.get(key):
                    current["metadata"].setdefault(key, {}).update(copy.deepcopy(meta[key]))
            return current

        manager, kube.manager = kube.manager, self.manager
        try:
            kube._update(self.kind, group, version, resource, self.namespace, self.name, None, reapply, "patch", False)
        except rules.Refusal as refusal:
            self.refusals.append(refusal.body)
            return
        finally:
            kube.manager = manager
        after = kube.get_object(group, resource, self.namespace, self.name)
        if after is not None and after["metadata"].get("resourceVersion") != before:
            self.writes += 1
