"""The fleet view's reads (`gpumem fleet`): a fixed set of PromQL queries, whatever the fleet's size.

Prometheus (or Thanos, Mimir, VictoriaMetrics behind the same API) does the aggregation: every
query takes all engines' series at once, derives the Deployment (else StatefulSet, else pod)
from the pod's name the way the alert rules do (`runbooks.alerts.promql.workload`), and answers
one series per (namespace, deployment[, engine]). So the number of queries is `len(queries(...))`
for 3 services or 3000: 8 for every engine; with --engine fewer (no GPU-memory query of
engine-less pods, none for a column no chosen engine exports: TGI has no preemptions or TTFT).
A query that fills two columns tells them apart by a `column` label (`label_replace`, then `or`).

| query | columns | PromQL, per engine, joined with `or` |
| --- | --- | --- |
| kv | kv_now, kv_max | `max by (namespace, deployment)` of the KV usage gauge (TGI: batch tokens / KV token budget per pod), `or` its `max_over_time((...)[window:1m])` |
| queue | queue | `sum by (namespace, deployment)` of waiting requests (SGLang: max per pod and dp_rank first) |
| preemptions | preemptions | `sum by (...) (increase(counter[window]))` (SGLang: or the older gauge's max) |
| oom_kills | oom_kills | restarts over the window of containers whose last termination was OOMKilled (kube-state-metrics; 0 for the rest) |
| restarts | restarts | `sum by (...)` of `increase(kube_pod_container_status_restarts_total[window])` |
| gpu_used | gpu_used | DCGM used / (used + free + reserved), pods that run no preallocating engine (as GpumemGPUMemoryHigh) |
| ttft_p99 | ttft_p99 | `histogram_quantile(0.99, sum by (..., le) (rate(ttft_bucket[5m])))` |
| long_share | long_share, long_jump | prompt-length histograms' short (<= 2048 tokens) and total counts over the last 15 minutes and 45 minutes before |

Kubernetes and DCGM series are read in both label variants (`pod` or `exported_pod`) and
restarts count only for deployments that ran an engine (or held a GPU) in the window.

Fetch apart from parse: `read_fleet` sends the queries in parallel and never raises for
Prometheus trouble; a query that fails costs its columns (`FleetReadings.not_read`), not the
view. `parse_answers` turns answers into `runbooks.alerts.fleet.Service`s without I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from collectors.errors import ParseError
from collectors.prometheus.client import SOURCE, PrometheusClient, PrometheusError, QueryResult
from collectors.prometheus.promql import re2_escape
from runbooks.alerts import promql as q
from runbooks.alerts.engines import ENGINES, SERIES, preallocating, presence
from runbooks.alerts.fleet import Service
from runbooks.alerts.rules import LONG_INPUT_TOKENS, RATE_WINDOW_S, SHIFT_GAP_S, SHIFT_PART_S
from runbooks.model.evidence import ReadIssue
from runbooks.profile.requests import SHIFT_MIN_PART

#: query id -> the columns it fills
QUERY_COLUMNS: dict[str, tuple[str, ...]] = {
    "kv": ("kv_now", "kv_max"),
    "queue": ("queue",),
    "preemptions": ("preemptions",),
    "oom_kills": ("oom_kills",),
    "restarts": ("restarts",),
    "gpu_used": ("gpu_used",),
    "ttft_p99": ("ttft_p99",),
    "long_share": ("long_share", "long_jump"),
}
DEFAULT_WINDOW_S = 3600
#: the resolution of the KV-usage subquery
SUBQUERY_STEP_S = 60
_BY = "namespace, deployment"
#: the label that names the column of a series, in a query that fills more than one
COLUMN_LABEL = "column"
#: columns whose values add up across the engines of one deployment (the rest take the most)
_ADDED = ("queue", "preemptions", "oom_kills", "restarts")


@dataclass(frozen=True)
class NotRead:
    """A query that gave no answer: the columns it costs and why."""

    query: str
    columns: tuple[str, ...]
    issue: ReadIssue


@dataclass(frozen=True)
class FleetReadings:
    services: tuple[Service, ...] = ()
    not_read: tuple[NotRead, ...] = ()
    #: query id -> PromQL, as sent
    queries: Mapping[str, str] = field(default_factory=dict)

    @property
    def nothing_read(self) -> bool:
        return bool(self.queries) and len(self.not_read) == len(self.queries)


# ------------------------------------------------------------------ queries


class _Builder:
    def __init__(self, engines: Sequence[str], namespaces: Sequence[str], window_s: int):
        self.engines = tuple(e for e in ENGINES if e in engines)
        self.win = q.duration(window_s)
        regex = "|".join(re2_escape(n) for n in sorted(set(namespaces)))
        self._ns = (f"namespace=~{q.string(regex)}",) if namespaces else ()
        self._exported_ns = (f"exported_namespace=~{q.string(regex)}",) if namespaces else ()

    # selectors
    def sel(self, names: str, *matchers: str) -> str:
        """An engine series: scraped from the server itself, so `namespace` and `pod` are its own."""
        return q.selector(names, *matchers, *self._ns)

    def both(self, names: str, *matchers: str, wrap: str = "{}") -> str:
        """A Kubernetes or DCGM series in both label variants, `exported_*` copied onto `pod` etc."""
        def build(m: tuple[str, ...]) -> str:
            ns = self._exported_ns if m == q.EXPORTED else self._ns
            return wrap.format(q.selector(names, *matchers, *m, *ns))
        return q.both(build)

    @staticmethod
    def wl(expr: str) -> str:
        return q.workload(expr, "namespace", "deployment")

    @staticmethod
    def tag(expr: str, label: str, value: str) -> str:
        return f"label_replace({expr}, {q.string(label)}, {q.string(value)}, \"\", \"\")"

    def per_engine(self, piece: Callable[[str], str | None]) -> str | None:
        parts = [self.tag(p, "engine", e) for e in self.engines if (p := piece(e)) is not None]
        return " or ".join(parts) if parts else None

    # columns
    def kv(self, engine: str) -> str:
        s = SERIES[engine]
        if s.kv_usage is not None:
            usage = self.sel(s.kv_usage)
        else:
            used, budget = s.kv_ratio
            usage = f"max by (namespace, pod) ({self.sel(used)}) / max by (namespace, pod) ({self.sel(budget)})"
        return f"max by ({_BY}) ({self.wl(usage)})"

    def queue(self, engine: str) -> str:
        s = SERIES[engine]
        queue = self.sel(s.queue)
        if s.queue_distinct:
            queue = f"max by (namespace, pod, {', '.join(s.queue_distinct)}) ({queue})"
        return f"sum by ({_BY}) ({self.wl(queue)})"

    def preemptions(self, engine: str) -> str | None:
        s = SERIES[engine]
        if s.preemptions is None:
            return None
        expr = f"sum by ({_BY}) ({self.wl(f'increase({self.sel(s.preemptions)}[{self.win}])')})"
        if s.preemptions_gauge:
            older = self.wl(f"max_over_time({self.sel(s.preemptions_gauge)}[{self.win}])")
            expr = f"({expr} or max by ({_BY}) ({older}))"
        return expr

    def ttft(self, engine: str) -> str | None:
        s = SERIES[engine]
        if s.ttft_buckets is None:
            return None
        rate = self.wl(f"rate({self.sel(s.ttft_buckets)}[{q.duration(RATE_WINDOW_S)}])")
        return f"histogram_quantile(0.99, sum by ({_BY}, le) ({rate}))"

    def long_share(self, engine: str) -> str:
        s = SERIES[engine]
        part = q.duration(SHIFT_PART_S)

        def inc(le: str, offset: str) -> str:
            return self.wl(f"increase({self.sel(s.prompt_buckets, f'le=~{q.string(le)}')}[{part}]{offset})")

        pieces = []
        for when, offset in (("now", ""), ("before", f" offset {q.duration(SHIFT_GAP_S)}")):
            short = f"max by ({_BY}) (sum by ({_BY}, le) ({inc(q.le_at_most(LONG_INPUT_TOKENS), offset)}))"
            total = f"sum by ({_BY}) ({inc('[+]Inf', offset)})"
            pieces.append(self.tag(self.tag(short, "part", when), "count", "short"))
            pieces.append(self.tag(self.tag(total, "part", when), "count", "total"))
        return " or ".join(pieces)

    def members(self, with_gpus: bool) -> str:
        """(namespace, deployment) of the services in view: an engine (or a GPU) in the window."""
        engines = self.wl(f"last_over_time({self.sel(presence(self.engines))}[{self.win}])")
        out = f"group by ({_BY}) ({engines})"
        if with_gpus:
            gpus = self.both("DCGM_FI_DEV_FB_USED|dcgm_fb_used", wrap=f"last_over_time({{}}[{self.win}])")
            out = f"({out} or group by ({_BY}) ({self.wl(gpus)}))"
        return out

    def restarts_by_container(self) -> str:
        inc = self.both("kube_pod_container_status_restarts_total", wrap=f"increase({{}}[{self.win}])")
        return f"max by (namespace, pod, container) ({inc})"

    def gpu_used(self) -> str:
        used = "DCGM_FI_DEV_FB_USED|dcgm_fb_used"

        def ratio(m: tuple[str, ...]) -> str:
            ns = self._exported_ns if m == q.EXPORTED else self._ns
            u = q.selector(used, *m, *ns)
            free = q.selector("DCGM_FI_DEV_FB_FREE|dcgm_fb_free", *m, *ns)
            reserved = q.selector("DCGM_FI_DEV_FB_RESERVED", *m, *ns)
            # FB_RESERVED is in the exporter's default counters only since 4.3.1-4.4.0
            return f"{u} / ({u} + {free} + ({reserved} or {u} * 0))"

        fullest = (f"max by (namespace, pod) ({q.both(ratio)})\n"
                   f"unless on (namespace, pod) {q.selector(presence(preallocating()))}")
        return f"max by ({_BY}) ({self.wl(fullest)})"


def queries(engines: Sequence[str] = ENGINES, namespaces: Sequence[str] = (),
            window_s: int = DEFAULT_WINDOW_S) -> dict[str, str]:
    """query id -> PromQL for the view. With a subset of engines, pods that run no engine (the
    GPU-memory query) are left out; `namespaces` empty means every namespace.

    >>> sorted(queries())
    ['gpu_used', 'kv', 'long_share', 'oom_kills', 'preemptions', 'queue', 'restarts', 'ttft_p99']
    >>> len(queries(("tgi",))), 'tgi' in queries(("tgi",))["queue"], 'vllm' in queries(("tgi",))["queue"]
    (5, True, False)
    """
    b = _Builder(engines or ENGINES, namespaces, window_s)
    all_engines = set(b.engines) == set(ENGINES)
    kv_now = b.per_engine(b.kv)
    kv_max = f"max_over_time(({kv_now})[{b.win}:{q.duration(SUBQUERY_STEP_S)}])"
    out: dict[str, str | None] = {
        "kv": f"{b.tag(kv_now, COLUMN_LABEL, 'kv_now')}\nor {b.tag(kv_max, COLUMN_LABEL, 'kv_max')}",
        "queue": b.per_engine(b.queue),
        "preemptions": b.per_engine(b.preemptions),
    }
    members = b.members(all_engines)
    restarts = b.restarts_by_container()
    oom = b.both("kube_pod_container_status_last_terminated_reason", 'reason="OOMKilled"')
    killed = (f"{restarts} > 0\nand on (namespace, pod, container) "
              f"max by (namespace, pod, container) ({oom}) == 1")
    restarted = f"sum by ({_BY}) ({b.wl(restarts)})"
    # 0 for the members kube-state-metrics knows that were not OOM-killed
    out["oom_kills"] = f"(sum by ({_BY}) ({b.wl(killed)}) or {restarted} * 0)\nand on ({_BY}) {members}"
    out["restarts"] = f"{restarted}\nand on ({_BY}) {members}"
    if all_engines:
        out["gpu_used"] = b.gpu_used()
    out["ttft_p99"] = b.per_engine(b.ttft)
    out["long_share"] = b.per_engine(b.long_share)
    return {k: v for k, v in out.items() if v is not None}


# ------------------------------------------------------------------ parsing


def parse_answers(answers: Mapping[str, QueryResult]) -> tuple[Service, ...]:
    """Answers (query id -> result) to one Service per (namespace, deployment), sorted by name.

    Series without a namespace or deployment label are ignored; so is a long share from fewer
    than SHIFT_MIN_PART requests (and a jump unless both parts have that many).
    """
    engines: dict[tuple[str, str], set[str]] = {}
    values: dict[tuple[str, str], dict[str, float]] = {}
    counts: dict[tuple[str, str], dict[tuple[str, str], float]] = {}

    for query_id, result in answers.items():
        for s in result.series:
            ns, dep = s.labels.get("namespace"), s.labels.get("deployment")
            if not ns or not dep or not s.points:
                continue
            key, value = (ns, dep), s.points[-1][1]
            engines.setdefault(key, set())
            if s.labels.get("engine") in SERIES:
                engines[key].add(s.labels["engine"])
            if query_id == "long_share":
                part, kind = s.labels.get("part"), s.labels.get("count")
                if part in ("now", "before") and kind in ("short", "total"):
                    got = counts.setdefault(key, {})
                    got[(part, kind)] = got.get((part, kind), 0.0) + value
                continue
            columns = QUERY_COLUMNS.get(query_id, ())
            if len(columns) > 1:
                columns = tuple(c for c in columns if c == s.labels.get(COLUMN_LABEL))
            for column in columns:
                have = values.setdefault(key, {})
                if column in have:
                    have[column] = have[column] + value if column in _ADDED else max(have[column], value)
                else:
                    have[column] = value
    for key, got in counts.items():
        values.setdefault(key, {}).update(long_share_values(got))
    return tuple(Service(ns, dep, tuple(e for e in ENGINES if e in engines.get((ns, dep), ())),
                         dict(values.get((ns, dep), {})))
                 for ns, dep in sorted(engines))


def long_share_values(counts: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """{(part, short|total): requests} -> long_share (the last quarter hour) and long_jump.

    >>> long_share_values({("now", "short"): 63, ("now", "total"): 100, ("before", "short"): 92,
    ...                    ("before", "total"): 100})
    {'long_share': 0.37, 'long_jump': 0.29}
    >>> long_share_values({("now", "short"): 5, ("now", "total"): 5})
    {}
    """
    def share(part: str) -> float | None:
        total = counts.get((part, "total"), 0.0)
        if total < SHIFT_MIN_PART:
            return None
        return round(1.0 - min(counts.get((part, "short"), 0.0), total) / total, 4)

    now, before = share("now"), share("before")
    out: dict[str, float] = {}
    if now is not None:
        out["long_share"] = now
        if before is not None:
            out["long_jump"] = round(now - before, 4)
    return out


# ------------------------------------------------------------------ fetching


def read_fleet(client: PrometheusClient, *, now: datetime, engines: Sequence[str] = ENGINES,
               namespaces: Sequence[str] = (), window_s: int = DEFAULT_WINDOW_S) -> FleetReadings:
    """Send the view's queries in parallel (instant queries at `now`); never raises for
    Prometheus trouble: a query that fails is a NotRead naming its columns."""
    now = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    sent = queries(engines, namespaces, window_s)

    def one(item: tuple[str, str]) -> tuple[str, QueryResult | ReadIssue]:
        query_id, promql = item
        try:
            return query_id, client.query(promql, at=now)
        except PrometheusError as e:
            return query_id, e.issue(query_id)
        except ParseError as e:
            return query_id, ReadIssue(SOURCE, f"{query_id}: {e.message}", kind="unreadable")

    with ThreadPoolExecutor(len(sent), thread_name_prefix="gpumem-fleet") as pool:
        done = dict(pool.map(one, sent.items()))
    answers = {k: v for k, v in done.items() if isinstance(v, QueryResult)}
    missing = tuple(NotRead(k, QUERY_COLUMNS[k], v) for k, v in done.items() if isinstance(v, ReadIssue))
    return FleetReadings(parse_answers(answers), missing, sent)
