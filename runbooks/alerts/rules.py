"""The runbook's alerts as Prometheus rules, per engine, for the series each engine exports.

One group per engine (KV cache above 90% for 10 minutes, queue above 12 for 10 minutes,
preemptions or retractions in every 5-minute window for 10 minutes, TTFT p99 above 2 s for 10
minutes, the long-request share jumping 15 points between the quarters gpumem triage compares)
and one group for what Kubernetes and DCGM say whatever the engine (a GPU pod OOMKilled, the
runbook's restart burst, GPU memory above 95% for 10 minutes on pods that run no engine which
preallocates it). Every alert is per workload and carries `gpumem: triage` plus the namespace
and deployment labels the webhook reads. The numbers are the runbook's
(`runbooks.catalogs.thresholds`); the wording is the renderer's, by `Rule.wording` key.

>>> rs = build_rules(("vllm",))
>>> [r.alert for r in rs.rules][:3]
['GpumemKVCacheHigh', 'GpumemQueueDeep', 'GpumemPreemptionsRising']
>>> sorted({r.group for r in rs.rules})
['gpumem-kubernetes', 'gpumem-vllm']
>>> [(s.engine, s.alert, s.reason) for s in rs.skipped]
[('vllm', 'GpumemGPUMemoryHigh', 'preallocates')]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runbooks.alerts import promql as q
from runbooks.alerts.engines import ENGINES, SERIES, EngineSeries, preallocating, presence
from runbooks.alerts.engines import EXPORTERS as X
from runbooks.catalogs import thresholds as T
from runbooks.profile.requests import BUCKET_LIMITS, SHIFT_MIN_PART

#: rule id -> alert name (stable: Alertmanager routes and silences name them)
ALERTS = {
    "kv_cache_high": "GpumemKVCacheHigh",
    "queue_deep": "GpumemQueueDeep",
    "preemptions_rising": "GpumemPreemptionsRising",
    "ttft_p99_high": "GpumemTTFTP99High",
    "long_share_jump": "GpumemLongShareJump",
    "oom_killed": "GpumemOOMKilled",
    "restart_burst": "GpumemRestartBurst",
    "gpu_memory_high": "GpumemGPUMemoryHigh",
}
ENGINE_RULES = ("kv_cache_high", "queue_deep", "preemptions_rising", "ttft_p99_high", "long_share_jump")
KUBERNETES_GROUP = "gpumem-kubernetes"

#: the window of rates and of the preemption count (gpumem's own live queries use 5 minutes)
RATE_WINDOW_S = 300
#: the runbook's restart alert (seed runbook 3.6, LLMOOMBurst): more than one restart in 10
#: minutes, for 5 minutes
RESTART_WINDOW_S = 600
RESTART_BURST_COUNT = 1
RESTART_BURST_FOR_S = 300
#: the long-share shift compares the first and the last quarter of an hour, as gpumem triage does
SHIFT_PART_S = 900
SHIFT_GAP_S = 2700
#: a request is long (L or XL) above the M bucket's input limit
LONG_INPUT_TOKENS = dict((b, i) for b, i, _ in BUCKET_LIMITS)["M"]
#: kube-state-metrics' resource label for GPUs and MIG slices (nvidia.com/gpu, nvidia.com/mig-*)
GPU_RESOURCE_RE = "nvidia_com_.+"
#: pods of the workloads gpumem triages
OWNER_KIND_RE = "ReplicaSet|StatefulSet"


@dataclass(frozen=True)
class Rule:
    """One alerting rule; `wording` names its summary and description in the catalogs."""

    id: str
    alert: str
    group: str
    engine: str | None
    expr: str
    for_s: int
    severity: str
    #: how the renderer shows `$value`: ratio (a percentage), count, seconds
    value: str
    wording: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def anchor(self) -> str:
        """The README heading this rule's runbook link points at."""
        return self.alert.lower()


@dataclass(frozen=True)
class Skipped:
    """A rule an engine does not get, and why (a catalog key under rules_cli.missing)."""

    engine: str
    alert: str
    reason: str


@dataclass(frozen=True)
class RuleSet:
    engines: tuple[str, ...]
    namespace_label: str
    deployment_label: str
    rules: tuple[Rule, ...]
    skipped: tuple[Skipped, ...]
    #: rules written that fire only from some version of the engine (reason: a catalog key
    #: under rules_cli.version)
    version_limited: tuple[Skipped, ...] = ()

    def groups(self) -> dict[str, tuple[Rule, ...]]:
        """group name -> its rules, in the order they were built."""
        out: dict[str, list[Rule]] = {}
        for r in self.rules:
            out.setdefault(r.group, []).append(r)
        return {g: tuple(rs) for g, rs in out.items()}


def build_rules(engines: tuple[str, ...], namespace_label: str = "namespace",
                deployment_label: str = "deployment") -> RuleSet:
    """The rules for `engines` (a subset of ENGINES, in that order) and the Kubernetes group.

    The label names must be valid (`promql.is_label_name`), distinct, and not ones the rules
    read or set themselves (`RESERVED_LABELS`); the caller checks, this raises ValueError.
    """
    for name in (namespace_label, deployment_label):
        if not q.is_label_name(name) or name in RESERVED_LABELS:
            raise ValueError(f"label name {name!r} cannot carry the workload")
    if namespace_label == deployment_label:
        raise ValueError("the namespace and deployment labels must differ")
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise ValueError(f"engines must be among {ENGINES}: {engines!r}")
    b = _Builder(namespace_label, deployment_label)
    rules: list[Rule] = []
    skipped: list[Skipped] = []
    limited: list[Skipped] = []
    chosen = tuple(e for e in ENGINES if e in engines)
    for engine in chosen:
        s = SERIES[engine]
        for rule_id in ENGINE_RULES:
            if rule_id in s.missing:
                skipped.append(Skipped(engine, ALERTS[rule_id], s.missing[rule_id]))
                continue
            rules.append(getattr(b, rule_id)(s))
            if rule_id in s.version_limits:
                limited.append(Skipped(engine, ALERTS[rule_id], s.version_limits[rule_id]))
        if s.preallocates:
            skipped.append(Skipped(engine, ALERTS["gpu_memory_high"], "preallocates"))
    rules.extend((b.oom_killed(), b.restart_burst(), b.gpu_memory_high()))
    return RuleSet(chosen, namespace_label, deployment_label, tuple(rules), tuple(skipped), tuple(limited))


#: labels the rules read from series or set on alerts: the workload labels cannot be one of them
RESERVED_LABELS = frozenset({"alertname", "severity", "gpumem", "engine", "pod", "le", "container"})


def _minutes(seconds: int) -> int:
    return seconds // 60


class _Builder:
    def __init__(self, namespace_label: str, deployment_label: str):
        self.by = f"{namespace_label}, {deployment_label}"
        self._ns, self._dep = namespace_label, deployment_label

    def _workload(self, expr: str) -> str:
        return q.workload(expr, self._ns, self._dep)

    def _engine_rule(self, s: EngineSeries, rule_id: str, expr: str, for_s: int, value: str,
                     wording: str | None = None, **params: Any) -> Rule:
        return Rule(rule_id, ALERTS[rule_id], f"gpumem-{s.engine}", s.engine, expr, for_s, "warning", value,
                    wording or rule_id, params)

    # ------------------------------------------------------------------ per engine

    def kv_cache_high(self, s: EngineSeries) -> Rule:
        if s.kv_usage is not None:
            usage, metrics = q.selector(s.kv_usage), s.kv_usage.replace("|", ", ")
        else:
            used, budget = s.kv_ratio
            usage = f"max by (namespace, pod) ({used}) / max by (namespace, pod) ({budget})"
            metrics = f"{used} / {budget}"
        expr = f"max by ({self.by}) (\n  {self._workload(usage)}\n) > {T.KV_USAGE_HIGH_RATIO:g}"
        return self._engine_rule(s, "kv_cache_high", expr, T.SUSTAINED_S, "ratio", metrics=metrics,
                                 threshold_pct=round(T.KV_USAGE_HIGH_RATIO * 100), minutes=_minutes(T.SUSTAINED_S))

    def queue_deep(self, s: EngineSeries) -> Rule:
        queue = s.queue
        if s.queue_distinct:
            queue = f"max by (namespace, pod, {', '.join(s.queue_distinct)}) ({queue})"
        expr = f"sum by ({self.by}) (\n  {self._workload(queue)}\n) > {T.QUEUE_DEPTH_ALERT}"
        return self._engine_rule(s, "queue_deep", expr, T.SUSTAINED_S, "count", metrics=s.queue,
                                 threshold=T.QUEUE_DEPTH_ALERT, minutes=_minutes(T.SUSTAINED_S))

    def preemptions_rising(self, s: EngineSeries) -> Rule:
        win = q.duration(RATE_WINDOW_S)
        expr = (f"sum by ({self.by}) (\n  {self._workload(f'increase({s.preemptions}[{win}])')}\n) > 0")
        metrics = s.preemptions
        if s.preemptions_gauge:
            older = self._workload(f"max_over_time({s.preemptions_gauge}[{win}])")
            expr += f"\nor\nmax by ({self.by}) (\n  {older}\n) > 0"
            metrics += f", {s.preemptions_gauge}"
        wording = "retractions_rising" if s.engine == "sglang" else "preemptions_rising"
        return self._engine_rule(s, "preemptions_rising", expr, T.SUSTAINED_S, "count", wording, metrics=metrics,
                                 window_minutes=_minutes(RATE_WINDOW_S), minutes=_minutes(T.SUSTAINED_S))

    def ttft_p99_high(self, s: EngineSeries) -> Rule:
        rate = self._workload(f"rate({s.ttft_buckets}[{q.duration(RATE_WINDOW_S)}])")
        expr = (f"histogram_quantile(0.99, sum by ({self.by}, le) (\n  {rate}\n)) > {T.TTFT_P99_SLOW_S:g}")
        return self._engine_rule(s, "ttft_p99_high", expr, T.SUSTAINED_S, "seconds", metrics=s.ttft_buckets,
                                 threshold_s=T.TTFT_P99_SLOW_S, window_minutes=_minutes(RATE_WINDOW_S),
                                 minutes=_minutes(T.SUSTAINED_S))

    def long_share_jump(self, s: EngineSeries) -> Rule:
        def count(le: str, offset: str) -> str:
            inc = f"increase({s.prompt_buckets}{{le=~{q.string(le)}}}[{q.duration(SHIFT_PART_S)}]{offset})"
            return self._workload(inc)

        def part(offset: str) -> tuple[str, str]:
            short = f"max by ({self.by}) (sum by ({self.by}, le) ({count(q.le_at_most(LONG_INPUT_TOKENS), offset)}))"
            total = f"sum by ({self.by}) ({count('[+]Inf', offset)})"
            return f"(1 - {short} / {total})", total

        now, now_total = part("")
        before, before_total = part(f" offset {q.duration(SHIFT_GAP_S)}")
        # the value is the share now; the jump is the condition
        expr = (f"{now}\n"
                f"and on ({self.by}) {now} - {before} >= {T.LONG_SHARE_SHIFT:g}\n"
                f"and on ({self.by}) {now_total} >= {SHIFT_MIN_PART}\n"
                f"and on ({self.by}) {before_total} >= {SHIFT_MIN_PART}")
        return self._engine_rule(s, "long_share_jump", expr, 0, "ratio", metrics=s.prompt_buckets,
                                 input_tokens=LONG_INPUT_TOKENS, shift_pct=round(T.LONG_SHARE_SHIFT * 100),
                                 part_minutes=_minutes(SHIFT_PART_S),
                                 gap_minutes=_minutes(SHIFT_GAP_S), min_requests=SHIFT_MIN_PART)

    # ------------------------------------------------------------------ Kubernetes and DCGM

    def _ksm(self, name: str, *matchers: str, wrap: str = "{}") -> str:
        return q.both(lambda m: wrap.format(q.selector(name, *matchers, *m)))

    def _serving_gpu_pods(self) -> str:
        gpu = self._ksm(X.resource_requests, f"resource=~{q.string(GPU_RESOURCE_RE)}")
        return f"and on (namespace, pod) {gpu}\nand on (namespace, pod) {self._owned()}"

    def _owned(self) -> str:
        return self._ksm(X.pod_owner, f"owner_kind=~{q.string(OWNER_KIND_RE)}")

    def _restarts(self) -> str:
        win = q.duration(RESTART_WINDOW_S)
        inc = self._ksm(X.restarts, wrap=f"increase({{}}[{win}])")
        return f"max by (namespace, pod, container) ({inc})"

    def oom_killed(self) -> Rule:
        oom = self._ksm(X.terminated_reason, 'reason="OOMKilled"')
        killed = (f"({self._restarts()} > 0\n"
                  f"and on (namespace, pod, container) max by (namespace, pod, container) ({oom}) == 1)\n"
                  f"{self._serving_gpu_pods()}")
        expr = f"sum by ({self.by}) (\n  {self._workload(killed)}\n) > 0"
        return Rule("oom_killed", ALERTS["oom_killed"], KUBERNETES_GROUP, None, expr, 0, "critical", "count",
                    "oom_killed", {"window_minutes": _minutes(RESTART_WINDOW_S)})

    def restart_burst(self) -> Rule:
        restarts = f"{self._restarts()}\n{self._serving_gpu_pods()}"
        expr = f"sum by ({self.by}) (\n  {self._workload(restarts)}\n) > {RESTART_BURST_COUNT}"
        return Rule("restart_burst", ALERTS["restart_burst"], KUBERNETES_GROUP, None, expr, RESTART_BURST_FOR_S,
                    "critical", "count", "restart_burst",
                    {"count": RESTART_BURST_COUNT, "window_minutes": _minutes(RESTART_WINDOW_S),
                     "minutes": _minutes(RESTART_BURST_FOR_S)})

    def gpu_memory_high(self) -> Rule:
        def ratio(m: tuple[str, ...]) -> str:
            used = q.selector(X.fb_used, *m)
            free = q.selector(X.fb_free, *m)
            reserved = q.selector(X.fb_reserved, *m)
            # FB_RESERVED may be missing (older exporters): total falls back to used + free
            return f"{used} / ({used} + {free} + ({reserved} or {used} * 0))"

        engines = preallocating()
        fullest = (f"max by (namespace, pod) ({q.both(ratio)})\n"
                   f"unless on (namespace, pod) {q.selector(presence(engines))}\n"
                   f"and on (namespace, pod) {self._owned()}")
        expr = f"max by ({self.by}) (\n  {self._workload(fullest)}\n) > {T.GPU_MEM_ALERT_RATIO:g}"
        return Rule("gpu_memory_high", ALERTS["gpu_memory_high"], KUBERNETES_GROUP, None, expr, T.SUSTAINED_S,
                    "warning", "ratio", "gpu_memory_high",
                    {"threshold_pct": round(T.GPU_MEM_ALERT_RATIO * 100), "minutes": _minutes(T.SUSTAINED_S),
                     "engines": engines})
