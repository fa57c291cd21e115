"""A real Prometheus server loaded with one scenario's history, for the collector's tests.

The scenario is written as OpenMetrics text (`scenario_openmetrics`), turned into TSDB blocks
by `promtool tsdb create-blocks-from openmetrics`, and served by `prometheus` on a free
loopback port with no scrape targets (`run_prometheus`). History ends a few minutes before
the wall clock, on a 60 s boundary, so that range queries at a 15 s step land on samples.

The story (namespace "llm", Deployment "vllm-server", vLLM V1):
- pod A (2 data-parallel engines) on gpu-node-1 GPU 0: DCGM scraped WITHOUT honorLabels
  (exported_pod / exported_namespace, upper-case Hostname / UUID); two OOMKilled restarts;
- pod B on gpu-node-2 GPU 3: DCGM with honorLabels and the newer lower-case hostname / uuid;
  one restart (reason Error) seen only through kube-state-metrics scraped without honorLabels;
- pod C, a canary with a dot in its name, on a MIG 3g.40gb slice of gpu-node-1 GPU 1;
- decoys that must never match: a name the unescaped dot would match, a longer name with pod
  A's as prefix, pod A's name in another namespace, another team's pod;
- request lengths: 8% of requests are long (L+XL) in the first half, 37% in the second;
- one pod each of vLLM V0, TGI and SGLang in their own namespaces.

Prometheus must be installed (`make test` installs Debian's `prometheus` package); without
it the fixture fails and says so.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from tests.support import fast

STEP_S = 15
WINDOW_S = 3600
#: how long before the window the history starts (lookback for rate() and increase())
LEAD_S = 900
NS = "llm"
POD_A = "vllm-server-7d9f8-abcde"
POD_B = "vllm-server-7d9f8-fghij"
POD_C = "vllm-server.canary-0"
PODS = (POD_A, POD_B, POD_C)
DEVICE_A, DEVICE_B, DEVICE_C = "gpu-node-1/gpu0", "gpu-node-2/gpu3", "gpu-node-1/gpu1/3g.40gb#2"

TOTAL_MIB = 81559  # H100 80GB HBM3
RESERVED_MIB = 527
MIG_TOTAL_MIB = 40192
FLAT_A_MIB = 73400
PEAK_A_MIB = 80900  # one sample just before each OOM kill
PEAK_B_MIB = 74000
USED_C_MIB = 30000
DECOY_MIB = 11111

# seconds before the end of the window
OOM1_BEFORE_S = 1500
OOM2_BEFORE_S = 600
#: kube-state-metrics' exact termination time is this much before the counter moves
TERMINATED_EARLY_S = 7
#: pod B restarts at this offset; its kube-state-metrics samples sit 7 s off the 15 s grid
RESTART_B_BEFORE_S = 2003
KSM_B_OFFSET_S = 7

QUEUE_PEAK = 18  # 5 + 4 (pod A engines) + 9 (pod B's spike) + 0 (pod C)
KV_USAGE_PEAK = 0.97
PREEMPTIONS_PER_S = 0.1  # pod A, last 15 minutes
LONG_SHARE_EARLY, LONG_SHARE_LATE = 0.08, 0.37
SHIFT_BEFORE_S = 1800  # the mix changes half-way

V0_NS, V0_POD, V0_USAGE, V0_QUEUE = "legacy", "vllm-v0-0", 0.91, 3
TGI_NS, TGI_POD, TGI_QUEUE, TGI_USAGE = "tgi", "tgi-0", 7, 0.75
SGL_NS, SGL_POD, SGL_QUEUE, SGL_USAGE = "sglang", "sgl-0", 9, 0.66
#: SGLang 0.5.7+'s retraction counter, rising by this much per 15 s step over the whole window
SGL_RETRACTIONS_PER_STEP = 1

_TTFT_LE = ("0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "10.0", "+Inf")
_TOKENS_LE = ("100.0", "200.0", "500.0", "1000.0", "2000.0", "5000.0", "10000.0", "20000.0", "+Inf")


@dataclass(frozen=True)
class PromServer:
    url: str
    #: the end of the scenario's window (unix seconds, on a 60 s boundary)
    end_s: int
    data_dir: Path

    @property
    def end(self) -> datetime:
        return datetime.fromtimestamp(self.end_s, tz=UTC)


def _labels(**labels: str) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


class _Writer:
    """Collects samples grouped by metric family, as OpenMetrics wants them."""

    def __init__(self) -> None:
        self.families: dict[str, list[str]] = {}

    def add(self, family: str, name: str, labels: str, value: float, at: float) -> None:
        self.families.setdefault(family, []).append(f"{name}{{{labels}}} {value:.10g} {int(at)}")

    def text(self) -> str:
        lines = [line for family in self.families.values() for line in family]
        return "\n".join([*lines, "# EOF", ""])


# ------------------------------------------------------------------ scenario


def scenario_openmetrics(end_s: int) -> str:
    """The whole scenario's history as OpenMetrics text ending at `end_s` (unix seconds)."""
    w = _Writer()
    times = range(end_s - WINDOW_S - LEAD_S, end_s + 1, STEP_S)
    _dcgm(w, times, end_s)
    _kube_state(w, times, end_s)
    _vllm_v1(w, times, end_s)
    _other_engines(w, times)
    return w.text()


def used_a_mib(t: int, end_s: int) -> float:
    """Pod A's GPU memory: flat, a peak just before each OOM kill, then empty and reloading."""
    for before in (OOM1_BEFORE_S, OOM2_BEFORE_S):
        oom = end_s - before
        if t == oom - STEP_S:
            return PEAK_A_MIB
        if oom <= t < oom + 2 * STEP_S:
            return 0.0
        if oom + 2 * STEP_S <= t < oom + 10 * STEP_S:
            return FLAT_A_MIB * (t - oom - STEP_S) // (9 * STEP_S)  # DCGM reports whole MiB
    return FLAT_A_MIB


def used_b_mib(t: int, end_s: int) -> float:
    """Pod B's GPU memory climbs from 60000 MiB to its peak 300 s before the end, then holds."""
    start, top = end_s - WINDOW_S - LEAD_S, end_s - 300
    return PEAK_B_MIB if t >= top else 60000 + (PEAK_B_MIB - 60000) * (t - start) // (top - start)


def _dcgm(w: _Writer, times: range, end_s: int) -> None:
    dev_a = _labels(gpu="0", UUID="GPU-0a1b2c3d-0000-4000-8000-00000000000a", device="nvidia0",
                    modelName="NVIDIA H100 80GB HBM3", Hostname="gpu-node-1", container="vllm",
                    exported_namespace=NS, exported_pod=POD_A, exported_container="vllm",
                    namespace="gpu-operator", pod="nvidia-dcgm-exporter-x1", job="dcgm-exporter")
    dev_b = _labels(gpu="3", uuid="GPU-0a1b2c3d-0000-4000-8000-00000000000b", device="nvidia3",
                    modelName="NVIDIA H100 80GB HBM3", hostname="gpu-node-2", container="vllm",
                    namespace=NS, pod=POD_B, job="dcgm-exporter")
    dev_c = _labels(gpu="1", UUID="GPU-0a1b2c3d-0000-4000-8000-00000000000c", GPU_I_PROFILE="3g.40gb",
                    GPU_I_ID="2", Hostname="gpu-node-1", exported_namespace=NS, exported_pod=POD_C,
                    namespace="gpu-operator", pod="nvidia-dcgm-exporter-x1", job="dcgm-exporter")
    decoys = [
        _labels(gpu="2", UUID="GPU-d1", Hostname="gpu-node-1", exported_namespace=NS,
                exported_pod="vllm-serverXcanary-0", namespace="gpu-operator", pod="nvidia-dcgm-exporter-x1"),
        _labels(gpu="4", uuid="GPU-d2", hostname="gpu-node-2", namespace=NS, pod=POD_A + "-old"),
        _labels(gpu="5", UUID="GPU-d3", Hostname="gpu-node-3", namespace="staging", pod=POD_A),
        _labels(gpu="6", UUID="GPU-d4", Hostname="gpu-node-1", exported_namespace="team-b",
                exported_pod="other-model-0", namespace="gpu-operator", pod="nvidia-dcgm-exporter-x1"),
    ]
    for t in times:
        a, b = used_a_mib(t, end_s), used_b_mib(t, end_s)
        for name, value_a, value_b, value_c in (
            ("DCGM_FI_DEV_FB_USED", a, b, USED_C_MIB),
            ("DCGM_FI_DEV_FB_FREE", TOTAL_MIB - RESERVED_MIB - a, TOTAL_MIB - RESERVED_MIB - b,
             MIG_TOTAL_MIB - USED_C_MIB),
        ):
            w.add(name, name, dev_a, value_a, t)
            w.add(name, name, dev_b, value_b, t)
            w.add(name, name, dev_c, value_c, t)
            for decoy in decoys:
                w.add(name, name, decoy, DECOY_MIB, t)
        # MIG slices report no reserved memory here: total falls back to used + free
        w.add("DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_RESERVED", dev_a, RESERVED_MIB, t)
        w.add("DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_RESERVED", dev_b, RESERVED_MIB, t)


def _kube_state(w: _Writer, times: range, end_s: int) -> None:
    ksm_a = _labels(namespace=NS, pod=POD_A, container="vllm", job="kube-state-metrics")
    oom1, oom2 = end_s - OOM1_BEFORE_S, end_s - OOM2_BEFORE_S
    for t in times:
        restarts = (t >= oom1) + (t >= oom2)
        w.add("restarts", "kube_pod_container_status_restarts_total", ksm_a, restarts, t)
        if restarts:
            w.add("reason", "kube_pod_container_status_last_terminated_reason",
                  ksm_a + ',reason="OOMKilled"', 1, t)
            last = oom2 if t >= oom2 else oom1
            w.add("term", "kube_pod_container_status_last_terminated_timestamp", ksm_a,
                  last - TERMINATED_EARLY_S, t)
        # another team's pod restarts all the time; it must never show
        w.add("restarts", "kube_pod_container_status_restarts_total",
              _labels(namespace="team-b", pod="other-model-0", container="vllm"), (t - times.start) // 300, t)
    # pod B through a kube-state-metrics scraped without honorLabels, off the query grid
    ksm_b = _labels(exported_namespace=NS, exported_pod=POD_B, exported_container="vllm",
                    namespace="monitoring", pod="kube-state-metrics-0", container="vllm")
    restart_b = end_s - RESTART_B_BEFORE_S
    for t in range(times.start + KSM_B_OFFSET_S, times.stop, 30):
        w.add("restarts", "kube_pod_container_status_restarts_total", ksm_b, int(t >= restart_b), t)
        if t >= restart_b:
            w.add("reason", "kube_pod_container_status_last_terminated_reason", ksm_b + ',reason="Error"', 1, t)


def _vllm_v1(w: _Writer, times: range, end_s: int) -> None:
    targets = {
        (POD_A, "0"): _labels(namespace=NS, pod=POD_A, model_name="qwen", engine="0"),
        (POD_A, "1"): _labels(namespace=NS, pod=POD_A, model_name="qwen", engine="1"),
        (POD_B, "0"): _labels(namespace=NS, pod=POD_B, model_name="qwen", engine="0"),
        (POD_C, "0"): _labels(namespace=NS, pod=POD_C, model_name="qwen", engine="0"),
    }
    decoys = [_labels(namespace=NS, pod="vllm-serverXcanary-0", engine="0"),
              _labels(namespace="staging", pod=POD_A, engine="0")]
    counts: dict[str, float] = {}

    def inc(key: str, by: float) -> float:
        counts[key] = counts.get(key, 0.0) + by
        return counts[key]

    for t in times:
        before = end_s - t
        busy = 300 <= before <= 900
        queue = {(POD_A, "0"): 5 if busy else 2, (POD_A, "1"): 4 if busy else 1,
                 (POD_B, "0"): (9 if before == 600 else 6) if busy else 1, (POD_C, "0"): 0}
        usage = {(POD_A, "0"): KV_USAGE_PEAK if before <= 900 else 0.62, (POD_A, "1"): 0.5,
                 (POD_B, "0"): 0.8, (POD_C, "0"): 0.3}
        late = before < SHIFT_BEFORE_S
        for key, labels in targets.items():
            w.add("waiting", "vllm:num_requests_waiting", labels, queue[key], t)
            w.add("kv", "vllm:kv_cache_usage_perc", labels, usage[key], t)
            preempt = PREEMPTIONS_PER_S * STEP_S if key == (POD_A, "0") and before < 900 else 0.0
            w.add("preempt", "vllm:num_preemptions_total", labels, inc(f"p{key}", preempt), t)
            if key[0] == POD_C:
                continue  # the canary takes no traffic
            # TTFT: early everything under 0.75 s; late a third waits 2.5-5 s
            ttft = {"0.5": 29, "0.75": 1} if not late else {"0.5": 20, "5.0": 10}
            _histogram(w, "ttft", "vllm:time_to_first_token_seconds", labels, _TTFT_LE, ttft, t, inc)
            # 100 requests per 15 s per engine: 8 long (5000-10000 tokens) early, 37 late; the
            # short ones sit under 200 tokens, so no bucket straddles a runbook limit
            long_n = round(100 * (LONG_SHARE_LATE if late else LONG_SHARE_EARLY))
            prompts = {"200.0": 100 - long_n, "10000.0": long_n}
            _histogram(w, "prompt", "vllm:request_prompt_tokens", labels, _TOKENS_LE, prompts, t, inc)
            _histogram(w, "gen", "vllm:request_generation_tokens", labels, _TOKENS_LE, {"100.0": 100}, t, inc)
        for labels in decoys:
            w.add("waiting", "vllm:num_requests_waiting", labels, 500, t)
            w.add("kv", "vllm:kv_cache_usage_perc", labels, 1.0, t)


def _histogram(w: _Writer, family: str, name: str, labels: str, bounds: tuple[str, ...],
               new_per_bound: dict[str, int], t: int, inc) -> None:
    """Cumulative buckets after adding `new_per_bound` observations (bucket upper bound -> count)."""
    running = 0.0
    for le in bounds:
        running += new_per_bound.get(le, 0)
        w.add(family, f"{name}_bucket", f'{labels},le="{le}"', inc(f"{family}{labels}{le}", running), t)
    w.add(family, f"{name}_count", labels, inc(f"{family}{labels}count", running), t)


def _other_engines(w: _Writer, times: range) -> None:
    v0 = _labels(namespace=V0_NS, pod=V0_POD, model_name="llama")
    tgi = _labels(namespace=TGI_NS, pod=TGI_POD)
    sgl = _labels(namespace=SGL_NS, pod=SGL_POD, model_name="qwen", tp_rank="0")
    retracted = 0
    for t in times:
        w.add("waiting", "vllm:num_requests_waiting", v0, V0_QUEUE, t)
        w.add("v0kv", "vllm:gpu_cache_usage_perc", v0, V0_USAGE, t)
        w.add("tgiq", "tgi_queue_size", tgi, TGI_QUEUE, t)
        w.add("tgicur", "tgi_batch_current_max_tokens", tgi, TGI_USAGE * 40000, t)
        w.add("tgimax", "tgi_batch_max_total_tokens", tgi, 40000, t)
        w.add("sglq", "sglang:num_queue_reqs", sgl, SGL_QUEUE, t)
        w.add("sglu", "sglang:token_usage", sgl, SGL_USAGE, t)
        retracted += SGL_RETRACTIONS_PER_STEP
        w.add("sglr", "sglang:num_retracted_requests_total", sgl, retracted, t)


# --------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _require(tool: str) -> str:
    if fast.enabled and tool in ("prometheus", "promtool"):
        pytest.skip("`pytest --fast` starts no real Prometheus (make test runs this test)")
    path = shutil.which(tool) or (f"/usr/bin/{tool}" if Path(f"/usr/bin/{tool}").exists() else None)
    if path is None:
        raise RuntimeError(
            f"`{tool}` is not installed: the Prometheus tests need a real server. Run `make test`, which "
            "installs Debian's `prometheus` package (prometheus and promtool), or install it yourself."
        )
    return path


@contextlib.contextmanager
def run_prometheus(workdir: Path, end_s: int | None = None) -> Iterator[PromServer]:
    """Load the scenario into a fresh TSDB under `workdir` and serve it until the block exits."""
    end_s = end_s if end_s is not None else (int(time.time()) // 60) * 60 - 300
    source = workdir / "history.om.txt"
    source.write_text(scenario_openmetrics(end_s))
    data = workdir / "data"
    build_blocks(source, data, "the scenario", timeout_s=120)
    with serving(data, workdir) as url:
        yield PromServer(url=url, end_s=end_s, data_dir=data)


def build_blocks(source: Path, data: Path, what: str, timeout_s: float | None = None) -> None:
    """`promtool tsdb create-blocks-from openmetrics SOURCE DATA`; RuntimeError naming `what` if it fails."""
    built = subprocess.run([_require("promtool"), "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source),
                            str(data)], capture_output=True, text=True, timeout=timeout_s)
    if built.returncode != 0:
        raise RuntimeError(f"promtool could not load {what}: {built.stderr[-2000:]}")


def start_prometheus(data: Path, workdir: Path, query_log: Path | None = None,
                     ready_s: float = 30.0, rule_files: tuple[Path, ...] = ()) -> tuple[subprocess.Popen, str]:
    """A Prometheus serving the TSDB `data` on a free loopback port (its log in `workdir`; each
    query written to `query_log` when given; `rule_files` loaded), once it answers /-/ready:
    (process, URL)."""
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\n  evaluation_interval: 1h\n"
                      + (f"  query_log_file: {query_log}\n" if query_log else "")
                      + ("rule_files:\n" + "".join(f"  - {f}\n" for f in rule_files) if rule_files else "")
                      + "scrape_configs: []\n")
    port = free_port()
    log_path = workdir / "prometheus.log"
    with log_path.open("w") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [_require("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=10y"],
            stdout=log, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, log_path, limit_s=ready_s)
    except RuntimeError:
        stop_prometheus(proc)
        raise
    return proc, url


def backfill_rules(rule_file: Path, url: str, start_s: int, end_s: int, data: Path, workdir: Path,
                   eval_interval_s: int = 60, timeout_s: float | None = None) -> list[str]:
    """Evaluate the recording rules of `rule_file` against the Prometheus at `url` from `start_s`
    to `end_s` (`promtool tsdb create-blocks-from rules`) and put the blocks into the TSDB `data`
    (the server must be restarted to read them): the blocks' names. RuntimeError if promtool fails."""
    out = workdir / "recorded-blocks"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    built = subprocess.run([_require("promtool"), "tsdb", "create-blocks-from", "rules", "--quiet", f"--url={url}",
                            f"--start={start_s}", f"--end={end_s}", f"--eval-interval={eval_interval_s}s",
                            f"--output-dir={out}", str(rule_file)], capture_output=True, text=True, timeout=timeout_s)
    if built.returncode != 0:
        raise RuntimeError(f"promtool could not backfill {rule_file.name}: {(built.stderr or built.stdout)[-2000:]}")
    moved = []
    for block in out.iterdir():
        if block.is_dir():
            shutil.move(str(block), str(data / block.name))
            moved.append(block.name)
    return moved


def stop_prometheus(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def serving(data: Path, workdir: Path) -> Iterator[str]:
    """`start_prometheus` for the length of a block: its URL."""
    proc, url = start_prometheus(data, workdir)
    try:
        yield url
    finally:
        stop_prometheus(proc)


def _wait_ready(url: str, proc: subprocess.Popen, log_path: Path, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
        with contextlib.suppress(requests.RequestException):
            if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"prometheus was not ready within {limit_s:g} s: {log_path.read_text()[-2000:]}")
