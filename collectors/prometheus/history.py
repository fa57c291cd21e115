"""A service's last window from Prometheus: GPU memory, restarts, queue, KV usage, TTFT, lengths.

`gather_history` sends a fixed set of queries (see `QUERY_KEYS`), all at once, whatever the
number of pods; each answer is turned into evidence by a pure function (`memory_from`,
`restarts_from`, ...). A query that fails leaves a ReadIssue (source "prometheus") and the
others still count.

>>> gather_history(PrometheusClient("http://127.0.0.1:9"), "llm", [], now=datetime(2026, 1, 1, tzinfo=UTC)).issues[0].kind
'skipped'
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

from collectors.errors import field, internal_error, said
from collectors.prometheus import promql as q
from collectors.prometheus.client import SOURCE, PrometheusClient, PrometheusError, PromSeries, QueryResult
from collectors.prometheus.lengths import profile_from_lengths
from runbooks.alerts.engines import SERIES
from runbooks.model.evidence import (
    MemoryHistory,
    MemoryPoint,
    MemorySeries,
    ReadIssue,
    ServiceHistory,
)
from runbooks.model.units import MIB

#: the queries gather_history sends, one each
QUERY_KEYS = ("memory", "restarts", "queue", "kv_usage", "preemptions", "ttft_p99", "lengths")
#: points per series when no step is given (Prometheus refuses more than 11,000)
_POINTS = 240
_MIN_STEP_S = 15
_RATE_WINDOW_S = 300
# kinds where every query fails alike: one issue says it
_SHARED_KINDS = ("unreachable", "forbidden", "not_found")


@dataclass(frozen=True)
class PrometheusHistory:
    """What Prometheus said about the service's last window; every part may be None."""

    memory: MemoryHistory | None = None
    service: ServiceHistory | None = None
    #: every restart of the pods' containers in the window (also on `memory` when it is there)
    restarts_at: tuple[datetime, ...] = ()
    oom_killed_at: tuple[datetime, ...] = ()
    #: "pod/container" whose last termination was OOMKilled, as kube-state-metrics last said
    oom_killed: tuple[str, ...] = ()
    queries: int = 0
    issues: tuple[ReadIssue, ...] = ()

    def evidence_fields(self) -> dict[str, Any]:
        """Evidence keyword arguments for what was found (memory_history, service_history, requests)."""
        out: dict[str, Any] = {}
        if self.memory is not None:
            out["memory_history"] = self.memory
        if self.service is not None:
            out["service_history"] = self.service
            if self.service.requests is not None:
                out["requests"] = self.service.requests
        return out


def default_step_s(window_s: float) -> float:
    """A step that gives about 240 points over the window, never under 15 s."""
    return float(max(_MIN_STEP_S, math.ceil(window_s / _POINTS)))


def gather_history(
    client: PrometheusClient,
    namespace: str,
    pods: Sequence[str],
    *,
    window_s: float = 3600,
    step_s: float | None = None,
    now: datetime,
    max_workers: int = len(QUERY_KEYS),
) -> PrometheusHistory:
    """Query the window [now - window_s, now] for these pods; never raises for Prometheus trouble.

    Sends len(QUERY_KEYS) queries in parallel (so one round trip deep), whatever len(pods).
    """
    if not pods:
        return PrometheusHistory(issues=(ReadIssue(SOURCE, said("no_pods"), kind="skipped"),))
    now = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    step = float(step_s) if step_s else default_step_s(window_s)
    start = now - timedelta(seconds=window_s)
    rate_s = max(_RATE_WINDOW_S, 2 * step)
    quarter_s = window_s / 4
    sel = q.Selectors(namespace, pods)

    def ranged(expr: str) -> Callable[[], QueryResult]:
        return lambda: client.query_range(expr, start, now, step)

    calls: dict[str, Callable[[], QueryResult]] = {
        "memory": ranged(q.memory_query(sel)),
        "restarts": ranged(q.restarts_query(sel)),
        "queue": ranged(q.queue_query(sel)),
        "kv_usage": ranged(q.usage_query(sel)),
        "preemptions": ranged(q.preemption_query(sel, rate_s)),
        "ttft_p99": ranged(q.ttft_p99_query(sel, rate_s)),
        # two points: the end of the first quarter and the end of the window
        "lengths": lambda: client.query_range(q.lengths_query(sel, quarter_s), now - timedelta(seconds=3 * quarter_s),
                                              now, 3 * quarter_s),
    }
    results, issues = _run_all(calls, max_workers)
    memory = memory_from(results.get("memory"), start, now)
    restarts = results.get("restarts")
    restarts_at, oom_at = restarts_from(restarts) if restarts is not None else ((), ())
    if memory is not None:
        memory = replace(memory, restarts_at=restarts_at, oom_killed_at=oom_at)
    service = service_from(results, start, now, step)
    issues.extend(_missing(results, memory, service))
    return PrometheusHistory(
        memory=memory,
        service=service,
        restarts_at=restarts_at,
        oom_killed_at=oom_at,
        oom_killed=oom_killed_from(restarts) if restarts is not None else (),
        queries=len(calls),
        issues=tuple(issues),
    )


def _missing(
    results: dict[str, QueryResult], memory: MemoryHistory | None, service: ServiceHistory | None
) -> list[ReadIssue]:
    """Queries that answered with nothing: the series are not there for these pods."""
    out = []
    if "memory" in results and memory is None:
        out.append(ReadIssue(SOURCE, field("memory", said("no_memory_series")), kind="missing"))
    if "queue" in results and service is None:
        out.append(ReadIssue(SOURCE, field("queue", said("no_queue_series")), kind="missing"))
    return out


def _run_all(
    calls: dict[str, Callable[[], QueryResult]], max_workers: int
) -> tuple[dict[str, QueryResult], list[ReadIssue]]:
    results: dict[str, QueryResult] = {}
    issues: list[ReadIssue] = []
    seen_kinds: set[str] = set()
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(calls)))) as pool:
        futures = {key: pool.submit(fn) for key, fn in calls.items()}
        for key, fut in futures.items():
            try:
                results[key] = fut.result()
            except PrometheusError as e:
                if e.kind in _SHARED_KINDS:
                    if e.kind in seen_kinds:
                        continue
                    seen_kinds.add(e.kind)
                    issues.append(e.issue())
                else:
                    issues.append(e.issue(key))
            except Exception as e:  # a bug in one reading must not cost the others
                issues.append(ReadIssue(SOURCE, field(key, internal_error(e))))
    return results, issues


# ------------------------------------------------------------------ GPU memory


def device_label(labels: dict[str, str]) -> str:
    """A short stable name for one GPU or MIG slice: "node-1/gpu0", "node-1/gpu2/3g.40gb#1".

    >>> device_label({"Hostname": "node-1", "gpu": "0", "UUID": "GPU-1a2b"})
    'node-1/gpu0'
    """
    host = labels.get("Hostname") or "?"
    gpu = labels.get("gpu")
    name = f"{host}/gpu{gpu}" if gpu else f"{host}/{labels.get('UUID') or '?'}"
    profile = labels.get("GPU_I_PROFILE")
    if profile:
        name += f"/{profile}#{labels.get('GPU_I_ID', '?')}"
    return name


def memory_from(result: QueryResult | None, start: datetime, end: datetime) -> MemoryHistory | None:
    """Used and total bytes per device; total = used + free + reserved (reserved when exported)."""
    if result is None:
        return None
    # device -> kind -> time -> MiB; max over pods: after a rollout one GPU may serve two pods
    by_device: dict[str, dict[str, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    for series in result.series:
        kind = _fb_kind(series.name)
        if kind is None:
            continue
        cells = by_device[device_label(series.labels)][kind]
        for at, mib in series.points:
            cells[at] = max(cells.get(at, mib), mib)
    out = []
    for label in sorted(by_device, key=_natural):
        kinds = by_device[label]
        points = []
        for at in sorted(kinds.get("used", {})):
            used = kinds["used"][at]
            free = kinds.get("free", {}).get(at)
            total = None if free is None else used + free + kinds.get("reserved", {}).get(at, 0.0)
            points.append(MemoryPoint(_dt(at), used * MIB, None if total is None else total * MIB))
        if points:
            out.append(MemorySeries(label, tuple(points)))
    if not out:
        return None  # no DCGM series: not "GPU memory was read"
    return MemoryHistory(source=SOURCE, series=tuple(out), start=start, end=end)


def _fb_kind(name: str | None) -> str | None:
    if not name:
        return None
    lowered = name.lower()
    for kind in ("used", "free", "reserved"):
        if lowered.endswith("_" + kind):
            return kind
    return None


# ------------------------------------------------------------------- restarts


def restarts_from(result: QueryResult) -> tuple[tuple[datetime, ...], tuple[datetime, ...]]:
    """Restart instants (one per counter increment) and those that were OOMKilled.

    An increment between two points is placed at the later point, unless kube-state-metrics'
    last_terminated_timestamp names the exact second inside that step.
    """
    counters: dict[tuple[str, str], PromSeries] = {}
    term_times: dict[tuple[str, str], set[float]] = defaultdict(set)
    oom_points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for series in result.series:
        key = (series.labels.get("pod", ""), series.labels.get("container", ""))
        name = series.name or ""
        if name.endswith("restarts_total"):
            counters[key] = series
        elif name.endswith("last_terminated_timestamp"):
            term_times[key].update(v for _, v in series.points if v > 0)
        elif name.endswith("last_terminated_reason") and series.labels.get("reason") == "OOMKilled":
            oom_points[key] = list(series.points)
    restarts: list[float] = []
    ooms: list[float] = []
    for key, series in counters.items():
        for (t0, v0), (t1, v1) in pairwise(series.points):
            if not v1 > v0 or not math.isfinite(v1 - v0):
                continue  # no restart, or the counter reset with a new pod of the same name
            exact = sorted(t for t in term_times.get(key, ()) if t0 < t <= t1)
            at = exact[-1] if exact else t1
            count = min(int(round(v1 - v0)), 100)
            restarts.extend([at] * count)
            if _flag_at(oom_points.get(key, ()), t1):
                ooms.extend([at] * count)
    return tuple(_dt(t) for t in sorted(restarts)), tuple(_dt(t) for t in sorted(ooms))


def _flag_at(points: Sequence[tuple[float, float]], at: float) -> bool:
    """The 0/1 gauge's value at `at`, or at its first point after (the flag lags the restart)."""
    later = [v for t, v in points if t >= at]
    return bool(later) and later[0] >= 1


def oom_killed_from(result: QueryResult) -> tuple[str, ...]:
    """Containers whose last termination was OOMKilled at the end of the window."""
    out = set()
    for series in result.series:
        is_oom = (series.name or "").endswith("last_terminated_reason") and series.labels.get("reason") == "OOMKilled"
        if is_oom and series.points and series.points[-1][1] >= 1:
            out.add(f"{series.labels.get('pod', '?')}/{series.labels.get('container', '?')}")
    return tuple(sorted(out))


# -------------------------------------------------------------------- service


def service_from(results: dict[str, QueryResult], start: datetime, end: datetime, step_s: float) -> ServiceHistory | None:
    """The engine readings; None when no engine query answered or none found a series."""
    names = {s.name for k in ("queue", "kv_usage") if k in results for s in results[k].series if s.name}
    engine, flavor = engine_of(names)
    service = ServiceHistory(
        source=SOURCE,
        engine=engine,
        flavor=flavor,
        queue_depth=_combine(results.get("queue"), sum),
        kv_cache_usage_ratio=_usage(results.get("kv_usage")),
        preemptions_per_s=_combine(results.get("preemptions"), sum),
        ttft_p99_s=_combine(results.get("ttft_p99"), max),
        requests=profile_from_lengths(results["lengths"]) if "lengths" in results else None,
        start=start,
        end=end,
        step_s=step_s,
    )
    readings = (service.queue_depth, service.kv_cache_usage_ratio, service.preemptions_per_s, service.ttft_p99_s)
    # an empty history is not "the queue was read and stayed at zero"
    return service if engine is not None or any(readings) or service.requests is not None else None


def engine_of(names: set[str]) -> tuple[str | None, str | None]:
    """(engine, flavor) from the metric names seen; V1 by its own usage gauge.

    >>> engine_of({"vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"})
    ('vllm', 'vllm-v1')
    """
    v1_usage, v0_usage = (SERIES["vllm"].kv_usage or "").split("|")
    if any(n.startswith(SERIES["vllm"].prefix) for n in names):
        if v1_usage in names:
            return "vllm", "vllm-v1"
        return "vllm", "vllm-v0" if v0_usage in names else None
    for engine in ("sglang", "tgi"):
        if any(n.startswith(SERIES[engine].prefix) for n in names):
            return engine, None
    return None, None


def _combine(result: QueryResult | None, how: Callable[[list[float]], float]) -> tuple[tuple[datetime, float], ...]:
    if result is None:
        return ()
    cells: dict[float, list[float]] = defaultdict(list)
    for series in result.series:
        for at, value in series.points:
            cells[at].append(value)
    return tuple((_dt(at), float(how(values))) for at, values in sorted(cells.items()))


def _usage(result: QueryResult | None) -> tuple[tuple[datetime, float], ...]:
    if result is None:
        return ()
    ratios = [
        PromSeries(s.labels, tuple((t, r) for t, v in s.points if (r := _ratio(v)) is not None))
        for s in result.series
    ]
    return _combine(replace(result, series=tuple(ratios)), max)


def _ratio(value: float) -> float | None:
    # engines export fractions despite vLLM's "_perc"; above 1 it can only be a percentage
    if value < 0:
        return None
    if value > 1.0:
        return value / 100.0 if value <= 100.0 else None
    return value


# -------------------------------------------------------------------- helpers


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def _natural(text: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]
