"""The threaded server under the WSGI app: waitress, one thread per request in flight.

Bolt holds a request until the listener acks, so a burst of 50 commands needs 50 threads, not
a queue behind one (Bolt's own `app.start()` is a single-threaded development server).
waitress's own refusals (413 over the body limit, 400, 431) are logged as one line each, like
the WSGI app's (`bot.http.app.log_refusal`).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any

from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.server import create_server
from waitress.task import ErrorTask

from bot.http.app import log_refusal, path_label
from bot.telemetry.metrics import BotMetrics


class HttpServer:
    """waitress on `host:port` (port 0: any free port, see `.port`), run on a thread or in front."""

    def __init__(self, app: Callable[..., Any], host: str, port: int, threads: int, *, max_body_bytes: int,
                 metrics: BotMetrics | None = None):
        # waitress refuses Content-Length >= its limit: one more byte keeps "over the limit" the rule
        self._server = create_server(app, host=host, port=port, threads=threads, ident="gpumem",
                                     connection_limit=max(100, threads * 2), channel_timeout=30,
                                     clear_untrusted_proxy_headers=True,
                                     max_request_body_size=max_body_bytes + 1)
        self._server.channel_class = _channel_class(max_body_bytes, metrics)
        self._server.handle_accept = types.MethodType(_accept_waiting, self._server)
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


#: connections taken per loop turn at most, so that one turn stays short under a flood
ACCEPT_BATCH = 128


def _accept_waiting(server: Any) -> None:
    """Accept every connection waiting on the listening socket, not one per loop turn.

    waitress takes one connection each time the loop wakes, and each turn also reads and writes
    every open channel: in a burst of 50 slash commands the 50th was read about 50 turns after
    the first, its ack late by that much while the app sat idle. This takes them all in one
    turn, up to the connection limit (what `readable()` checks between turns) and `ACCEPT_BATCH`.
    """
    limit = server.adj.connection_limit
    accept_one = type(server).handle_accept
    for _ in range(ACCEPT_BATCH):
        held = len(server._map)
        if held >= limit:
            return
        accept_one(server)
        if len(server._map) == held:  # nothing waiting (EAGAIN) or an accept that failed
            return


def _channel_class(limit: int, metrics: BotMetrics | None) -> type:
    """waitress's channel, with its own error answers (413, 400, 431) logged as one line."""

    class LoggedErrorTask(ErrorTask):
        def execute(self) -> None:
            request = self.request
            error = request.error
            too_large = getattr(error, "code", 0) == 413
            reason = "body_too_large" if too_large else str(getattr(error, "reason", "bad_request")).lower().replace(" ", "_")
            size = request.content_length if request.content_length else None
            if too_large and request.chunked:
                size = f"over {limit}"
            log_refusal(str(request.command or "?"), path_label(str(request.path or "")), reason, size, limit)
            if metrics is not None:
                metrics.http_refused.labels(reason=reason).inc()
            super().execute()

    class Channel(HTTPChannel):
        error_task_class = LoggedErrorTask

    return Channel
