"""A real Prometheus loaded with a fleet's history, for `gpumem fleet` (tests/test_fleet.py).

Built like `tests.support.prom_harness` (OpenMetrics -> promtool blocks -> a served TSDB, the
same writer, histogram and server helpers), with one scenario per fleet: a list of `Dep`s,
each a Deployment (pods `<name>-<pod-template-hash>-<suffix>`) or a StatefulSet (`<name>-0`),
running vLLM (V1 or V0 names), SGLang, TGI or no engine, scraped with or without honorLabels.

`big_fleet()` holds 31 services in 6 namespaces whose ranking is known (`BIG_ORDER`), plus
decoys that must never show: a CronJob pod that restarts all the time but runs no engine and
holds no GPU. `small_fleet()` holds 3.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO
from urllib.parse import parse_qs, urlsplit

import requests
import yaml

from tests.support import yaml_c
from tests.support.loopback import LoopbackServer
from tests.support.prom_harness import (
    STEP_S,
    PromServer,
    _histogram,
    _labels,
    _Writer,
    backfill_rules,
    build_blocks,
    serving,
    start_prometheus,
    stop_prometheus,
)

WINDOW_S = 3600
LEAD_S = 900
#: the long-request mix changes this long before the end
SHIFT_BEFORE_S = 1800

_TTFT_LE = ("0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "10.0", "+Inf")
_TOKENS_LE = ("100.0", "200.0", "500.0", "1000.0", "2000.0", "5000.0", "10000.0", "20000.0", "+Inf")
#: TTFT observations per 15 s and pod: fast (p99 0.675 s) and slow (p99 2.455 s)
TTFT_FAST = {"0.5": 29, "0.75": 1}
TTFT_SLOW = {"0.5": 20, "2.5": 10}
TTFT_P99 = {"fast": 0.675, "slow": 2.455}
_HASH = "456789bcdf"
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class Dep:
    """One service. Per-pod values; queue and preemptions add up over pods, the rest take the most."""

    namespace: str
    name: str
    #: vllm (V1 names), vllm-v0 (V0 names), sglang, tgi, none (no engine: a GPU server of its own)
    engine: str
    pods: int = 1
    statefulset: bool = False
    kv: float = 0.3
    #: (value, from s before the end, to s before the end): KV usage held higher for a while
    kv_spike: tuple[float, int, int] | None = None
    queue: int = 0
    #: preemptions (retractions) per 15 s per pod during the last 15 minutes
    preempt_per_step: int = 0
    #: restarts in the window, each OOMKilled when `oom` (else Error)
    restarts: int = 0
    oom: bool = False
    ttft: str = "fast"
    #: long-request share (over 2048 input tokens) before and after SHIFT_BEFORE_S
    long_early: float = 0.1
    long_late: float = 0.1
    #: DCGM used / (used + free + reserved)
    gpu_used: float = 0.5
    #: kube-state-metrics and DCGM scraped without honorLabels (exported_pod / exported_namespace)
    exported: bool = False

    def pod_names(self) -> tuple[str, ...]:
        if self.statefulset:
            return tuple(f"{self.name}-{i}" for i in range(self.pods))
        seed = sum(ord(c) for c in self.namespace + self.name)
        template = "".join(_HASH[(seed * (i + 3)) % len(_HASH)] for i in range(9))
        return tuple(f"{self.name}-{template}-" + "".join(_SUFFIX[(seed + 7 * p + 5 * i) % len(_SUFFIX)]
                                                         for i in range(5)) for p in range(self.pods))

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Fleet:
    deps: tuple[Dep, ...]
    #: pods that must never show: (namespace, pod) restarting all the time, no engine, no GPU
    decoys: tuple[tuple[str, str], ...] = field(default_factory=tuple)


# ------------------------------------------------------------------ the fleets

INTERESTING = (
    # two OOM kills, a KV spike earlier in the hour, preemptions; DCGM full (preallocated: not shown)
    Dep("prod", "chat-70b", "vllm", pods=2, kv=0.8, kv_spike=(0.96, 2400, 1800), queue=2, preempt_per_step=1,
        restarts=1, oom=True, gpu_used=0.98, exported=True),
    # V0 names, KV full now, many preemptions
    Dep("prod", "code-34b", "vllm-v0", kv=0.99, queue=3, preempt_per_step=3, gpu_used=0.97),
    # the long-request share jumps from 8% to 37%, TTFT p99 above 2 s
    Dep("prod", "assist-8b", "vllm", kv=0.7, queue=1, ttft="slow", long_early=0.08, long_late=0.37),
    # two pods, 10 waiting each (every TP rank reports its dp_rank's queue)
    Dep("search", "rag-sgl", "sglang", pods=2, kv=0.6, queue=10),
    # a StatefulSet, batch tokens at 95% of the KV token budget
    Dep("batch", "summarize-tgi", "tgi", statefulset=True, kv=0.95, queue=6),
    # no engine: its own GPU memory counts (97% used, past GpumemGPUMemoryHigh's 95%)
    Dep("ml", "embedder", "none", gpu_used=0.97, exported=True),
)
#: score (largest capped closeness), at_line: chat-70b 2.0 (120 preemptions, 2 OOM kills), 4 at the
#: line; code-34b 2.0 (180 preemptions), 3; assist-8b 1.9333 (jump 29 points / 15); rag-sgl 1.6667
#: (queue 20 / 12); summarize-tgi 1.0556 (0.95 / 0.90); embedder 1.021 (0.97 / 0.95)
_CALM_ENGINES = ("vllm", "sglang", "tgi", "vllm-v0")
_CALM_NAMESPACES = ("team-a", "team-c", "prod", "search")


def calm(n: int) -> tuple[Dep, ...]:
    """`n` (at most 25) services below every line, with distinct KV usage (0.85 down by 0.02):
    KV usage is each one's closest reading, so their order is known."""
    return tuple(Dep(_CALM_NAMESPACES[i % 4], f"svc-{i:02d}", _CALM_ENGINES[i % 4],
                     statefulset=i % 5 == 4, kv=round(0.85 - 0.02 * i, 2), queue=i % 2)
                 for i in range(n))


def big_fleet() -> Fleet:
    return Fleet(INTERESTING + calm(25), decoys=(("team-b", "nightly-report-29012345-x7k2p"),))


def small_fleet() -> Fleet:
    return Fleet(calm(3))


BIG_ORDER = tuple(d.target for d in INTERESTING) + tuple(d.target for d in calm(25))


# ------------------------------------------------------------------ history


def fleet_openmetrics(fleet: Fleet, end_s: int) -> str:
    w = _Writer()
    write_fleet(w, fleet, end_s)
    return w.text()


def write_fleet(w: _Writer | FamilyFiles, fleet: Fleet, end_s: int, history_s: int = WINDOW_S + LEAD_S,
                step_s: int = STEP_S) -> None:
    """`fleet`'s samples from `history_s` before `end_s` to `end_s`, every `step_s`, into `w`."""
    times = range(end_s - history_s, end_s + 1, step_s)
    counts: dict[str, float] = {}

    def inc(key: str, by: float) -> float:
        counts[key] = counts.get(key, 0.0) + by
        return counts[key]

    for dep in fleet.deps:
        for pod in dep.pod_names():
            _engine(w, dep, pod, times, end_s, inc)
            _kube_state(w, dep, pod, times, end_s)
            _dcgm(w, dep, pod, times)
    for ns, pod in fleet.decoys:
        for t in times:
            w.add("restarts", "kube_pod_container_status_restarts_total",
                  _labels(namespace=ns, pod=pod, container="job"), (t - times.start) // 120, t)
            w.add("reason", "kube_pod_container_status_last_terminated_reason",
                  _labels(namespace=ns, pod=pod, container="job", reason="OOMKilled"), 1, t)


class FamilyFiles:
    """A `_Writer` for histories too large to hold in memory (the fleet benchmark): each metric
    family's lines go to a file of its own under `folder`, joined family after family at `finish`."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._files: dict[str, IO[str]] = {}

    def add(self, family: str, name: str, labels: str, value: float, at: float) -> None:
        out = self._files.get(family)
        if out is None:
            out = self._files[family] = (self.folder / f"family-{len(self._files):03d}.txt").open("w")
        out.write(f"{name}{{{labels}}} {value:.10g} {int(at)}\n")

    def finish(self, path: Path) -> int:
        """Write the OpenMetrics file to `path`, remove the family files; returns its size in bytes."""
        with path.open("wb") as dest:
            for out in self._files.values():
                out.close()
                part = Path(out.name)
                with part.open("rb") as src:
                    shutil.copyfileobj(src, dest, 1 << 20)
                part.unlink()
            dest.write(b"# EOF\n")
        self._files = {}
        return path.stat().st_size


def _engine(w: _Writer, dep: Dep, pod: str, times: range, end_s: int, inc) -> None:
    if dep.engine == "none":
        return
    base = _labels(namespace=dep.namespace, pod=pod, model_name="m")
    for t in times:
        before = end_s - t
        kv = dep.kv
        if dep.kv_spike and dep.kv_spike[2] <= before <= dep.kv_spike[1]:
            kv = dep.kv_spike[0]
        late = before < SHIFT_BEFORE_S
        preempt = dep.preempt_per_step if before < 900 else 0
        if dep.engine in ("vllm", "vllm-v0"):
            kv_name = "vllm:kv_cache_usage_perc" if dep.engine == "vllm" else "vllm:gpu_cache_usage_perc"
            w.add("waiting", "vllm:num_requests_waiting", base, dep.queue, t)
            w.add("running", "vllm:num_requests_running", base, 4, t)
            w.add(kv_name, kv_name, base, kv, t)
            w.add("preempt", "vllm:num_preemptions_total", base, inc(f"p{pod}", preempt), t)
            ttft, prompt = "vllm:time_to_first_token_seconds", "vllm:request_prompt_tokens"
        elif dep.engine == "sglang":
            for rank in ("0", "1"):  # two TP ranks of dp_rank 0, each reporting its queue
                ranked = f'{base},tp_rank="{rank}",dp_rank="0"'
                w.add("sglq", "sglang:num_queue_reqs", ranked, dep.queue, t)
                w.add("sglu", "sglang:token_usage", ranked, kv, t)
            w.add("sglr", "sglang:num_retracted_requests_total", base, inc(f"r{pod}", preempt), t)
            ttft, prompt = "sglang:time_to_first_token_seconds", "sglang:prompt_tokens_histogram"
        else:
            w.add("tgiq", "tgi_queue_size", base, dep.queue, t)
            w.add("tgicur", "tgi_batch_current_max_tokens", base, kv * 40000, t)
            w.add("tgimax", "tgi_batch_max_total_tokens", base, 40000, t)
            ttft, prompt = None, "tgi_request_input_length"
        if ttft:
            _histogram(w, f"ttft{dep.engine}", ttft, base, _TTFT_LE,
                       TTFT_SLOW if dep.ttft == "slow" else TTFT_FAST, t, inc)
        long_n = round(100 * (dep.long_late if late else dep.long_early))
        _histogram(w, f"prompt{dep.engine}", prompt, base, _TOKENS_LE, {"1000.0": 100 - long_n, "10000.0": long_n},
                   t, inc)


def _kube_state(w: _Writer, dep: Dep, pod: str, times: range, end_s: int) -> None:
    if dep.exported:
        labels = _labels(exported_namespace=dep.namespace, exported_pod=pod, exported_container="server",
                         namespace="monitoring", pod="kube-state-metrics-0", container="kube-state-metrics")
    else:
        labels = _labels(namespace=dep.namespace, pod=pod, container="server")
    # restarts at 40 and 20 minutes before the end
    moments = [end_s - 2400, end_s - 1200][:dep.restarts]
    reason = "OOMKilled" if dep.oom else "Error"
    for t in times:
        n = sum(t >= m for m in moments)
        w.add("restarts", "kube_pod_container_status_restarts_total", labels, n, t)
        if n:
            w.add("reason", "kube_pod_container_status_last_terminated_reason", f'{labels},reason="{reason}"', 1, t)


def _dcgm(w: _Writer, dep: Dep, pod: str, times: range) -> None:
    total, reserved = 81559, 527
    used = round(dep.gpu_used * total)
    if dep.exported:
        labels = _labels(gpu="0", UUID=f"GPU-{pod}", Hostname="node-1", exported_namespace=dep.namespace,
                         exported_pod=pod, namespace="gpu-operator", pod="nvidia-dcgm-exporter-x1")
    else:
        labels = _labels(gpu="0", uuid=f"GPU-{pod}", hostname="node-2", namespace=dep.namespace, pod=pod)
    for t in times:
        w.add("used", "DCGM_FI_DEV_FB_USED", labels, used, t)
        w.add("free", "DCGM_FI_DEV_FB_FREE", labels, total - reserved - used, t)
        w.add("reserved", "DCGM_FI_DEV_FB_RESERVED", labels, reserved, t)


def gpu_used_ratio(dep: Dep) -> float:
    """What DCGM's used / (used + free + reserved) reads for `dep`."""
    return round(dep.gpu_used * 81559) / 81559


# ------------------------------------------------------------------ server


@contextlib.contextmanager
def run_fleet_prometheus(workdir: Path, fleet: Fleet, end_s: int) -> Iterator[PromServer]:
    """Load `fleet`'s history, ending at `end_s`, into a fresh TSDB and serve it."""
    source = workdir / "fleet.om.txt"
    source.write_text(fleet_openmetrics(fleet, end_s))
    data = workdir / "data"
    build_blocks(source, data, "the fleet", timeout_s=300)
    with serving(data, workdir) as url:
        yield PromServer(url=url, end_s=end_s, data_dir=data)


def write_recording_rules(path: Path, engines: tuple[str, ...] | None = None) -> Path:
    """The recording-rule group of what `gpumem rules -o rules` writes, alone, as a rule file."""
    from bot.render.rules import document
    from bot.service.outcomes import RulesOutcome
    from runbooks.alerts.engines import ENGINES
    from runbooks.alerts.fleet_queries import RECORDING_GROUP, recording_rules
    from runbooks.alerts.rules import build_rules

    chosen = engines or ENGINES
    outcome = RulesOutcome(build_rules(chosen), "rules", "README.md", recordings=recording_rules(chosen))
    groups = [g for g in document(outcome, "en")["groups"] if g["name"] == RECORDING_GROUP]
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def backfill_recording_rules(rules: Path, data: Path, workdir: Path, start_s: int, end_s: int,
                             timeout_s: float | None = None, ready_s: float = 30.0) -> None:
    """The rule file's recordings from `start_s` to `end_s` into the TSDB `data`, as a Prometheus
    evaluating them would have written them. promtool evaluates every rule against the server's
    data, where a rule's own results are not yet (a rule over another rule of the group, as the
    KV peak over the KV gauge, would read nothing): so first the rules over the raw series, then,
    served with their blocks, the rules over those, in as many rounds as the chain is long."""
    groups = yaml_c.safe_load(rules.read_text())["groups"]
    pending = [(g, r) for g in groups for r in g["rules"]]
    done: set[str] = set()
    for round_ in range(len(pending)):
        if not pending:
            return
        names = {r["record"] for _, r in pending}
        ready = [(g, r) for g, r in pending if not any(n in r["expr"] for n in names - {r["record"]})]
        if not ready:
            raise RuntimeError(f"{rules.name}: the recording rules {sorted(names)} read each other")
        part = workdir / f"{rules.stem}.round{round_}.yml"
        part.write_text(yaml.safe_dump({"groups": [
            {**g, "rules": [r for h, r in ready if h is g]} for g in groups if any(h is g for h, _ in ready)]},
            sort_keys=False))
        proc, url = start_prometheus(data, workdir, ready_s=ready_s)
        try:
            backfill_rules(part, url, start_s, end_s, data, workdir, timeout_s=timeout_s)
        finally:
            stop_prometheus(proc)
        done |= {r["record"] for _, r in ready}
        pending = [(g, r) for g, r in pending if r["record"] not in done]


@contextlib.contextmanager
def run_recorded_fleet_prometheus(workdir: Path, fleet: Fleet, end_s: int, *, backfill_s: int = 4200,
                                  engines: tuple[str, ...] | None = None) -> Iterator[PromServer]:
    """`fleet`'s history with gpumem's recording rules evaluated over its last `backfill_s`
    (promtool), served by a Prometheus that has the rules loaded."""
    source = workdir / "fleet.om.txt"
    source.write_text(fleet_openmetrics(fleet, end_s))
    data = workdir / "data"
    build_blocks(source, data, "the fleet", timeout_s=300)
    rules = write_recording_rules(workdir / "gpumem-fleet.rules.yml", engines)
    # promtool's end is exclusive: one interval more, so that the last evaluation is at end_s
    backfill_recording_rules(rules, data, workdir, end_s - backfill_s, end_s + 60, timeout_s=600)
    proc, url = start_prometheus(data, workdir, rule_files=(rules,))
    try:
        yield PromServer(url=url, end_s=end_s, data_dir=data)
    finally:
        stop_prometheus(proc)


# ------------------------------------------------------------------ a proxy that counts, or breaks one query


class BreakingProxy(LoopbackServer):
    """Forwards the query API to `upstream` and keeps every PromQL it received (`received`, in
    arrival order; other API calls' paths in `other`), except queries whose PromQL contains `marker`: those get HTTP `status` (500
    by default), or, with `delay_s`, an answer that late. Without a marker it only counts."""

    thread_name = "prom-proxy"

    def __init__(self, upstream: str, marker: str | None = None, status: int = 500, delay_s: float = 0.0):
        self.upstream, self.marker, self.status, self.delay_s = upstream, marker, status, delay_s
        self.broken: list[str] = []
        self.received: list[str] = []
        #: paths of the other API calls (the rules API), forwarded as they came
        self.other: list[str] = []
        self._lock = threading.Lock()

    class handler(BaseHTTPRequestHandler):
        server_state: BreakingProxy

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if not path.endswith(("/query", "/query_range")):  # the rules API: forwarded, counted apart
                proxy = self.server_state
                with proxy._lock:
                    proxy.other.append(path)
                try:
                    resp = requests.get(proxy.upstream + self.path, timeout=30)
                except requests.RequestException:
                    self._answer(502, b"upstream unreachable", "text/plain")
                    return
                self._answer(resp.status_code, resp.content, resp.headers.get("Content-Type", "application/json"))
                return
            self._serve(parse_qs(urlsplit(self.path).query))

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            self._serve(parse_qs(body))

        def _serve(self, params: dict[str, list[str]]) -> None:
            proxy = self.server_state
            promql = (params.get("query") or [""])[0]
            with proxy._lock:
                proxy.received.append(promql)
            if proxy.marker is not None and proxy.marker in promql:
                proxy.broken.append(promql)
                if proxy.delay_s:  # the client has given up by then: a late gateway timeout
                    time.sleep(proxy.delay_s)
                    self._answer(504, b"upstream timed out", "text/plain")
                else:
                    self._answer(proxy.status, b"upstream exploded", "text/plain")
                return
            flat = {k: v[0] for k, v in params.items()}
            try:
                resp = requests.post(proxy.upstream + urlsplit(self.path).path, data=flat, timeout=30)
            except requests.RequestException:
                self._answer(502, b"upstream unreachable", "text/plain")
                return
            self._answer(resp.status_code, resp.content, resp.headers.get("Content-Type", "application/json"))

        def _answer(self, status: int, body: bytes, ctype: str) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout)
