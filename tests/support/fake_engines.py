"""Stand-in inference server and exporter endpoints: a tiny HTTP server on a loopback port that
serves scenario metrics text at `/metrics` the way vLLM, TGI, SGLang or a DCGM exporter do.

>>> engine = FakeEngine("vllm:num_requests_waiting 3\\n").start()
>>> import urllib.request
>>> urllib.request.urlopen(engine.url + "/metrics").read().decode()
'vllm:num_requests_waiting 3\\n'
>>> engine.stop()
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.support.loopback import LoopbackHTTPServer, LoopbackServer

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"

#: the port each engine (or exporter) listens on by default inside its pod
DEFAULT_PORTS = {"vllm": 8000, "tgi": 80, "sglang": 30000, "dcgm": 9400}


@dataclass
class FakeEngine(LoopbackServer):
    """Serves `metrics_text` at `path`; `/health` answers 200; anything else 404."""

    metrics_text: str = ""
    path: str = "/metrics"
    status: int = 200
    latency_s: float = 0.0
    hits: list[str] = field(default_factory=list)
    _server: LoopbackHTTPServer | None = None

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> FakeEngine:
        return cls(Path(path).read_text(encoding="utf-8"), **kwargs)


class _Handler(BaseHTTPRequestHandler):
    engine: FakeEngine
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        engine = self.engine
        engine.hits.append(self.path)
        if engine.latency_s:
            time.sleep(engine.latency_s)
        route = self.path.split("?", 1)[0]
        if route == engine.path:
            code, body, ctype = engine.status, engine.metrics_text.encode(), PROMETHEUS_TEXT
        elif route == "/health":
            code, body, ctype = 200, b"", "text/plain"
        else:
            code, body, ctype = 404, b"404 page not found\n", "text/plain"
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass


FakeEngine.handler, FakeEngine.handler_attr, FakeEngine.thread_name = _Handler, "engine", "fake-engine"
