"""`gpumem agent`: serve this node's GPU readings over HTTP, for a DaemonSet on GPU nodes.

    gpumem agent --port 9500            # GET /snapshot, /metrics, /healthz

Readings come from NVML and are cached for `--interval` seconds. Without a GPU or driver
the agent still serves /healthz (503, with the reason) unless `--require-gpu` makes it exit 3.
SIGTERM and Ctrl-C stop it: the listener closes, requests in flight finish, exit 0.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from dataclasses import dataclass, replace
from typing import Any, TextIO

from bot.agent.server import SnapshotCache, make_server
from bot.grammar.requests import AgentRequest
from bot.render.gpus import unavailable_text
from bot.render.i18n import Catalog
from bot.service.deps import Deps
from bot.service.exits import EXIT_NO_EVIDENCE, EXIT_OK, EXIT_USAGE
from bot.service.gpus import NvmlUnavailable, read_gpus

DEFAULT_PORT = 9500


@dataclass
class AgentIo:
    nvml: Any = None
    err: TextIO | None = None
    #: set it to stop the agent (the signal handlers do); None: a fresh Event
    stop: threading.Event | None = None
    #: the host name put on every device when --node gives none ($NODE_NAME, read by `bot.config`)
    node_name: str | None = None


def run(request: AgentRequest, lang: str, deps: Deps) -> int:
    return serve(request, lang, AgentIo(node_name=deps.env.node_name))


def serve(request: AgentRequest, lang: str, io: AgentIo) -> int:
    cat = Catalog.load(lang)
    err = io.err or sys.stderr
    node = request.node or io.node_name or socket.gethostname()

    def read():
        snap = read_gpus(io.nvml)
        return replace(snap, devices=tuple(replace(d, host=node) for d in snap.devices))

    cache = SnapshotCache(read, request.interval)
    try:
        cache.get()
    except NvmlUnavailable as e:
        if request.require_gpu:
            print(unavailable_text(cat, e), file=err)
            return EXIT_NO_EVIDENCE
        print(cat.t("agent_cli.serving_without_gpu", reason=unavailable_text(cat, e)), file=err)
    try:
        server = make_server(request.host, request.port, cache, cat)
    except OSError as e:
        # the port as text: the catalog would group its digits like an amount
        print(cat.t("agent_cli.cannot_listen", host=request.host, port=str(request.port), error=e.strerror or str(e)),
              file=err)
        return EXIT_USAGE
    stop = io.stop or threading.Event()
    restore = _on_signals(stop)
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="gpumem-agent",
                              daemon=True)
    worker.start()
    host, port = server.server_address[:2]
    print(cat.t("agent_cli.listening", url=f"http://{host}:{port}", node=node), file=err, flush=True)
    try:
        while not stop.wait(0.5) and worker.is_alive():
            pass
    finally:
        server.shutdown()
        server.server_close()
        restore()
    print(cat.t("agent_cli.stopped"), file=err, flush=True)
    return EXIT_OK


def _on_signals(stop: threading.Event):
    """SIGTERM (kubelet) and SIGINT set `stop`; returns a function that puts the old handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for s, handler in old.items():
            signal.signal(s, handler)

    return restore


