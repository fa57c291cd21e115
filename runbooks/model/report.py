"""The one message model every surface renders: findings, causes, verdict, report.

Runbooks never hold wording. A `Fact` is a message key plus values; the renderers in `bot/`
look the key up in the English or Chinese catalog. Keys are stable: tests check that every key
the runbooks can emit has wording in both catalogs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runbooks.model.budget import Budget
from runbooks.model.changes import Change
from runbooks.model.evidence import ReadIssue
from runbooks.model.lengths import RequestProfile
from runbooks.model.managers import Manager

#: causes in the runbook's root-cause matrix, in its order
CAUSE_IDS = (
    "weights_too_large",
    "kv_cache_pressure",
    "mixed_pool",
    "params_near_edge",
    "parallelism_misconfig",
    "platform_amplifier",
)
VERDICT_IDS = (*CAUSE_IDS, "healthy", "insufficient_evidence")

SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True)
class Fact:
    """One statement backed by evidence: a catalog key, its values, and where it came from.

    >>> f = Fact("gpu_mem_used", {"used_gib": 71.6, "total_gib": 80.0, "share_pct": 89.5}, source="nvidia-smi.txt")
    >>> f
    Fact(key='gpu_mem_used', params={'used_gib': 71.6, 'total_gib': 80.0, 'share_pct': 89.5}, source='nvidia-smi.txt')
    >>> f == fact("gpu_mem_used", "nvidia-smi.txt", used_gib=71.6, total_gib=80.0, share_pct=89.5)
    True
    """

    key: str
    params: dict[str, Any] = field(default_factory=dict)
    source: str | None = None


def fact(key: str, source: str | None = None, **params: Any) -> Fact:
    """Shorthand: `fact("kv_usage", "metrics.txt", usage_pct=98.3)`."""
    return Fact(key=key, params=params, source=source)


@dataclass(frozen=True)
class Finding:
    """What one check concluded. `supports` names the cause ids it is evidence for."""

    id: str
    round: int
    severity: str
    facts: tuple[Fact, ...] = ()
    supports: tuple[str, ...] = ()
    #: how strongly it points at its causes, 0..1 (severity alone is too coarse to rank)
    weight: float = 0.5


@dataclass(frozen=True)
class CheckResult:
    """One runbook round: its findings, the evidence it used and the evidence it lacked."""

    check: str
    round: int
    findings: tuple[Finding, ...] = ()
    used: tuple[str, ...] = ()
    missing: tuple[Fact, ...] = ()

    @property
    def checked(self) -> bool:
        return bool(self.used)


@dataclass(frozen=True)
class Action:
    """A next step. `tier`: "now" (on-call may do it), "escalate" (needs owners, load tests)."""

    id: str
    params: dict[str, Any] = field(default_factory=dict)
    tier: str = "now"
    #: exactly what applying it changes (empty: advice a person carries out, or escalate tier)
    changes: tuple[Change, ...] = ()


@dataclass(frozen=True)
class Cause:
    id: str
    confidence: float
    confidence_label: str
    evidence_for: tuple[Fact, ...] = ()
    evidence_against: tuple[Fact, ...] = ()
    rule_out: tuple[Fact, ...] = ()
    actions: tuple[Action, ...] = ()


@dataclass(frozen=True)
class Misjudgement:
    """A common wrong conclusion that this evidence contradicts."""

    id: str
    facts: tuple[Fact, ...] = ()


@dataclass(frozen=True)
class Verdict:
    primary: str
    causes: tuple[Cause, ...] = ()
    misjudgements: tuple[Misjudgement, ...] = ()
    #: the runbook's priority: highest (OOM restarting pods), high (rejects), medium, low
    priority: str = "low"
    #: what in the evidence sets the priority (a `priority_why` catalog key), None for "low"
    priority_why: str | None = None
    #: 0..1: how much of the evidence the runbook wants was there to look at
    evidence_coverage: float = 0.0
    #: the positive evidence a "healthy" verdict rests on (a serving engine within its lines,
    #: a busy GPU, ready pods without restarts); empty for every other verdict
    health_evidence: tuple[Fact, ...] = ()
    #: for insufficient_evidence: the files that would decide it, each with its command
    capture_next: tuple[Fact, ...] = ()
    #: whether the evidence shows Kubernetes (a workload, pods, events): the platform cause is
    #: worded as Kubernetes only then
    kubernetes: bool = True


@dataclass(frozen=True)
class MemorySplit:
    """Static (weights, runtime reserve, graphs) against dynamic (KV cache) memory, per GPU."""

    gpu_total_gib: float | None = None
    gpu_used_gib: float | None = None
    static_gib: float | None = None
    dynamic_gib: float | None = None
    weights_gib: float | None = None
    #: where the split came from: "engine_log" (what the engine printed) or "budget" (computed)
    basis: str = "budget"
    kv_cache_usage_ratio: float | None = None
    #: the KV pool in tokens the findings use: the engine's own figure (its /metrics or start-up
    #: log) where it reported one, else the budget's; `kv_tokens_measured` says which
    kv_cache_tokens: int | None = None
    kv_tokens_measured: bool = False


@dataclass(frozen=True)
class EdgeFlag:
    """A server flag at or past its safe edge, and the value the runbook would use."""

    flag: str
    value: str
    safe_value: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class Report:
    schema_version: int = 1
    target: str | None = None
    generated_at: datetime | None = None
    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    gpu: str | None = None
    verdict: Verdict = field(default_factory=lambda: Verdict(primary="insufficient_evidence"))
    memory: MemorySplit | None = None
    #: the capacity budget of the launch as configured (None: model, GPU or flags unknown)
    budget: Budget | None = None
    profile: RequestProfile | None = None
    flags_at_edge: tuple[EdgeFlag, ...] = ()
    checks: tuple[CheckResult, ...] = ()
    actions: tuple[Action, ...] = ()
    read_issues: tuple[ReadIssue, ...] = ()
    sources: tuple[str, ...] = ()
    #: who manages the workload besides kubectl (a controller owner, Argo CD, Flux, Helm,
    #: server-side apply); None: not read (a bundle or manifest without the live object)
    managers: tuple[Manager, ...] | None = None
    #: the Kubernetes kind of the object `target` names (Deployment, StatefulSet,
    #: InferenceService, LeaderWorkerSet); None: not read
    target_kind: str | None = None

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for c in self.checks for f in c.findings)

    @property
    def not_checked(self) -> tuple[Fact, ...]:
        """What no round could check, each once (several rounds lack the same evidence)."""
        seen: dict[tuple, Fact] = {}
        for c in self.checks:
            for m in c.missing:
                seen.setdefault((m.key, m.source, tuple(sorted(map(str, m.params.items())))), m)
        return tuple(seen.values())
