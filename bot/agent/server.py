"""The agent's HTTP surface: /snapshot (JSON), /metrics (Prometheus), /healthz.

Readings are cached for `max_age_s` so that scrapes from several Prometheus replicas, probes
and humans share one NVML reading; a failure to read is cached the same way, so a node
without a driver is not asked again on every probe.

>>> cache = SnapshotCache(lambda: GpuSnapshot(source="nvml"), max_age_s=5)
>>> server = make_server("127.0.0.1", 0, cache, Catalog.load("en"))  # doctest: +SKIP
>>> threading.Thread(target=server.serve_forever, daemon=True).start()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bot.render.gpus import snapshot_json, unavailable_text
from bot.render.i18n import Catalog
from bot.service.gpus import NvmlUnavailable
from runbooks.model.evidence import GpuSnapshot

DEVICE_LABELS = ("gpu", "uuid", "name", "mig_profile")
PROCESS_LABELS = (*DEVICE_LABELS, "pid", "process")


class SnapshotCache:
    """The latest reading, taken again only when older than `max_age_s` (a monotonic clock)."""

    def __init__(self, read: Callable[[], GpuSnapshot], max_age_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self._read, self._max_age_s, self._clock = read, max_age_s, clock
        self._lock = threading.Lock()
        self._at: float | None = None
        self._value: GpuSnapshot | None = None
        #: (reason, detail) of the last NvmlUnavailable; a fresh exception is raised from it each time
        self._error: tuple[str, str] | None = None
        self.reads = 0

    def get(self) -> GpuSnapshot:
        """The cached snapshot, or raise the cached NvmlUnavailable."""
        with self._lock:  # concurrent scrapes wait for one reading instead of each taking one
            now = self._clock()
            if self._at is None or now - self._at >= self._max_age_s:
                self.reads += 1
                try:
                    self._value, self._error = self._read(), None
                except NvmlUnavailable as e:
                    # keep what it said, not where: the original's traceback (and its cause)
                    # would pin frames, and re-raising one object grows it by a frame a call
                    self._value, self._error = None, (e.reason, e.detail)
                self._at = now
            if self._error is not None:
                raise NvmlUnavailable(*self._error)
            assert self._value is not None
            return self._value


class GpuMemoryCollector(Collector):
    """Prometheus families from the cached snapshot; `gpumem_nvml_up` says whether NVML answered."""

    def __init__(self, cache: SnapshotCache):
        self.cache = cache

    def describe(self) -> Iterator[Metric]:
        # Without describe() the registry would call collect() (and read NVML) at registration.
        yield from _families()

    def collect(self) -> Iterator[Metric]:
        up, used, total, reserved, util, bandwidth, process = _families()
        try:
            snap = self.cache.get()
        except NvmlUnavailable:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for d in snap.devices:
            labels = [d.index, d.uuid or "", d.name or "", d.mig_profile or ""]
            for family, value in ((used, d.used_bytes), (total, d.total_bytes), (reserved, d.reserved_bytes)):
                if value is not None:
                    family.add_metric(labels, value)
            if d.util_gpu_pct is not None:
                util.add_metric(labels, d.util_gpu_pct / 100)
            if d.util_mem_bandwidth_pct is not None:
                bandwidth.add_metric(labels, d.util_mem_bandwidth_pct / 100)
            for p in d.processes:
                if p.used_bytes is not None:
                    process.add_metric([*labels, "" if p.pid is None else str(p.pid), p.name or ""], p.used_bytes)
        yield from (up, used, total, reserved, util, bandwidth, process)


def _families() -> tuple[GaugeMetricFamily, ...]:
    return (
        GaugeMetricFamily("gpumem_nvml_up", "1 when NVML answered at the last reading, 0 when it is unavailable"),
        GaugeMetricFamily("gpumem_gpu_memory_used_bytes",
                          "GPU memory allocated by contexts (NVML used; excludes the driver reserve when "
                          "reserved_bytes is exported)", labels=DEVICE_LABELS),
        GaugeMetricFamily("gpumem_gpu_memory_total_bytes", "GPU (or MIG slice) memory in total",
                          labels=DEVICE_LABELS),
        GaugeMetricFamily("gpumem_gpu_memory_reserved_bytes", "GPU memory the driver and firmware keep back",
                          labels=DEVICE_LABELS),
        GaugeMetricFamily("gpumem_gpu_utilization_ratio", "share of the last sample period a kernel ran (0..1)",
                          labels=DEVICE_LABELS),
        GaugeMetricFamily("gpumem_gpu_memory_bandwidth_utilization_ratio",
                          "share of the last sample period device memory was read or written (0..1); not fullness",
                          labels=DEVICE_LABELS),
        GaugeMetricFamily("gpumem_gpu_process_memory_bytes", "GPU memory used by one process (host PID)",
                          labels=PROCESS_LABELS),
    )


class AgentServer(ThreadingHTTPServer):
    daemon_threads = True  # a hung client must not keep the process alive at shutdown

    def __init__(self, address: tuple[str, int], cache: SnapshotCache, cat: Catalog):
        super().__init__(address, _Handler)
        self.cache, self.cat = cache, cat
        self.registry = CollectorRegistry()
        self.registry.register(GpuMemoryCollector(cache))


def make_server(host: str, port: int, cache: SnapshotCache, cat: Catalog) -> AgentServer:
    """Bind (port 0 picks a free port: `server.server_address[1]`); call serve_forever() to answer."""
    return AgentServer((host, port), cache, cat)


class _Handler(BaseHTTPRequestHandler):
    server: AgentServer
    server_version = "gpumem-agent"

    def do_GET(self) -> None:
        try:
            self._route(urlsplit(self.path).path.rstrip("/") or "/")
        except Exception as e:  # a reading that broke unexpectedly: answer, and keep serving
            self.log_error("%s failed: %r", self.path, e)
            self._send(500, "text/plain; charset=utf-8", f"internal error: {type(e).__name__}\n".encode())

    def _route(self, path: str) -> None:
        if path == "/healthz":
            self._healthz()
        elif path == "/metrics":
            self._send(200, CONTENT_TYPE_LATEST, generate_latest(self.server.registry))
        elif path == "/snapshot":
            self._snapshot()
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /snapshot, /metrics or /healthz\n")

    def _healthz(self) -> None:
        try:
            self.server.cache.get()
        except NvmlUnavailable as e:
            self._send(503, "text/plain; charset=utf-8", (unavailable_text(self.server.cat, e) + "\n").encode())
            return
        self._send(200, "text/plain; charset=utf-8", b"ok\n")

    def _snapshot(self) -> None:
        try:
            doc = snapshot_json(self.server.cache.get())
            status = 200
        except NvmlUnavailable as e:
            doc = {"error": e.reason, "message": unavailable_text(self.server.cat, e)}
            status = 503
        self._send(status, "application/json; charset=utf-8",
                   json.dumps(doc, ensure_ascii=False, indent=2).encode() + b"\n")

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # one line per scrape would drown the pod's log; NVML trouble shows in /healthz
