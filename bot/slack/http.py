"""The HTTP face of `gpumem serve`: /slack/events, /health and /metrics on a threaded server.

The WSGI app routes by path; waitress serves it with one thread per request in flight (Bolt
holds a request until the listener acks, so a burst of 50 commands needs 50 threads, not a
queue behind one). Bolt's own `app.start()` is a single-threaded development server.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot.slack.metrics import CONTENT_TYPE, BotMetrics

log = logging.getLogger("gpumem.http")

EVENTS_PATH = "/slack/events"
_JSON = [("Content-Type", "application/json")]


def wsgi_app(bolt_app: Any, metrics: BotMetrics, health: Callable[[], dict[str, Any]],
             events: bool = True) -> Callable[..., Iterable[bytes]]:
    """Route /slack/events to Bolt (when `events`), /health and /metrics to the bot."""
    slack = SlackRequestHandler(bolt_app, path=EVENTS_PATH) if events else None

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        started = time.perf_counter()
        label = path if path in (EVENTS_PATH, "/health", "/metrics") else "other"
        try:
            if path == EVENTS_PATH and slack is not None and method == "POST":
                try:
                    return list(slack(environ, start_response))
                except (ValueError, TypeError, AttributeError, KeyError) as e:
                    # Bolt parses the body (a `payload` field is JSON) before it checks the
                    # signature; a body it cannot parse is the sender's error, not ours
                    log.warning("unparseable Slack request body (%s)", type(e).__name__)
                    start_response("400 Bad Request", _JSON, sys.exc_info())
                    return [b'{"error": "invalid request body"}']
            if path == "/health" and method in ("GET", "HEAD"):
                state = health()
                start_response("200 OK" if state.get("ok") else "503 Service Unavailable", _JSON)
                return [json.dumps(state).encode()]
            if path == "/metrics" and method == "GET":
                start_response("200 OK", [("Content-Type", CONTENT_TYPE)])
                return [metrics.exposition()]
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        finally:
            metrics.http_seconds.labels(path=label).observe(time.perf_counter() - started)

    return app


class HttpServer:
    """waitress on `host:port` (port 0: any free port, see `.port`), run on a thread or in front."""

    def __init__(self, app: Callable[..., Any], host: str, port: int, threads: int):
        from waitress.server import create_server

        self._server = create_server(app, host=host, port=port, threads=threads, ident="gpumem",
                                     connection_limit=max(100, threads * 2), channel_timeout=30,
                                     clear_untrusted_proxy_headers=True)
        self.host = str(self._server.effective_host)
        self.port = int(self._server.effective_port)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def serve_forever(self) -> None:
        """Serve until `close()`; the sockets are closed on this thread, never under a running select."""
        from waitress import wasyncore

        try:
            while not self._stop.is_set():
                wasyncore.loop(timeout=0.2, map=self._server._map, count=1)
        finally:
            self._server.task_dispatcher.shutdown(timeout=5)
            wasyncore.close_all(self._server._map)

    def start(self) -> HttpServer:
        self._thread = threading.Thread(target=self.serve_forever, name="gpumem-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
