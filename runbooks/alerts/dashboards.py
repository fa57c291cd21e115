"""The runbook's dashboards as Grafana dashboards, one per engine, from the alerts' series tables.

Four rows, the runbook's panels ("Monitoring and alerts"): GPU (memory used against the card's
total, utilisation, temperature, power: DCGM, and gpumem's NVML agent matched to the workload's
pods by GPU UUID), request profile (requests per runbook bucket of input and of output length,
the long-request share), service (queue, TTFT p50/p95/p99, KV-cache usage, rejects and
preemptions, per pool), platform (restarts, OOM kills, replicas and autoscaling, requests per
pool: the route hits). Every metric name comes from `runbooks.alerts.engines` (SERIES, EXPORTERS)
and every line drawn from `runbooks.catalogs.thresholds`, as the alert rules read them; a panel
an engine has nothing for says why in its place (the `rules_cli.missing` reasons).

A pool is a workload: its Deployment (or StatefulSet) name taken from the pod's name, as the
alerts do (`promql.workload`). Template variables: the Prometheus data source, then namespace,
model (where the engine labels one) and pod, each narrowing the next. Titles are catalog keys
(`dashboards.*`); `grafana()` takes the words and writes the dashboard JSON.

>>> d = build_dashboard("tgi")
>>> d.uid, [r.id for r in d.rows]
('gpumem-tgi', ['gpu', 'profile', 'service', 'platform'])
>>> [v.name for v in d.variables]
['datasource', 'namespace', 'pod']
>>> [p.id for p in d.rows[2].panels if p.missing]
['ttft']
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runbooks.alerts import promql as q
from runbooks.alerts.engines import ENGINES, SERIES, EngineSeries
from runbooks.alerts.engines import EXPORTERS as X
from runbooks.alerts.rules import LONG_INPUT_TOKENS, RESTART_WINDOW_S
from runbooks.catalogs import thresholds as T
from runbooks.profile.requests import BUCKET_LIMITS

#: the dashboard JSON model these are written for (Grafana 10.4 / 11)
SCHEMA_VERSION = 39
GRID_COLUMNS = 24
PANEL_HEIGHT = 8
UID_PREFIX = "gpumem-"
#: Grafana's own rate window: at least four scrape intervals
RATE = "$__rate_interval"
MIB = 1048576
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

Words = Callable[..., str]


@dataclass(frozen=True)
class Target:
    """One query of a panel: PromQL with the template variables in it, the legend's label
    template (`{{label}}`) and the catalog key of what the series is (`dashboards.series.*`)."""

    expr: str
    legend: str
    series: str
    #: names (a regex) read only to match series to the workload, not shown as what it reads
    joins: str = ""


@dataclass(frozen=True)
class Panel:
    id: str
    unit: str
    targets: tuple[Target, ...] = ()
    #: the runbook's line drawn on the panel (None: none)
    line: float | None = None
    stack: bool = False
    width: int = 8
    #: a `rules_cli.missing` key: the engine exports nothing for this panel, and why
    missing: str | None = None
    #: the numbers its description names (limits, lines, windows)
    params: dict[str, Any] = field(default_factory=dict)
    #: a `dashboards.note` key worded after the description (with `params`), or None
    note: str | None = None

    def metrics(self) -> tuple[str, ...]:
        """The metric names its queries read, in order of first use."""

        seen: dict[str, None] = {}
        for t in self.targets:
            joins = set(t.joins.split("|"))
            for quoted in re.findall(r'__name__=~"([^"]+)"', t.expr):
                for name in quoted.split("|"):
                    if name not in joins:
                        seen.setdefault(name, None)
        return tuple(seen)


@dataclass(frozen=True)
class Row:
    id: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    """A template variable: the data source, or the label values of `query` (Grafana's
    `label_values(selector, label)`), multi-valued with All. All stands for the values listed
    (no `allValue`), so a GPU panel keeps to the engine's pods even when every pod is chosen."""

    name: str
    label_key: str
    selector: str = ""
    label: str = ""

    @property
    def query(self) -> str:
        return f"label_values({self.selector}, {self.label})" if self.selector else "prometheus"


@dataclass(frozen=True)
class Dashboard:
    engine: str
    uid: str
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = field(default=("gpumem",))

    def panels(self) -> tuple[Panel, ...]:
        return tuple(p for r in self.rows for p in r.panels)


# ---------------------------------------------------------------------- selectors


def _var(name: str) -> str:
    return q.string(f"${name}")


#: the workload's pod as the engine's own series carry it (the engine is the scrape target)
_OWN = (f"namespace=~{_var('namespace')}", f"pod=~{_var('pod')}")
#: an exporter's series about the workload's pod: scraped with honorLabels, or without
#: (`exported_pod`; then `pod` is the exporter's own), as `promql.both` reads them
_DIRECT = (*_OWN, 'exported_pod=""')
_EXPORTED = (f"exported_namespace=~{_var('namespace')}", f"exported_pod=~{_var('pod')}")
#: namespace-level series of kube-state-metrics (Deployments, StatefulSets, HPAs)
_NS_DIRECT = (f"namespace=~{_var('namespace')}", 'exported_namespace=""')
_NS_EXPORTED = (f"exported_namespace=~{_var('namespace')}",)


def _engine(s: EngineSeries, names: str, *more: str) -> str:
    model = (f"{s.model_label}=~{_var('model_name')}",) if s.model_label else ()
    return q.selector(names, *_OWN, *model, *more)


def _exporter(build: Callable[[tuple[str, ...]], str], labels: tuple[str, ...] = ("pod", "namespace", "container")
              ) -> str:
    """`build(matchers)` for both ways the exporter reaches Prometheus, joined with `or`; the
    second's `exported_*` copied into the plain labels."""
    exported = build(_EXPORTED)
    for label in labels:
        exported = q.copy_label(exported, f"exported_{label}", label)
    return f"({build(_DIRECT)} or {exported})"


def _namespaced(build: Callable[[tuple[str, ...]], str]) -> str:
    exported = q.copy_label(build(_NS_EXPORTED), "exported_namespace", "namespace")
    return f"({build(_NS_DIRECT)} or {exported})"


def _pool(expr: str) -> str:
    """`expr` (series with namespace and pod) with the pool's name as `deployment`."""
    return q.workload(expr, "namespace", "deployment")


POOL = "namespace, deployment"
POOL_LEGEND = "{{namespace}}/{{deployment}}"
POD_LEGEND = "{{pod}}"
GPU_LEGEND = "{{pod}} GPU {{gpu}}"


def _rate(selector: str, window: str = RATE) -> str:
    return f"rate({selector}[{window}])"


# ---------------------------------------------------------------------- the rows


def _gpu_row() -> Row:
    device = "namespace, pod, gpu, GPU_I_ID"

    def dcgm(names: str) -> str:
        return _exporter(lambda m: q.selector(names, *m))

    used, free = dcgm(X.fb_used), dcgm(X.fb_free)
    reserved = dcgm(X.fb_reserved)
    total = f"({used} + {free} + ({reserved} or {used} * 0))"
    # the agent serves a node's GPUs under its own pod: each GPU takes the workload's namespace
    # and pod from a DCGM series of the same UUID (upper-case UUID copied to the agent's uuid)
    owner = f"topk by (uuid) (1, {q.copy_label(used, 'UUID', 'uuid')} * 0 + 1)"

    def agent(name: str, scale: str = "") -> str:
        return f"max by ({device}) ({q.selector(name)}{scale} * on (uuid) group_left (namespace, pod) {owner})"

    memory = Panel("gpu_memory", "bytes", (
        Target(f"max by ({device}) ({used}) * {MIB}", GPU_LEGEND, "dcgm_used"),
        Target(f"max by ({device}) ({total}) * {MIB}", GPU_LEGEND, "dcgm_total"),
        Target(agent(X.agent_used), GPU_LEGEND, "agent_used", X.fb_used),
        Target(agent(X.agent_total), GPU_LEGEND, "agent_total", X.fb_used),
    ), width=12)
    util = Panel("gpu_util", "percent", (
        Target(f"max by ({device}) ({dcgm(X.gpu_util)})", GPU_LEGEND, "dcgm"),
        Target(agent(X.agent_util, " * 100"), GPU_LEGEND, "agent", X.fb_used),
    ), width=12)
    temp = Panel("gpu_temp", "celsius", (Target(f"max by ({device}) ({dcgm(X.gpu_temp)})", GPU_LEGEND, "dcgm"),),
                 width=12)
    power = Panel("gpu_power", "watt", (Target(f"max by ({device}) ({dcgm(X.power)})", GPU_LEGEND, "dcgm"),),
                  width=12)
    return Row("gpu", (memory, util, temp, power))


def _at_most(s: EngineSeries, buckets: str, limit: int | None) -> str:
    """Requests per second per pool at or below `limit` tokens (None: all of them): the count at
    the largest bucket bound at or below it, whatever bounds the engine chose (as the alerts)."""
    le = "[+]Inf" if limit is None else q.le_at_most(limit)
    counted = _pool(_rate(_engine(s, buckets, f"le=~{q.string(le)}")))
    return f"max by ({POOL}) (sum by ({POOL}, le) ({counted}))"


def _buckets(s: EngineSeries, buckets: str, limits: tuple[int, ...]) -> tuple[Target, ...]:
    """One target per runbook bucket (S, M, L, XL): requests per second in it."""
    names = [b for b, _, _ in BUCKET_LIMITS] + ["XL"]
    bounds: list[int | None] = [*limits, None]
    out, below = [], None
    for name, bound in zip(names, bounds, strict=True):
        upto = _at_most(s, buckets, bound)
        expr = upto if below is None else f"{upto} - {below}"
        out.append(Target(expr, POOL_LEGEND, f"bucket_{name}"))
        below = upto
    return tuple(out)


def _profile_row(s: EngineSeries) -> Row:
    inputs = tuple(i for _, i, _ in BUCKET_LIMITS)
    outputs = tuple(o for _, _, o in BUCKET_LIMITS)
    share = (f"1 - {_at_most(s, s.prompt_buckets, LONG_INPUT_TOKENS)} / {_at_most(s, s.prompt_buckets, None)}")
    return Row("profile", (
        Panel("input_buckets", "reqps", _buckets(s, s.prompt_buckets, inputs), stack=True,
              params=dict(zip(("s", "m", "l"), inputs, strict=True))),
        Panel("output_buckets", "reqps", _buckets(s, s.generation_buckets, outputs), stack=True,
              params=dict(zip(("s", "m", "l"), outputs, strict=True))),
        Panel("long_share", "percentunit", (Target(share, POOL_LEGEND, "long_share"),), line=T.LONG_SHARE_HIGH,
              params={"tokens": LONG_INPUT_TOKENS, "pct": round(T.LONG_SHARE_HIGH * 100)}),
    ))


def _service_row(s: EngineSeries) -> Row:
    queue = _engine(s, s.queue)
    if s.queue_distinct:
        queue = f"max by (namespace, pod, {', '.join(s.queue_distinct)}) ({queue})"
    panels = [Panel("queue", "short", (Target(f"sum by ({POOL}) ({_pool(queue)})", POOL_LEGEND, "queue"),),
                    line=float(T.QUEUE_DEPTH_ALERT), width=12, params={"threshold": T.QUEUE_DEPTH_ALERT})]
    if s.ttft_buckets:
        rated = _pool(_rate(_engine(s, s.ttft_buckets)))
        panels.append(Panel("ttft", "s", tuple(
            Target(f"histogram_quantile({p}, sum by ({POOL}, le) ({rated}))", POOL_LEGEND, f"p{round(p * 100)}")
            for p in (0.5, 0.95, 0.99)), line=T.TTFT_P99_SLOW_S, width=12, params={"seconds": T.TTFT_P99_SLOW_S}))
    else:
        panels.append(Panel("ttft", "s", missing=s.missing["ttft_p99_high"], width=12))
    if s.kv_usage is not None:
        usage = _engine(s, s.kv_usage)
    else:
        used, budget = s.kv_ratio  # type: ignore[misc]
        usage = f"max by (namespace, pod) ({_engine(s, used)}) / max by (namespace, pod) ({_engine(s, budget)})"
    panels.append(Panel("kv_usage", "percentunit", (Target(f"max by ({POOL}) ({_pool(usage)})", POOL_LEGEND, "kv"),),
                        line=T.KV_USAGE_HIGH_RATIO, width=12, params={"pct": round(T.KV_USAGE_HIGH_RATIO * 100)}))
    by = f"{POOL}, {s.rejects_by}" if s.rejects_by else POOL
    legend = f"{POOL_LEGEND} {{{{{s.rejects_by}}}}}" if s.rejects_by else POOL_LEGEND
    lost = [Target(f"sum by ({by}) ({_pool(_rate(_engine(s, s.rejects, *s.rejects_matchers)))})", legend, "rejects")]
    if s.preemptions:
        lost.append(Target(f"sum by ({POOL}) ({_pool(_rate(_engine(s, s.preemptions)))})", POOL_LEGEND,
                           "preemptions"))
    if s.preemptions_gauge:
        lost.append(Target(f"max by ({POOL}) ({_pool(_engine(s, s.preemptions_gauge))})", POOL_LEGEND,
                           "retractions_interval"))
    params: dict[str, Any] = {"metric": s.rejects}
    note = None
    if s.errors_counted_since is not None:
        # vLLM before 0.13 has no "error" finish: its line counts aborts only, errors unknown
        note = "errors_unknown_before"
        params["since"] = ".".join(str(p) for p in s.errors_counted_since)
    panels.append(Panel("rejects", "short", tuple(lost), width=12, params=params, note=note))
    return Row("service", tuple(panels))


def _platform_row(s: EngineSeries) -> Row:
    window = q.duration(RESTART_WINDOW_S)
    restarts = "max by (namespace, pod, container) ({})".format(
        _exporter(lambda m: f"increase({q.selector(X.restarts, *m)}[{window}])"))
    oom = _exporter(lambda m: q.selector(X.terminated_reason, 'reason="OOMKilled"', *m))
    killed = (f"{restarts} > 0\nand on (namespace, pod, container) "
              f"max by (namespace, pod, container) ({oom}) == 1")
    # the pools of the pods chosen above: their replica counts, whatever else the namespace runs
    pools = f"group by ({POOL}) ({_pool(_engine(s, s.presence))})"

    def ksm(name: str, kind_label: str) -> str:
        series = _namespaced(lambda m: q.selector(name, *m))
        if kind_label != "deployment":
            series = q.copy_label(series, kind_label, "deployment")
        return f"max by ({POOL}) ({series}) and on ({POOL}) {pools}"

    hpa = _namespaced(lambda m: q.selector(X.hpa_desired, *m))
    replicas = Panel("replicas", "short", (
        Target(ksm(X.deployment_spec_replicas, "deployment"), POOL_LEGEND, "replicas_wanted", s.presence),
        Target(ksm(X.deployment_available, "deployment"), POOL_LEGEND, "replicas_available", s.presence),
        Target(ksm(X.statefulset_ready, "statefulset"), POOL_LEGEND, "replicas_ready", s.presence),
        Target(f"max by (namespace, horizontalpodautoscaler) ({hpa})",
               "{{namespace}}/{{horizontalpodautoscaler}}", "hpa_desired"),
    ), width=12)
    routed = (
        Target(_at_most(s, s.prompt_buckets, None), POOL_LEGEND, "requests"),
        Target(f"{_at_most(s, s.prompt_buckets, None)} - {_at_most(s, s.prompt_buckets, LONG_INPUT_TOKENS)}",
               POOL_LEGEND, "long_requests"),
    )
    return Row("platform", (
        Panel("restarts", "short", (Target(restarts, f"{POD_LEGEND} {{{{container}}}}", "restarts"),), width=12,
              params={"minutes": RESTART_WINDOW_S // 60}),
        Panel("oom_killed", "short", (Target(killed, f"{POD_LEGEND} {{{{container}}}}", "oom_killed"),), width=12,
              params={"minutes": RESTART_WINDOW_S // 60}),
        replicas,
        Panel("routing", "reqps", routed, width=12, params={"tokens": LONG_INPUT_TOKENS}),
    ))


def build_dashboard(engine: str) -> Dashboard:
    """The dashboard of one engine (one of ENGINES); ValueError for any other."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}: {engine!r}")
    s = SERIES[engine]
    presence = q.selector(s.presence)
    variables = [Variable("datasource", "datasource"),
                 Variable("namespace", "namespace", presence, "namespace")]
    narrowed = q.selector(s.presence, f"namespace=~{_var('namespace')}")
    if s.model_label:
        variables.append(Variable("model_name", "model", narrowed, s.model_label))
        narrowed = q.selector(s.presence, f"namespace=~{_var('namespace')}", f"{s.model_label}=~{_var('model_name')}")
    variables.append(Variable("pod", "pod", narrowed, "pod"))
    rows = (_gpu_row(), _profile_row(s), _service_row(s), _platform_row(s))
    return Dashboard(engine, UID_PREFIX + engine, tuple(variables), rows, ("gpumem", engine))


def build_dashboards(engines: tuple[str, ...] = ENGINES) -> tuple[Dashboard, ...]:
    """One dashboard per engine, in ENGINES' order."""
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise ValueError(f"engines must be among {ENGINES}: {engines!r}")
    return tuple(build_dashboard(e) for e in ENGINES if e in engines)


# ---------------------------------------------------------------------- Grafana's JSON


def layout(dashboard: Dashboard) -> dict[str, dict[str, int]]:
    """gridPos of every row header (`row:<id>`) and panel (`<row id>.<panel id>`): rows one under
    the other, panels left to right, wrapping at GRID_COLUMNS."""
    out: dict[str, dict[str, int]] = {}
    y = 0
    for row in dashboard.rows:
        out[f"row:{row.id}"] = {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y}
        y += 1
        x = 0
        for p in row.panels:
            if x + p.width > GRID_COLUMNS:
                x, y = 0, y + PANEL_HEIGHT
            out[f"{row.id}.{p.id}"] = {"h": PANEL_HEIGHT, "w": p.width, "x": x, "y": y}
            x += p.width
        y += PANEL_HEIGHT
    return out


def grafana(dashboard: Dashboard, words: Words) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model. `words(key, **params)` gives the text of a
    `dashboards.*` catalog key (titles, descriptions, legends)."""
    grid = layout(dashboard)
    panels: list[dict[str, Any]] = []
    ids = iter(range(1, 1000))
    engine = words(f"dashboards.engine.{dashboard.engine}")
    for row in dashboard.rows:
        panels.append({"id": next(ids), "type": "row", "title": words(f"dashboards.row.{row.id}"), "collapsed": False,
                       "gridPos": grid[f"row:{row.id}"], "panels": []})
        for p in row.panels:
            panels.append(_panel(p, next(ids), grid[f"{row.id}.{p.id}"], words, engine))
    return {
        "uid": dashboard.uid,
        "title": words("dashboards.title", engine=engine),
        "description": words("dashboards.description", engine=engine),
        "tags": list(dashboard.tags),
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": "utc",
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [_variable(v, words) for v in dashboard.variables]},
        "panels": panels,
    }


def _variable(v: Variable, words: Words) -> dict[str, Any]:
    label = words(f"dashboards.variable.{v.label_key}")
    if not v.selector:
        return {"name": v.name, "label": label, "type": "datasource", "query": "prometheus", "current": {},
                "hide": 0, "refresh": 1, "regex": "", "options": []}
    return {"name": v.name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": v.query, "refId": f"{v.name}-values"}, "definition": v.query,
            "multi": True, "includeAll": True, "current": {},
            "refresh": 2, "sort": 1, "hide": 0, "regex": "", "options": []}


def _panel(p: Panel, pid: int, grid: dict[str, int], words: Words, engine: str) -> dict[str, Any]:
    title = words(f"dashboards.panel.{p.id}.title")
    if p.missing:
        return {"id": pid, "type": "text", "title": title, "gridPos": grid,
                "options": {"mode": "markdown", "content": words(f"rules_cli.missing.{p.missing}")}}
    defaults: dict[str, Any] = {"unit": p.unit, "min": 0, "custom": {"lineWidth": 2, "fillOpacity": 10}}
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if p.line is not None:
        steps.append({"color": "red", "value": p.line})
        defaults["custom"]["thresholdsStyle"] = {"mode": "line+area"}
    if p.stack:
        defaults["custom"]["stacking"] = {"mode": "normal", "group": "A"}
        defaults["custom"]["fillOpacity"] = 60
    defaults["thresholds"] = {"mode": "absolute", "steps": steps}
    targets = []
    for i, t in enumerate(p.targets):
        series = words(f"dashboards.series.{t.series}")
        targets.append({"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": t.expr,
                        "legendFormat": f"{t.legend} {series}", "range": True, "instant": False})
    return {"id": pid, "type": "timeseries", "title": title,
            "description": words(f"dashboards.panel.{p.id}.description", engine=engine, **p.params)
            + (" " + words(f"dashboards.note.{p.note}", engine=engine, **p.params) if p.note else ""),
            "datasource": DATASOURCE, "gridPos": grid,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": targets}
