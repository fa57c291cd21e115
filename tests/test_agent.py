"""`gpumem agent` over real HTTP on 127.0.0.1: /snapshot, /metrics, /healthz, caching, shutdown."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import traceback
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.agent.command import AgentIo, serve
from bot.agent.server import AgentServer, SnapshotCache, make_server
from bot.grammar.commands import parse_argv
from bot.render.i18n import Catalog
from bot.service.gpus import NvmlUnavailable
from collectors.nvml.reader import read_gpus
from runbooks.model.units import GIB, MIB
from tests.support import fake_nvml
from tests.support.deploy import render
from tests.support.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

ROOT = Path(__file__).resolve().parent.parent


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def node_fake(**kw) -> FakeNvml:
    return FakeNvml([
        FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-aaaa", used_bytes=70 * GIB, total_bytes=80 * GIB,
                reserved_bytes=512 * MIB, util_gpu_pct=87, util_mem_pct=41,
                processes=[FakeProcess(4242, 69 * GIB), FakeProcess(4343, None)]),
        FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-bbbb", mig=[
            FakeMig(2, "3g.40gb", "MIG-1111", used_bytes=35 * GIB, total_bytes=40 * GIB,
                    processes=[FakeProcess(77, 34 * GIB)])]),
    ], process_names={4242: "python3"}, **kw)


@pytest.fixture
def agent() -> Iterator[tuple[str, FakeNvml, Ticks, AgentServer]]:
    nvml, ticks = node_fake(), Ticks()
    yield from _serve(nvml, ticks)


@pytest.fixture
def gpuless_agent() -> Iterator[tuple[str, FakeNvml, Ticks, AgentServer]]:
    nvml, ticks = FakeNvml([], init_error=fake_nvml.NVMLError_LibraryNotFound), Ticks()
    yield from _serve(nvml, ticks)


def _serve(nvml: FakeNvml, ticks: Ticks):
    cache = SnapshotCache(lambda: read_gpus(nvml), max_age_s=5, clock=ticks)
    server = make_server("127.0.0.1", 0, cache, Catalog.load("en"))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", nvml, ticks, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


# ---------------------------------------------------------------------------- endpoints


def test_snapshot_endpoint_serves_one_sample_with_the_snapshot_cli_keys(agent):
    base, *_ = agent
    status, ctype, body = get(base + "/snapshot")
    doc = json.loads(body)
    assert (status, ctype) == (200, "application/json; charset=utf-8")
    assert list(doc) == ["schema_version", "source", "devices", "taken_at", "driver_version", "cuda_version"]
    assert [(d["index"], d["mig_profile"], d["used_bytes"]) for d in doc["devices"]] == [
        ("0", None, 70 * GIB), ("1:2", "3g.40gb", 35 * GIB)]
    assert doc["devices"][0]["processes"][0] == {"pid": 4242, "name": "python3", "used_bytes": 69 * GIB}


def test_metrics_parse_back_with_device_and_process_labels(agent):
    base, *_ = agent
    status, ctype, body = get(base + "/metrics")
    m = metrics(body)
    assert status == 200 and ctype.startswith("text/plain; version=")
    h100 = {"gpu": "0", "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3", "mig_profile": ""}
    mig = {"gpu": "1:2", "uuid": "MIG-1111", "name": "NVIDIA A100-SXM4-80GB", "mig_profile": "3g.40gb"}
    assert m["gpumem_nvml_up"] == [({}, 1.0)]
    assert m["gpumem_gpu_memory_used_bytes"] == [(h100, 70 * GIB), (mig, 35 * GIB)]
    assert m["gpumem_gpu_memory_total_bytes"] == [(h100, 80 * GIB), (mig, 40 * GIB)]
    assert m["gpumem_gpu_memory_reserved_bytes"] == [(h100, 512 * MIB), (mig, 0.0)]
    assert m["gpumem_gpu_utilization_ratio"] == [(h100, 0.87)]  # NotSupported on the MIG slice: no sample
    assert m["gpumem_gpu_memory_bandwidth_utilization_ratio"] == [(h100, 0.41)]
    # pid 4343 has no memory figure (usedGpuMemory None): no sample rather than a false 0
    assert m["gpumem_gpu_process_memory_bytes"] == [
        ({**h100, "pid": "4242", "process": "python3"}, 69 * GIB),
        ({**mig, "pid": "77", "process": ""}, 34 * GIB),
    ]


def test_healthz_is_ok_with_a_gpu(agent):
    base, *_ = agent
    assert get(base + "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")


def test_unknown_path_is_404(agent):
    base, *_ = agent
    assert get(base + "/nope")[0] == 404


def test_readings_are_cached_for_the_interval_and_taken_again_after_it(agent):
    base, nvml, ticks, server = agent
    for path in ("/snapshot", "/metrics", "/healthz", "/metrics"):
        get(base + path)
    assert (nvml.count_calls, server.cache.reads) == (1, 1)
    ticks.t += 4.9
    get(base + "/metrics")
    assert nvml.count_calls == 1
    ticks.t += 0.1
    get(base + "/metrics")
    assert (nvml.count_calls, nvml.init_calls, nvml.shutdown_calls) == (2, 2, 2)


def test_concurrent_scrapes_share_one_reading(agent):
    base, nvml, *_ = agent
    threads = [threading.Thread(target=get, args=(base + "/metrics",)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert nvml.count_calls == 1


def test_a_reading_that_breaks_unexpectedly_is_a_500_and_the_agent_keeps_serving(agent, capsys):
    base, nvml, _, _ = agent

    def broken(handle):
        raise RuntimeError("driver returned garbage")

    real = nvml.nvmlDeviceGetName
    nvml.nvmlDeviceGetName = broken
    assert get(base + "/metrics")[0] == 500
    nvml.nvmlDeviceGetName = real
    assert get(base + "/healthz")[0] == 200
    assert "RuntimeError('driver returned garbage')" in capsys.readouterr().err


def test_registering_the_collector_does_not_read_nvml(agent):
    *_, server = agent
    assert server.cache.reads == 0


# ------------------------------------------------------------------------------- no GPU


def test_healthz_is_503_with_the_reason_without_a_gpu(gpuless_agent):
    base, *_ = gpuless_agent
    status, _, body = get(base + "/healthz")
    assert status == 503
    assert body.startswith("No NVIDIA driver or GPU on this machine (libnvidia-ml.so not found).")


def test_metrics_say_nvml_is_down_without_a_gpu(gpuless_agent):
    base, *_ = gpuless_agent
    status, _, body = get(base + "/metrics")
    assert status == 200
    assert metrics(body) == {"gpumem_nvml_up": [({}, 0.0)]}


def test_the_cached_nvml_error_does_not_grow_with_every_request(gpuless_agent):
    base, _, _, server = gpuless_agent
    depths = []
    for _ in range(300):
        assert get(base + "/healthz")[0] == 503
        try:
            server.cache.get()
        except NvmlUnavailable as e:
            depths.append(len(traceback.extract_tb(e.__traceback__)))
            assert e.__cause__ is None and e.__context__ is None
    assert server.cache.reads == 1, "the one reading is reused"
    assert depths[0] == depths[-1] <= 2, depths[:3] + depths[-3:]


def test_snapshot_is_503_with_a_reason_key_without_a_gpu(gpuless_agent):
    base, *_ = gpuless_agent
    status, _, body = get(base + "/snapshot")
    assert status == 503
    assert json.loads(body)["error"] == "library_not_found"


def test_missing_driver_is_asked_again_only_after_the_interval(gpuless_agent):
    base, nvml, ticks, _ = gpuless_agent
    for _ in range(3):
        get(base + "/healthz")
    assert nvml.init_calls == 1
    ticks.t += 5
    get(base + "/healthz")
    assert nvml.init_calls == 2


# ------------------------------------------------------------------------------- the verb


def test_require_gpu_exits_3_with_the_reason_and_serves_nothing():
    err = io.StringIO()
    args = parse_argv(["agent", "--port", "0", "--host", "127.0.0.1", "--require-gpu"])
    nvml = FakeNvml([], init_error=fake_nvml.NVMLError_DriverNotLoaded)
    assert serve(args, "en", AgentIo(nvml=nvml, err=err)) == 3
    assert err.getvalue().startswith("The NVIDIA driver is installed but not loaded")


def test_a_port_in_use_is_a_usage_error_naming_it():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err = io.StringIO()
        args = parse_argv(["agent", "--port", str(port), "--host", "127.0.0.1"])
        assert serve(args, "en", AgentIo(nvml=node_fake(), err=err)) == 2
    assert f"Cannot listen on 127.0.0.1:{port}" in err.getvalue()


def test_agent_labels_devices_with_the_node_and_stops_when_asked():
    err, stop = _LineWriter(), threading.Event()
    args = parse_argv(["agent", "--port", "0", "--host", "127.0.0.1", "--node", "gpu-node-7"])
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(serve(args, "en", AgentIo(node_fake(), err, stop))))
    thread.start()
    url = err.wait_for("listening on ").split("listening on ", 1)[1].split()[0]
    doc = json.loads(get(url + "/snapshot")[2])
    stop.set()
    thread.join(timeout=30)
    assert {d["host"] for d in doc["devices"]} == {"gpu-node-7"}
    assert result == [0]
    assert err.text.endswith("gpumem agent stopped.\n")


class _LineWriter(io.StringIO):
    """stderr that a test can wait on for a whole line."""

    def __init__(self) -> None:
        super().__init__()
        self.text = ""
        self._cond = threading.Condition()

    def write(self, text: str) -> int:
        with self._cond:
            self.text += text
            self._cond.notify_all()
        return len(text)

    def _line(self, part: str) -> str | None:
        return next((line for line in self.text.splitlines(keepends=True)
                     if part in line and line.endswith("\n")), None)

    def wait_for(self, part: str) -> str:
        with self._cond:
            assert self._cond.wait_for(lambda: self._line(part) is not None, timeout=30)
            return self._line(part) or ""


def test_sigterm_stops_the_real_process_cleanly():
    """The DaemonSet's shutdown path: the real CLI in a child process, real pynvml, SIGTERM."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "bot", "agent", "--host", "127.0.0.1", "--port", "0",
                             "--lang", "en"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not any("listening on" in line for line in lines):
            line = proc.stderr.readline()
            assert line, f"agent exited early: {lines}"
            lines.append(line)
        url = lines[-1].split("listening on ", 1)[1].split()[0]
        status = get(url + "/healthz")[0]
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert status in (200, 503)  # whether this machine has a GPU is not the point here
    assert proc.returncode == 0
    assert rest.endswith("gpumem agent stopped.\n")


# ------------------------------------------------------------------------------ manifest


def _manifest() -> dict[str, dict]:
    """The agent's objects as the nvml-agent component installs them (deploy/components/nvml-agent)."""
    return {d["kind"]: d for d in render("read-only", ("nvml-agent",))
            if d["metadata"]["name"] == "gpumem-agent" or d["kind"] == "Namespace"}


def test_daemonset_manifest_parses_and_its_args_are_a_valid_agent_command():
    docs = _manifest()
    assert set(docs) >= {"Namespace", "DaemonSet", "Service"}
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["gpumem"]
    args = parse_argv(container["args"])
    assert (args.verb, args.host, args.port) == ("agent", "0.0.0.0", 9500)
    assert container["ports"][0]["containerPort"] == args.port
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert docs["DaemonSet"]["metadata"]["namespace"] == "gpumem"


def test_daemonset_runs_on_gpu_nodes_without_taking_a_gpu():
    pod = _manifest()["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in term["matchExpressions"]
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert pod["runtimeClassName"] == "nvidia"
    resources = container["resources"]
    assert not any("nvidia.com" in k for part in resources.values() for k in part)
    assert set(resources["limits"]) == {"cpu", "memory"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "NODE_NAME" in env


def test_daemonset_is_locked_down():
    pod = _manifest()["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod.get("hostPID", False) is False
    assert pod["automountServiceAccountToken"] is False


def test_service_and_scrape_annotations_point_at_the_agent_port():
    docs = _manifest()
    svc = docs["Service"]
    pod_meta = docs["DaemonSet"]["spec"]["template"]["metadata"]
    assert svc["spec"]["selector"] == docs["DaemonSet"]["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["port"] == 9500 and svc["spec"]["ports"][0]["targetPort"] == "metrics"
    for scrape in (svc["metadata"]["annotations"], pod_meta["annotations"]):
        assert scrape == {"prometheus.io/scrape": "true", "prometheus.io/port": "9500",
                               "prometheus.io/path": "/metrics"}
