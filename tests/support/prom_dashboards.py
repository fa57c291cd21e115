"""A real Prometheus holding what every panel of `gpumem dashboards` reads, per engine.

Built like `tests.support.prom_harness` (OpenMetrics -> promtool blocks -> a served TSDB, the
same writer, histogram and server helpers). Each engine runs in its own namespace with two
pools: a Deployment of two pods and a StatefulSet of one, under the engine's own metric names
(`runbooks.alerts.engines.SERIES`: the dashboards must find them there, not in this file's
spelling) and model label. Beside them, per pod: DCGM (framebuffer, utilisation, temperature,
power), scraped with honorLabels for the first pod (lower-case `uuid`) and without for the others
(`exported_pod`, upper-case `UUID`); gpumem's NVML agent on the node, under its own pod, with the
same GPU UUIDs; kube-state-metrics (restarts, an OOM kill 5 minutes before the end, replicas, an
HPA). A decoy namespace holds another team's pod that must never show.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runbooks.alerts.engines import ENGINES, EXPORTERS, SERIES
from tests.support.prom_harness import STEP_S, PromServer, _histogram, _labels, _Writer, build_blocks, serving

WINDOW_S = 1800
#: the OOM kill, this long before the end
OOM_BEFORE_S = 300
TOTAL_MIB, RESERVED_MIB = 81559, 527
#: bucket bounds in the engines' own styles: vLLM's and SGLang's 1-2-5, TGI's linear hundredths
TOKEN_BOUNDS = {
    "vllm": ("100.0", "200.0", "500.0", "1000.0", "2000.0", "5000.0", "10000.0", "+Inf"),
    "sglang": ("100.0", "300.0", "500.0", "1000.0", "2000.0", "3000.0", "5000.0", "10000.0", "+Inf"),
    # max_total_tokens 8192: 81.92 x 1, 2, 3, 6, 25, 50, 100 (a subset of its hundred bounds)
    "tgi": ("81.92", "163.84", "245.76", "491.52", "2048", "4096", "8192", "+Inf"),
}
_TTFT = ("0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "+Inf")
DECOY_NS, DECOY_POD = "team-b", "other-model-7d9f8c6b4-x2k9p"


@dataclass(frozen=True)
class EngineNamespace:
    engine: str
    namespace: str
    model: str
    deployment: str
    #: the Deployment's pods, then the StatefulSet's
    pods: tuple[str, ...]
    statefulset: str

    def uuid(self, pod: str) -> str:
        return f"GPU-{ENGINES.index(self.engine)}{self.pods.index(pod)}000000-0000-4000-8000-000000000000"


def namespaces() -> tuple[EngineNamespace, ...]:
    out = []
    for e in ENGINES:
        dep, sts = f"{e}-chat", f"{e}-long"
        out.append(EngineNamespace(e, f"llm-{e}", f"qwen-{e}", dep,
                                   (f"{dep}-7d9f8c6b4-x2k9p", f"{dep}-7d9f8c6b4-b7mzq", f"{sts}-0"), sts))
    return tuple(out)


def used_mib(i: int) -> int:
    """DCGM's (and the agent's) used memory of the namespace's `i`-th pod."""
    return 70000 + 1000 * i


def _names(regex: str) -> list[str]:
    return regex.split("|")


def history(end_s: int) -> str:
    w = _Writer()
    times = range(end_s - WINDOW_S, end_s + 1, STEP_S)
    counts: dict[str, float] = {}

    def inc(key: str, by: float) -> float:
        counts[key] = counts.get(key, 0.0) + by
        return counts[key]

    for ns in namespaces():
        for i, pod in enumerate(ns.pods):
            _engine(w, ns, pod, i, times, inc)
            _dcgm(w, ns, pod, i, times)
            _agent(w, ns, pod, i, times)
            _kube_pod(w, ns, pod, i, times, end_s)
        _kube_pools(w, ns, times)
    decoy = _labels(namespace=DECOY_NS, pod=DECOY_POD, model_name="other")
    for t in times:
        for name in _names(SERIES["vllm"].presence)[:2]:
            w.add(name, name, decoy, 999, t)
    return w.text()


def _engine(w: _Writer, ns: EngineNamespace, pod: str, i: int, times: range, inc) -> None:
    s = SERIES[ns.engine]
    labels = dict(namespace=ns.namespace, pod=pod)
    if s.model_label:
        labels[s.model_label] = ns.model
    base = _labels(**labels)
    ranked = base + (',tp_rank="0",dp_rank="0"' if s.queue_distinct else "")
    bounds = TOKEN_BOUNDS[ns.engine]
    for t in times:
        w.add(s.queue, s.queue, ranked, 3 + i, t)
        for name in _names(s.presence):
            if name not in (s.queue, *_names(s.kv_usage or ""), *(s.kv_ratio or ())):
                w.add(name, name, base, 3 + i, t)
        if s.kv_usage:
            for name in _names(s.kv_usage):
                w.add(name, name, ranked, 0.5 + 0.1 * i, t)
        else:
            used, budget = s.kv_ratio
            w.add(used, used, base, 20000 + 5000 * i, t)
            w.add(budget, budget, base, 40000, t)
        # per 15 s: 20 requests, of every length class
        per_le = {bounds[0]: 8, bounds[2]: 4, bounds[4]: 4, bounds[5]: 2, "+Inf": 2}
        for family, name in (("prompt", s.prompt_buckets), ("gen", s.generation_buckets)):
            _histogram(w, f"{family}{ns.engine}", name.removesuffix("_bucket"), base, bounds, per_le, t, inc)
        if s.ttft_buckets:
            _histogram(w, f"ttft{ns.engine}", s.ttft_buckets.removesuffix("_bucket"), base, _TTFT,
                       {"0.25": 15, "2.5": 5}, t, inc)
        reason = ',finished_reason="abort"' if s.rejects_by == "finished_reason" else (
            ',err="overloaded"' if s.rejects_by == "err" else "")
        w.add(s.rejects, s.rejects, base + reason, inc(f"rej{pod}", 1), t)
        if s.preemptions:
            w.add(s.preemptions, s.preemptions, base, inc(f"pre{pod}", 2), t)
        if s.preemptions_gauge:
            w.add(s.preemptions_gauge, s.preemptions_gauge, ranked, 1, t)


def _device(ns: EngineNamespace, pod: str, i: int) -> str:
    if i == 0:  # honorLabels, newer exporter (lower-case hostname and uuid)
        return _labels(gpu=str(i), uuid=ns.uuid(pod), hostname="gpu-node-1", namespace=ns.namespace, pod=pod,
                       container="server")
    return _labels(gpu=str(i), UUID=ns.uuid(pod), Hostname="gpu-node-1", exported_namespace=ns.namespace,
                   exported_pod=pod, exported_container="server", namespace="gpu-operator",
                   pod="nvidia-dcgm-exporter-x1", container="exporter")


def _dcgm(w: _Writer, ns: EngineNamespace, pod: str, i: int, times: range) -> None:
    dev = _device(ns, pod, i)
    used = used_mib(i)
    for t in times:
        w.add("used", _names(EXPORTERS.fb_used)[0], dev, used, t)
        w.add("free", _names(EXPORTERS.fb_free)[0], dev, TOTAL_MIB - RESERVED_MIB - used, t)
        w.add("reserved", EXPORTERS.fb_reserved, dev, RESERVED_MIB, t)
        w.add("util", _names(EXPORTERS.gpu_util)[0], dev, 40 + i, t)
        w.add("temp", _names(EXPORTERS.gpu_temp)[0], dev, 60 + i, t)
        w.add("power", _names(EXPORTERS.power)[0], dev, 350.5 + i, t)


def _agent(w: _Writer, ns: EngineNamespace, pod: str, i: int, times: range) -> None:
    # the agent's own pod and namespace, as a ServiceMonitor on its Service labels them
    dev = _labels(gpu=str(i), uuid=ns.uuid(pod), name="NVIDIA H100 80GB HBM3", mig_profile="",
                  namespace="gpumem", pod="gpumem-agent-q7x2z", instance="10.0.0.9:9500")
    for t in times:
        w.add("agent_used", EXPORTERS.agent_used, dev, used_mib(i) * 1048576, t)
        w.add("agent_total", EXPORTERS.agent_total, dev, TOTAL_MIB * 1048576, t)
        w.add("agent_util", EXPORTERS.agent_util, dev, 0.41, t)


def _kube_pod(w: _Writer, ns: EngineNamespace, pod: str, i: int, times: range, end_s: int) -> None:
    if i == 0:
        labels = _labels(namespace=ns.namespace, pod=pod, container="server")
    else:
        labels = _labels(exported_namespace=ns.namespace, exported_pod=pod, exported_container="server",
                         namespace="monitoring", pod="kube-state-metrics-0", container="kube-state-metrics")
    oom = end_s - OOM_BEFORE_S
    for t in times:
        w.add("restarts", EXPORTERS.restarts, labels, int(t >= oom), t)
        if t >= oom:
            w.add("reason", EXPORTERS.terminated_reason, labels + ',reason="OOMKilled"', 1, t)


def _kube_pools(w: _Writer, ns: EngineNamespace, times: range) -> None:
    dep = _labels(namespace=ns.namespace, deployment=ns.deployment)
    sts = _labels(exported_namespace=ns.namespace, statefulset=ns.statefulset, namespace="monitoring")
    hpa = _labels(namespace=ns.namespace, horizontalpodautoscaler=ns.deployment)
    other = _labels(namespace=ns.namespace, deployment="unrelated-web")
    for t in times:
        w.add("spec", EXPORTERS.deployment_spec_replicas, dep, 2, t)
        w.add("spec", EXPORTERS.deployment_spec_replicas, other, 5, t)
        w.add("avail", EXPORTERS.deployment_available, dep, 2, t)
        w.add("sts", EXPORTERS.statefulset_ready, sts, 1, t)
        w.add("hpa", EXPORTERS.hpa_desired, hpa, 3, t)


@contextlib.contextmanager
def run_dashboard_prometheus(workdir: Path, end_s: int) -> Iterator[PromServer]:
    source = workdir / "dashboards.om.txt"
    source.write_text(history(end_s))
    data = workdir / "data"
    build_blocks(source, data, "the dashboards' history", timeout_s=180)
    with serving(data, workdir) as url:
        yield PromServer(url=url, end_s=end_s, data_dir=data)
