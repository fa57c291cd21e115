"""The fleet view's ranking (`gpumem fleet`): which deployments are closest to trouble. Pure.

Each reading of a service is set against the runbook's line for it (`runbooks.catalogs.thresholds`,
and the alert rules' own counts, `runbooks.alerts.rules`):

| reading | line |
| --- | --- |
| KV-cache usage now, and its most over the window | 0.90 (KV_USAGE_HIGH_RATIO) |
| requests waiting now | 12 (QUEUE_DEPTH_ALERT) |
| preemptions / retractions over the window | 1 (the alert fires on any) |
| OOM kills over the window | 1 (the alert fires on any) |
| restarts over the window | 2 (the restart-burst alert: more than 1) |
| GPU memory used, engines that do not preallocate | 0.95 (GPU_MEM_ALERT_RATIO, as GpumemGPUMemoryHigh) |
| TTFT p99 | 2 s (TTFT_P99_SLOW_S) |
| long-request share (L+XL) | 0.30 (LONG_SHARE_HIGH) |
| its jump between the window's first and last quarter hour | 0.15 (LONG_SHARE_SHIFT) |

The scoring rule: a reading's closeness is `value / line` (a negative jump counts 0), so 1.0
is at the line and above 1.0 past it; for ranking it is capped at 2.0 (`CAP`: twice the line
is far past it, whether 2 OOM kills or 90 preemptions). A service's score is its largest capped
closeness; services are ranked by score (highest first), then by how many readings are at or
past their line, then by the sum of their capped closenesses, then by namespace and name. A
reading not read (its query failed) or that the engine does not export takes no part.

>>> a = Service("llm", "chat", ("vllm",), {"kv_now": 0.45, "queue": 18})
>>> b = Service("llm", "code", ("sglang",), {"kv_now": 0.99})
>>> [(r.target, r.score, r.top) for r in rank([a, b])]
[('llm/chat', 1.5, 'queue'), ('llm/code', 1.1, 'kv_now')]
>>> rank([a, b])[0].command
'gpumem triage llm/chat'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from runbooks.alerts.engines import SERIES
from runbooks.alerts.rules import RESTART_BURST_COUNT
from runbooks.catalogs import thresholds as T

#: the columns of the view, in the order they are shown
COLUMNS = ("kv_now", "kv_max", "queue", "preemptions", "oom_kills", "restarts", "gpu_used", "ttft_p99",
           "long_share", "long_jump")
#: column -> the runbook's line for it
LINES: dict[str, float] = {
    "kv_now": T.KV_USAGE_HIGH_RATIO,
    "kv_max": T.KV_USAGE_HIGH_RATIO,
    "queue": float(T.QUEUE_DEPTH_ALERT),
    "preemptions": 1.0,
    "oom_kills": 1.0,
    "restarts": float(RESTART_BURST_COUNT + 1),
    "gpu_used": T.GPU_MEM_ALERT_RATIO,
    "ttft_p99": T.TTFT_P99_SLOW_S,
    "long_share": T.LONG_SHARE_HIGH,
    "long_jump": T.LONG_SHARE_SHIFT,
}
#: how a column's value reads: a share of 1 (shown as a percentage), a count, seconds
UNITS: dict[str, str] = {
    "kv_now": "ratio", "kv_max": "ratio", "queue": "count", "preemptions": "count", "oom_kills": "count",
    "restarts": "count", "gpu_used": "ratio", "ttft_p99": "seconds", "long_share": "ratio", "long_jump": "ratio",
}
#: closeness above this counts as this much in the ranking
CAP = 2.0
#: the engine series a column needs; an engine without them shows the column as not exported
_NEEDS = {"preemptions": "preemptions", "ttft_p99": "ttft_buckets"}


@dataclass(frozen=True)
class Service:
    """One deployment (or StatefulSet) as Prometheus sees it: its engines and the values read."""

    namespace: str
    deployment: str
    engines: tuple[str, ...] = ()
    values: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Reading:
    column: str
    value: float
    line: float

    @property
    def closeness(self) -> float:
        """value / line, rounded to 4 places; a negative value (a falling share) counts 0."""
        return round(max(self.value, 0.0) / self.line, 4)

    @property
    def at_line(self) -> bool:
        return self.closeness >= 1.0

    @property
    def weight(self) -> float:
        """The closeness as the ranking counts it (at most CAP)."""
        return min(self.closeness, CAP)


@dataclass(frozen=True)
class Ranked:
    """A service with its readings against the runbook's lines, as the view shows it."""

    rank: int
    namespace: str
    deployment: str
    engines: tuple[str, ...]
    readings: tuple[Reading, ...]
    #: columns this service's engines do not export (TGI: no preemptions, no TTFT histogram)
    not_exported: tuple[str, ...]
    score: float
    at_line: int
    #: the column of the largest closeness (None when nothing was read)
    top: str | None

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.deployment}"

    @property
    def command(self) -> str:
        """What to run next for this service."""
        return f"gpumem triage {self.target}"

    def reading(self, column: str) -> Reading | None:
        return next((r for r in self.readings if r.column == column), None)


def not_exported(engines: Iterable[str]) -> tuple[str, ...]:
    """Columns that none of `engines` exports (all engines must lack it; no engine: none)."""
    known = [SERIES[e] for e in engines if e in SERIES]
    if not known:
        return ()
    return tuple(c for c, attr in _NEEDS.items() if all(getattr(s, attr) is None for s in known))


def score(service: Service) -> Ranked:
    """The readings of one service against their lines (rank 0: not placed yet)."""
    missing = not_exported(service.engines)
    readings = tuple(Reading(c, float(service.values[c]), LINES[c]) for c in COLUMNS
                     if c in service.values and c not in missing)
    best = max(readings, key=lambda r: r.closeness, default=None)
    return Ranked(0, service.namespace, service.deployment, service.engines, readings, missing,
                  best.weight if best else 0.0, sum(r.at_line for r in readings),
                  best.column if best else None)


def _key(r: Ranked) -> tuple:
    return (-r.score, -r.at_line, -round(sum(x.weight for x in r.readings), 4), r.namespace, r.deployment)


def rank(services: Iterable[Service], top: int | None = None) -> tuple[Ranked, ...]:
    """Services closest to trouble first (the module's scoring rule); the first `top` if given."""
    ordered = sorted((score(s) for s in services), key=_key)
    if top is not None:
        ordered = ordered[:top]
    return tuple(replace(r, rank=i) for i, r in enumerate(ordered, 1))
