"""The fleet view's PromQL (`gpumem fleet`), two ways: from the raw series, or from the
recording rules `gpumem rules` writes for it. Pure: no I/O.

Raw, each query takes all engines' series at once, derives the Deployment (else StatefulSet,
else pod) from the pod's name the way the alert rules do (`runbooks.alerts.promql.workload`),
and answers one series per (namespace, deployment[, engine]). So the number of queries is a
constant: 8 for every engine; with --engine fewer (no GPU-memory query of engine-less pods,
none for a column no chosen engine exports: TGI has no preemptions or TTFT). A query that fills
two columns tells them apart by a `column` label (`label_replace`, then `or`).

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

Recorded, the costly part (matching every pod's name to its workload, the increases over an
hour, the KV subquery) is done by Prometheus' rule evaluation once a minute, in the background,
and the view reads the results: the same 8 query ids, each over a few thousand recorded series.
The rules are named in Prometheus' `level:metric:operations` form, one set per engine (the rule
carries an `engine` label) and one for Kubernetes and DCGM:

| rule | what it holds |
| --- | --- |
| `namespace_deployment:gpumem_<engine>_kv_usage:max` | KV usage per workload now |
| `namespace_deployment:gpumem_<engine>_kv_usage:max_over_time1h` | its most over the hour (from the rule above) |
| `namespace_deployment:gpumem_<engine>_queue:sum` | requests waiting |
| `namespace_deployment:gpumem_<engine>_preemptions:increase1h` | preemptions over the hour |
| `namespace_deployment:gpumem_<engine>_ttft_seconds:p99_rate5m` | TTFT p99 over the last 5 minutes |
| `namespace_deployment:gpumem_<engine>_prompts_short:increase15m`, `..._prompts_total:increase15m` | prompt counts of the last quarter hour |
| `namespace_deployment:gpumem_<engine>_serving:present1h` | workloads that ran the engine in the hour |
| `namespace_deployment:gpumem_gpu_holder:present1h` | workloads that held a GPU (DCGM) in the hour |
| `namespace_deployment:kube_pod_container_status_restarts:increase1h` | restarts over the hour, of the workloads of the two rules above |
| `namespace_deployment:gpumem_oom_kills:increase1h` | restarts after an OOM kill over the hour, of the same |
| `namespace_deployment:gpumem_gpu_memory_used:ratio_max` | fullest GPU of pods that run no preallocating engine |
| `namespace_deployment:gpumem_prompts_long:ratio15m` | share of prompts over 2048 tokens in the last quarter hour, every engine's (20 at least) |

The view reads them only for its default window (the hour the rules are written for) and only
when every rule it needs for the chosen engines is loaded; otherwise it sends the raw queries
and says why (`recorded_reason`). The KV maximum over the window is a rule over the recorded
gauge's own history (`max_over_time(rule[1h])`, the next rule of the group), so it covers the
time the rules have run. Each query answers one series a workload and column: the long share
comes back as each part's share (`count` LONG_SHARE), not as its short and total prompts.

>>> sorted(queries())
['gpu_used', 'kv', 'long_share', 'oom_kills', 'preemptions', 'queue', 'restarts', 'ttft_p99']
>>> len(queries(("tgi",))), 'tgi' in queries(("tgi",))["queue"], 'vllm' in queries(("tgi",))["queue"]
(5, True, False)
>>> sorted(recorded_queries()) == sorted(queries())
True
>>> len(recording_rules(("vllm",))), len(recording_rules())
(13, 27)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from runbooks.alerts import promql as q
from runbooks.alerts.engines import ENGINES, SERIES, preallocating, presence
from runbooks.alerts.rules import LONG_INPUT_TOKENS, RATE_WINDOW_S, SHIFT_GAP_S, SHIFT_PART_S
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
#: how often Prometheus evaluates the fleet's recording rules
RECORDING_INTERVAL_S = 60
RECORDING_GROUP = "gpumem-fleet"
_BY = "namespace, deployment"
#: the label that names the column of a series, in a query that fills more than one
COLUMN_LABEL = "column"
#: the `count` of a long-share series that holds the part's share of long prompts (recorded),
#: rather than its `short` or `total` prompts (raw)
LONG_SHARE = "long_share"
_DCGM_USED = "DCGM_FI_DEV_FB_USED|dcgm_fb_used"


class _Builder:
    def __init__(self, engines: Sequence[str], namespaces: Sequence[str], window_s: int):
        self.engines = tuple(e for e in ENGINES if e in engines)
        self.win = q.duration(window_s)
        regex = "|".join(q.re2_escape(n) for n in sorted(set(namespaces)))
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

    def per_engine(self, piece: Callable[[str], str | None]) -> str | None:
        parts = [tag(p, "engine", e) for e in self.engines if (p := piece(e)) is not None]
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

    def prompts(self, engine: str, count: str, offset: str = "") -> str:
        """The prompts of the last quarter hour (before `offset`): `short` (<= LONG_INPUT_TOKENS) or `total`."""
        s = SERIES[engine]
        le = q.le_at_most(LONG_INPUT_TOKENS) if count == "short" else "[+]Inf"
        inc = self.wl(f"increase({self.sel(s.prompt_buckets, f'le=~{q.string(le)}')}[{q.duration(SHIFT_PART_S)}]{offset})")
        if count == "short":
            return f"max by ({_BY}) (sum by ({_BY}, le) ({inc}))"
        return f"sum by ({_BY}) ({inc})"

    def long_share(self, engine: str) -> str:
        pieces = []
        for when, offset in (("now", ""), ("before", f" offset {q.duration(SHIFT_GAP_S)}")):
            for count in ("short", "total"):
                pieces.append(tag(tag(self.prompts(engine, count, offset), "part", when), "count", count))
        return " or ".join(pieces)

    def serving(self, engines: Sequence[str]) -> str:
        """(namespace, deployment) of the workloads that ran one of `engines` in the window."""
        engines_in = self.wl(f"last_over_time({self.sel(presence(tuple(engines)))}[{self.win}])")
        return f"group by ({_BY}) ({engines_in})"

    def gpu_holders(self) -> str:
        gpus = self.both(_DCGM_USED, wrap=f"last_over_time({{}}[{self.win}])")
        return f"group by ({_BY}) ({self.wl(gpus)})"

    def members(self, with_gpus: bool) -> str:
        """(namespace, deployment) of the services in view: an engine (or a GPU) in the window."""
        out = self.serving(self.engines)
        if with_gpus:
            out = f"({out} or {self.gpu_holders()})"
        return out

    def restarts_by_container(self) -> str:
        inc = self.both("kube_pod_container_status_restarts_total", wrap=f"increase({{}}[{self.win}])")
        return f"max by (namespace, pod, container) ({inc})"

    def restarts(self) -> str:
        return f"sum by ({_BY}) ({self.wl(self.restarts_by_container())})"

    def oom_kills(self) -> str:
        """Restarts of containers last terminated OOMKilled; 0 for the workloads kube-state-metrics knows."""
        oom = self.both("kube_pod_container_status_last_terminated_reason", 'reason="OOMKilled"')
        killed = (f"{self.restarts_by_container()} > 0\nand on (namespace, pod, container) "
                  f"max by (namespace, pod, container) ({oom}) == 1")
        return f"(sum by ({_BY}) ({self.wl(killed)}) or {self.restarts()} * 0)"

    def gpu_used(self) -> str:
        def ratio(m: tuple[str, ...]) -> str:
            ns = self._exported_ns if m == q.EXPORTED else self._ns
            u = q.selector(_DCGM_USED, *m, *ns)
            free = q.selector("DCGM_FI_DEV_FB_FREE|dcgm_fb_free", *m, *ns)
            reserved = q.selector("DCGM_FI_DEV_FB_RESERVED", *m, *ns)
            # FB_RESERVED is in the exporter's default counters only since 4.3.1-4.4.0
            return f"{u} / ({u} + {free} + ({reserved} or {u} * 0))"

        fullest = (f"max by (namespace, pod) ({q.both(ratio)})\n"
                   f"unless on (namespace, pod) {q.selector(presence(preallocating()))}")
        return f"max by ({_BY}) ({self.wl(fullest)})"


def tag(expr: str, label: str, value: str) -> str:
    """`expr` with the label `label` set to `value` on every series."""
    return f"label_replace({expr}, {q.string(label)}, {q.string(value)}, \"\", \"\")"


def queries(engines: Sequence[str] = ENGINES, namespaces: Sequence[str] = (),
            window_s: int = DEFAULT_WINDOW_S) -> dict[str, str]:
    """query id -> PromQL over the raw series. With a subset of engines, pods that run no engine
    (the GPU-memory query) are left out; `namespaces` empty means every namespace."""
    b = _Builder(engines or ENGINES, namespaces, window_s)
    all_engines = set(b.engines) == set(ENGINES)
    kv_now = b.per_engine(b.kv)
    kv_max = f"max_over_time(({kv_now})[{b.win}:{q.duration(SUBQUERY_STEP_S)}])"
    out: dict[str, str | None] = {
        "kv": f"{tag(kv_now, COLUMN_LABEL, 'kv_now')}\nor {tag(kv_max, COLUMN_LABEL, 'kv_max')}",
        "queue": b.per_engine(b.queue),
        "preemptions": b.per_engine(b.preemptions),
    }
    members = b.members(all_engines)
    out["oom_kills"] = f"{b.oom_kills()}\nand on ({_BY}) {members}"
    out["restarts"] = f"{b.restarts()}\nand on ({_BY}) {members}"
    if all_engines:
        out["gpu_used"] = b.gpu_used()
    out["ttft_p99"] = b.per_engine(b.ttft)
    out["long_share"] = b.per_engine(b.long_share)
    return {k: v for k, v in out.items() if v is not None}


# ------------------------------------------------------------------ recording rules


@dataclass(frozen=True)
class Recording:
    """One recording rule: the series `record` holds `expr`, labelled `engine` when it is one engine's."""

    record: str
    expr: str
    engine: str | None = None


def _name(kind: str, engine: str | None = None) -> str:
    """The recorded series' name for `kind` (`level:metric:operations`)."""
    e = f"{engine}_" if engine else ""
    return {
        "kv": f"namespace_deployment:gpumem_{e}kv_usage:max",
        "kv_max": f"namespace_deployment:gpumem_{e}kv_usage:max_over_time1h",
        "queue": f"namespace_deployment:gpumem_{e}queue:sum",
        "preemptions": f"namespace_deployment:gpumem_{e}preemptions:increase1h",
        "ttft": f"namespace_deployment:gpumem_{e}ttft_seconds:p99_rate5m",
        "short": f"namespace_deployment:gpumem_{e}prompts_short:increase15m",
        "total": f"namespace_deployment:gpumem_{e}prompts_total:increase15m",
        "serving": f"namespace_deployment:gpumem_{e}serving:present1h",
        "gpu_holder": "namespace_deployment:gpumem_gpu_holder:present1h",
        "restarts": "namespace_deployment:kube_pod_container_status_restarts:increase1h",
        "oom_kills": "namespace_deployment:gpumem_oom_kills:increase1h",
        "gpu_used": "namespace_deployment:gpumem_gpu_memory_used:ratio_max",
        "long_share": "namespace_deployment:gpumem_prompts_long:ratio15m",
    }[kind]


def recording_rules(engines: Sequence[str] = ENGINES) -> tuple[Recording, ...]:
    """The rules the fleet view reads for `engines` (every namespace, the default window), plus
    the Kubernetes and DCGM ones every fleet reads."""
    b = _Builder(engines or ENGINES, (), DEFAULT_WINDOW_S)
    out: list[Recording] = []
    for e in b.engines:
        out.append(Recording(_name("kv", e), b.kv(e), e))
        # the hour's peak over the rule above (evaluated before it in the same group, so at the
        # same instant): an instant read of one series a workload for the view
        out.append(Recording(_name("kv_max", e), f"max_over_time({_name('kv', e)}[{b.win}])", e))
        out.append(Recording(_name("queue", e), b.queue(e), e))
        if (pre := b.preemptions(e)) is not None:
            out.append(Recording(_name("preemptions", e), pre, e))
        if (ttft := b.ttft(e)) is not None:  # the quantile itself: one series a workload, not one a bucket
            out.append(Recording(_name("ttft", e), ttft, e))
        out.append(Recording(_name("short", e), b.prompts(e, "short"), e))
        out.append(Recording(_name("total", e), b.prompts(e, "total"), e))
        out.append(Recording(_name("serving", e), b.serving((e,)), e))
    out.append(Recording(_name("gpu_holder"), b.gpu_holders()))
    # the rules below read the rules above (earlier in the group: evaluated first, at the same
    # instant), so that the view reads one series a workload and joins nothing: restarts and OOM
    # kills only of the workloads that ran an engine or held a GPU in the hour, the long share
    # of every engine's prompts together
    members = f"(group by ({_BY}) ({_recorded(_name('serving', e) for e in b.engines)}) or {_name('gpu_holder')})"
    out.append(Recording(_name("restarts"), f"{b.restarts()}\nand on ({_BY}) {members}"))
    out.append(Recording(_name("oom_kills"), f"{b.oom_kills()}\nand on ({_BY}) {members}"))
    out.append(Recording(_name("gpu_used"), b.gpu_used()))
    out.append(Recording(_name("long_share"), _share(_recorded(_name("short", e) for e in b.engines),
                                                     _recorded(_name("total", e) for e in b.engines))))
    return tuple(out)


def _recorded(names: Iterable[str], *matchers: str, offset: str = "") -> str:
    """A selector of the recorded series `names`."""
    return q.selector("|".join(q.re2_escape(n) for n in names), *matchers) + offset


def _share(short: str, total: str) -> str:
    """The share of long prompts per workload from its `short` and `total` prompts (selectors,
    engines added up), as `long_share_values` takes it from the counts: only where the part
    holds SHIFT_MIN_PART requests, a missing short count read as none."""
    short, total = f"sum by ({_BY}) ({short})", f"sum by ({_BY}) ({total})"
    return f"(1 - clamp_max(({short} or {total} * 0) / {total}, 1))\nand on ({_BY}) {total} >= {SHIFT_MIN_PART}"


def needed_records(engines: Sequence[str] = ENGINES) -> frozenset[str]:
    """The recorded series the view reads for `engines`."""
    chosen = tuple(e for e in ENGINES if e in (engines or ENGINES))
    needed = {r.record for r in recording_rules(chosen)}
    if set(chosen) != set(ENGINES):
        needed -= {_name("gpu_holder"), _name("gpu_used"), _name("long_share")}
    return frozenset(needed)


def recorded_queries(engines: Sequence[str] = ENGINES, namespaces: Sequence[str] = ()) -> dict[str, str]:
    """query id -> PromQL over the recorded series, for the default window: the same ids, columns
    and labels as `queries`, so one parser reads either."""
    chosen = tuple(e for e in ENGINES if e in (engines or ENGINES))
    all_engines = set(chosen) == set(ENGINES)
    regex = "|".join(q.re2_escape(n) for n in sorted(set(namespaces)))
    ns = (f"namespace=~{q.string(regex)}",) if namespaces else ()

    def sel(kind: str, *, offset: str = "", per_engine: bool = True) -> str | None:
        names = [_name(kind, e) for e in chosen] if per_engine else [_name(kind)]
        names = [n for n in names if n in records]
        return _recorded(names, *ns, offset=offset) if names else None

    records = {r.record for r in recording_rules(chosen)}
    kv, kv_max = sel("kv"), sel("kv_max")
    # the rules hold only the workloads that ran one of their engines or held a GPU: the view of
    # fewer engines keeps those that ran one of its own
    members = "" if all_engines else f"\nand on ({_BY}) {sel('serving')}"
    restarts, oom = sel("restarts", per_engine=False), sel("oom_kills", per_engine=False)
    out: dict[str, str | None] = {
        "kv": f"{tag(f'max by ({_BY}, engine) ({kv})', COLUMN_LABEL, 'kv_now')}\n"
              f"or {tag(f'max by ({_BY}, engine) ({kv_max})', COLUMN_LABEL, 'kv_max')}",
        "queue": _by_engine(sel("queue")),
        "preemptions": _by_engine(sel("preemptions")),
        "oom_kills": f"sum by ({_BY}) ({oom}){members}",
        "restarts": f"sum by ({_BY}) ({restarts}){members}",
    }
    if all_engines:
        out["gpu_used"] = f"max by ({_BY}) ({sel('gpu_used', per_engine=False)})"
    ttft = sel("ttft")
    out["ttft_p99"] = None if ttft is None else f"max by ({_BY}, engine) ({ttft})"
    pieces = []
    for when, offset in (("now", ""), ("before", f" offset {q.duration(SHIFT_GAP_S)}")):
        # each part's share itself, one series a workload: every engine's from its rule, fewer
        # engines' from their prompt counts
        if all_engines:
            share = f"max by ({_BY}) ({sel('long_share', offset=offset, per_engine=False)})"
        else:
            share = _share(sel("short", offset=offset), sel("total", offset=offset))
        pieces.append(tag(tag(share, "part", when), "count", LONG_SHARE))
    out["long_share"] = " or ".join(pieces)
    return {k: v for k, v in out.items() if v is not None}


def _by_engine(selector: str | None) -> str | None:
    """The recorded series, one per (namespace, deployment, engine), without their name."""
    return None if selector is None else f"sum by ({_BY}, engine) ({selector})"
