"""What live gathering read from Kubernetes for one workload, as the API sent it.

Plain dicts (camelCase, as `kubectl get -o json` shows them), log tails and /metrics texts,
plus a ReadIssue for everything that could not be read. Kept apart from collectors.kube.live
so turning a snapshot into evidence or bundle files does not load the Kubernetes client.

>>> LogTail("vllm-0", "vllm", previous=True, text="...").previous
True
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runbooks.model.evidence import ReadIssue

__all__ = ["KubeSnapshot", "LogTail", "Scrape"]


@dataclass(frozen=True)
class LogTail:
    """The tail of one container's log (`previous`: the run before the last restart)."""

    pod: str
    container: str
    previous: bool
    text: str


@dataclass(frozen=True)
class Scrape:
    """One pod's /metrics text and where it was read."""

    pod: str
    url: str
    text: str


@dataclass(frozen=True)
class KubeSnapshot:
    """What was read, as the API sent it (plain dicts, camelCase), plus every failure."""

    namespace: str
    name: str
    kind: str
    server: str
    context: str | None
    collected_at: datetime
    workload: dict[str, Any] | None = None
    replica_sets: tuple[dict[str, Any], ...] = ()
    pods: tuple[dict[str, Any], ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    hpa: dict[str, Any] | None = None
    pdbs: tuple[dict[str, Any], ...] = ()
    services: tuple[dict[str, Any], ...] = ()
    ingresses: tuple[dict[str, Any], ...] = ()
    nodes: tuple[dict[str, Any], ...] = ()
    #: other pods asking for GPUs on those nodes, trimmed to name, owner, node, phase, resources
    node_pods: tuple[dict[str, Any], ...] = ()
    #: the server container's name in the pods
    container: str | None = None
    logs: tuple[LogTail, ...] = ()
    scrapes: tuple[Scrape, ...] = ()
    issues: tuple[ReadIssue, ...] = ()
    sources: tuple[str, ...] = ()
    #: API and HTTP calls started
    calls: int = 0
    #: the most calls that had to wait on one another (round trips in a row)
    depth: int = 0
    #: credentials are masked in every object, log, scrape and issue (`evidence.redact_snapshot`)
    redacted: bool = False
    #: the object that declares the workload's spec when a target named it (an InferenceService,
    #: a LeaderWorkerSet), as read; the server flags are read from it
    spec_owner: dict[str, Any] | None = None
    #: (kind, name) of the object whose controller writes the workload from its own spec, where
    #: the owner references say so (None: the workload is its own source of truth, or unknown)
    declared_in: tuple[str, str] | None = None
